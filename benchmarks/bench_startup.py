"""Install size and startup time of refold as a user gets it: a fresh venv, ``pip install`` of a
wheel built from a source tree, then ``import refold`` and ``refold --help`` timed in that venv.

    python benchmarks/bench_startup.py                       # this checkout
    python benchmarks/bench_startup.py --source /tmp/old     # another tree (e.g. a git archive of main)
    python benchmarks/bench_startup.py --out benchmarks/results/startup.txt --json benchmarks/results/startup.json

Targets (issue 15): core install <= 120 MB, ``import refold`` <= 0.3 s, ``refold --help`` <= 0.5 s.
The venv sees no system site-packages, so every dependency is downloaded and counted. Times are
medians of ``--runs`` fresh interpreters; the load average is printed because the machine may be
shared (CPU time, user + sys, is less sensitive to that than wall time).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGETS = {"install_mb": 120.0, "import_s": 0.3, "help_s": 0.5}


def dir_bytes(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            p = Path(root, f)
            if not p.is_symlink():
                total += p.stat().st_size
    return total


def site_packages(venv: Path) -> Path:
    return next((venv / "lib").glob("python3*/site-packages"))


def distributions(sp: Path) -> list[tuple[str, int]]:
    """(distribution, bytes) from each dist-info's RECORD, largest first."""
    out = []
    for info in sp.glob("*.dist-info"):
        record = info / "RECORD"
        if not record.exists():
            continue
        size = 0
        for line in record.read_text().splitlines():
            rel = line.split(",", 1)[0]
            p = (sp / rel).resolve()
            if p.is_file():
                size += p.stat().st_size
        out.append((info.name.split("-")[0], size))
    return sorted(out, key=lambda x: -x[1])


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """(wall s, cpu s of the child, stdout) of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, r.stdout


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--source", type=Path, default=Path(__file__).resolve().parents[1], help="source tree to build")
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--label", default=None, help="name of this measurement in the output")
    ap.add_argument("--out", type=Path, default=None, help="append the text report here")
    ap.add_argument("--json", type=Path, default=None, help="write the figures here (merged by label)")
    args = ap.parse_args()
    label = args.label or args.source.name
    with tempfile.TemporaryDirectory(prefix="refold-bench-startup-") as tmp:
        work = Path(tmp)
        wheel_dir = work / "dist"
        subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheel_dir), str(args.source)],
            check=True,
        )
        wheel = next(wheel_dir.glob("refold-*.whl"))
        venv = work / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        py = venv / "bin" / "python"
        sp = site_packages(venv)
        baseline = dir_bytes(sp)  # pip (and setuptools on old Pythons) alone
        t0 = time.perf_counter()
        subprocess.run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(wheel)], check=True)
        install_s = time.perf_counter() - t0
        total = dir_bytes(sp)
        dists = [(n, b) for n, b in distributions(sp) if n not in ("pip", "setuptools")]
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
        env["PYTHONDONTWRITEBYTECODE"] = "0"
        import_code = "import time; t = time.perf_counter(); import refold; print(time.perf_counter() - t)"
        use_code = (
            "import time; t = time.perf_counter(); from refold import Config, Renderer, load; "
            "print(time.perf_counter() - t)"
        )
        refold_bin = str(venv / "bin" / "refold")
        timed([str(py), "-c", "import refold.cli"], env)  # write the .pyc files once
        rows: dict[str, list[float]] = {k: [] for k in ("import", "import_cpu", "use", "help", "help_cpu", "python")}
        for _ in range(args.runs):
            _, cpu, out = timed([str(py), "-c", import_code], env)
            rows["import"].append(float(out))
            rows["import_cpu"].append(cpu)
            rows["use"].append(float(timed([str(py), "-c", use_code], env)[2]))
            wall, cpu, _ = timed([refold_bin, "--help"], env)
            rows["help"].append(wall)
            rows["help_cpu"].append(cpu)
            rows["python"].append(timed([str(py), "-c", "pass"], env)[0])
        med = {k: statistics.median(v) for k, v in rows.items()}
    mb = (total - baseline) / 1e6
    figures = {
        "label": label,
        "install_mb": round(mb, 1),
        "venv_site_packages_mb": round(total / 1e6, 1),
        "baseline_pip_mb": round(baseline / 1e6, 1),
        "install_s": round(install_s, 1),
        "import_refold_s": round(med["import"], 3),
        "import_refold_process_cpu_s": round(med["import_cpu"], 3),
        "from_refold_import_config_renderer_load_s": round(med["use"], 3),
        "refold_help_wall_s": round(med["help"], 3),
        "refold_help_cpu_s": round(med["help_cpu"], 3),
        "bare_python_wall_s": round(med["python"], 3),
        "runs": args.runs,
        "load_average_1m": round(os.getloadavg()[0], 2),
        "largest": [[n, round(b / 1e6, 1)] for n, b in dists[:12]],
        "python": sys.version.split()[0],
    }
    ok = {
        "install": mb <= TARGETS["install_mb"],
        "import": med["import"] <= TARGETS["import_s"],
        "help": med["help"] <= TARGETS["help_s"],
    }
    lines = [
        f"## {label} ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, Python {figures['python']}, "
        f"load average {figures['load_average_1m']}, medians of {args.runs} runs)",
        f"core install      {mb:7.1f} MB  (fresh venv site-packages {total / 1e6:.1f} MB less pip's "
        f"{baseline / 1e6:.1f} MB)   target <= {TARGETS['install_mb']:g} MB  {'ok' if ok['install'] else 'OVER'}",
        f"import refold     {med['import']:7.3f} s   (process CPU {med['import_cpu']:.3f} s)"
        f"                       target <= {TARGETS['import_s']:g} s   {'ok' if ok['import'] else 'OVER'}",
        f"refold --help     {med['help']:7.3f} s   wall, CPU {med['help_cpu']:.3f} s (bare python "
        f"{med['python']:.3f} s)   target <= {TARGETS['help_s']:g} s   {'ok' if ok['help'] else 'OVER'}",
        f"from refold import Config, Renderer, load: {med['use']:.3f} s",
        "largest distributions (MB): " + ", ".join(f"{n} {round(b / 1e6, 1)}" for n, b in dists[:12]),
        "",
    ]
    text = "\n".join(lines)
    print(text)
    if args.out:
        with args.out.open("a", encoding="utf-8") as f:
            f.write(text + "\n")
    if args.json:
        data = json.loads(args.json.read_text()) if args.json.exists() else {}
        data[label] = figures
        args.json.write_text(json.dumps(data, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

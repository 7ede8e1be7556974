"""Benchmark ``refold view``: build time, report size against the trajectory, open time in Chromium.

Default run: a synthetic 150-call mini-swe-agent run with large outputs (2-30 KB, repeated file
reads, PROGRESS/STALE lines), the packaged demo run, and any trajectory paths given as arguments.
For each: build the report (all replay policies + 16 switch combinations, qwen3.6 tokenizer),
then open it in headless Chromium (``/usr/bin/chromium``) five times and take the median time
from navigation start to the page being ready (data parsed, first call drawn), plus the median
time to jump to the last call.

Long runs (``--long 500:all 1000:all 2000:base 10000:base``): ``benchmarks/synthetic.py``'s
mini-swe-agent runs of that many steps, built with every policy (``all``) or base alone, chars4
tokenizer (as ``refold view RUN --tokenizer chars4``), two opens; reports build time, the peak
resident memory of the build (a child process per case) and, in the page, the jump from call 1
to the last and one step back from there.

Run:  PYTHONPATH=src python benchmarks/bench_viewer.py [TRAJ ...] [--out benchmarks/results/viewer.txt]
      PYTHONPATH=src python benchmarks/bench_viewer.py --long 500:all 2000:base --no-default
      PYTHONPATH=src python benchmarks/bench_viewer.py --screenshot docs/viewer.png
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from importlib import resources
from pathlib import Path
from typing import Any

from refold.lab.viewer import build_report
from refold.loaders import load

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
    "--disable-quic",
]
DEMO = "django__django-11477.traj.json.gz"


def synthetic_trajectory(calls: int = 150, seed: int = 7) -> dict[str, Any]:
    """A mini-swe-agent-1 trajectory: file reads (some repeated), greps, test runs, big logs."""
    rng = random.Random(seed)
    files = {
        f"src/pkg/module_{i}.py": [
            f"    line_{i}_{j} = compute({j}, '{'x' * rng.randrange(10, 60)}')"
            for j in range(rng.randrange(200, 700))
        ]
        for i in range(12)
    }
    messages: list[dict[str, Any]] = [
        {
            "role": "system",
            "content": "You are a helpful assistant that can interact with a computer shell. " * 20,
        },
        {
            "role": "user",
            "content": "<pr_description>\n"
            + "The parser drops the last token. " * 40
            + "\n</pr_description>",
        },
    ]
    for step in range(1, calls + 1):
        kind = rng.random()
        name = rng.choice(list(files))
        if kind < 0.45:  # a file range, often one read before
            lines = files[name]
            span = rng.randrange(30, 130)
            lo = rng.randrange(0, max(1, len(lines) - span)) // 20 * 20
            command = f"nl -ba {name} | sed -n '{lo + 1},{lo + span}p'"
            out = "\n".join(f"{n:6d}\t{text}" for n, text in enumerate(lines[lo : lo + span], start=lo + 1))
        elif kind < 0.7:
            n = rng.randrange(20, 120)
            command = f"grep -rn compute src | head -{n}"
            out = "\n".join(
                f"{rng.choice(list(files))}:{rng.randrange(1, 700)}:    compute({i})" for i in range(n)
            )
        elif kind < 0.87:
            command = "python -m pytest -q tests"
            out = "\n".join(
                f"tests/test_{i}.py::test_case_{j} {'PASSED' if rng.random() < 0.9 else 'FAILED'}"
                for i in range(8)
                for j in range(rng.randrange(3, 12))
            )
        elif kind < 0.9:  # a big log
            command = "python -m pytest tests -vv 2>&1"
            out = "\n".join(
                f"DEBUG worker-{i % 4} {rng.random():.6f} computing {'y' * rng.randrange(20, 90)}"
                for i in range(300)
            )
        else:
            command = f"sed -i 's/compute/compute_fixed/' {name}"
            out = ""
        window = [s for s in range(max(1, step - 3), step) if rng.random() < 0.3]
        stale = ", ".join(map(str, window)) or "-"
        content = (
            f"PROGRESS: step {step}: {command[:40]}\nSTALE: {stale}\nTHOUGHT: "
            + "Reasoning. " * rng.randrange(5, 60)
            + f"\n\n```bash\n{command}\n```"
        )
        messages.append({"role": "assistant", "content": content})
        messages.append(
            {"role": "user", "content": f"<returncode>0</returncode>\n<output>\n{out}\n</output>"}
        )
    return {
        "trajectory_format": "mini-swe-agent-1",
        "instance_id": f"synthetic-{calls}-calls",
        "messages": messages,
    }


SCRUB_JS = """() => { const out = []; for (let c = 1; c <= N; c++) { const t = performance.now(); setCall(c);
  out.push(performance.now() - t); } out.sort((a, b) => a - b); return out[Math.floor(out.length / 2)]; }"""


def open_times(path: Path, repeats: int = 5, *, scrub: bool = True) -> tuple[float, float, float]:
    """Median ms: navigation start to ready, jump from call 1 to the last, one scrub step."""
    from playwright.sync_api import sync_playwright

    ready: list[float] = []
    jump: list[float] = []
    scrubs: list[float] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        for _ in range(repeats):
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(path.as_uri())
            page.wait_for_selector("body[data-ready='1']")
            ready.append(page.evaluate("performance.now()"))
            n = page.evaluate("N")
            t0 = page.evaluate("performance.now()")
            page.evaluate(f"setCall({n})")
            jump.append(page.evaluate("performance.now()") - t0)
            if scrub:
                scrubs.append(page.evaluate(SCRUB_JS))
            else:  # a long run: one step back from the last call
                t0 = page.evaluate("performance.now()")
                page.evaluate(f"setCall({n - 1})")
                scrubs.append(page.evaluate("performance.now()") - t0)
            page.close()
        browser.close()
    return statistics.median(ready), statistics.median(jump), statistics.median(scrubs) if scrubs else 0.0


def bench(path: Path, label: str, tmp: Path) -> str:
    history = load(path)
    t0 = time.perf_counter()
    page = build_report(history)
    build_s = time.perf_counter() - t0
    out = tmp / (path.name + ".html")
    out.write_text(page, encoding="utf-8")
    raw = path.read_bytes()
    traj = len(gzip.decompress(raw)) if raw[:2] == b"\x1f\x8b" else len(raw)
    html = out.stat().st_size
    ready_ms, jump_ms, scrub_ms = open_times(out)
    return (
        f"{label:<40} calls {len(history):>4}  json {traj / 1024:>5,.0f} KiB  html {html / 1024:>5,.0f} KiB "
        f"({html / traj:4.2f}x)  build {build_s:5.1f} s  open {ready_ms:4.0f} ms  "
        f"jump-to-last {jump_ms:4.0f} ms  scrub step {scrub_ms:4.0f} ms"
    )


BUILD_ONE = """import json, resource, sys, time
from refold.lab.viewer import build_report
from refold.loaders import load
path, out, which = sys.argv[1:4]
history = load(path)
variants = None if which == "all" else which.split(",")
t0 = time.perf_counter()
page = build_report(history, tokenizer="chars4", variants=variants, mechanisms=variants is None)
build_s = time.perf_counter() - t0
open(out, "w", encoding="utf-8").write(page)
print(json.dumps({"build_s": build_s, "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def bench_long(steps: int, which: str, tmp: Path, *, browser: bool = True) -> str:
    """A synthetic mini-swe-agent run of ``steps`` steps, built in a child process (peak memory)."""
    sys.path.insert(0, str(Path(__file__).parent))
    from synthetic import synthetic_messages

    traj = tmp / f"long-{steps}.json"
    traj.write_text(
        json.dumps(
            {
                "trajectory_format": "mini-swe-agent-1",
                "instance_id": f"synthetic-{steps}",
                "messages": synthetic_messages(steps),
            }
        ),
        encoding="utf-8",
    )
    out = tmp / f"long-{steps}-{which}.html"
    run = subprocess.run(
        [sys.executable, "-c", BUILD_ONE, str(traj), str(out), which],
        capture_output=True,
        text=True,
        check=True,
    )
    got = json.loads(run.stdout.strip().splitlines()[-1])
    html = out.stat().st_size
    line = (
        f"{f'synthetic mini, {steps} steps, {which}':<40} json {traj.stat().st_size / 1024:>6,.0f} KiB  "
        f"html {html / 1024:>6,.0f} KiB  build {got['build_s']:6.1f} s  peak RSS {got['peak_mib']:6,.0f} MiB"
    )
    if browser:
        ready_ms, jump_ms, step_ms = open_times(out, repeats=2, scrub=False)
        line += f"  open {ready_ms:5.0f} ms  jump-to-last {jump_ms:5.0f} ms  step back {step_ms:4.0f} ms"
    return line


def screenshot(out: Path) -> None:
    """docs/viewer.png: the packaged demo run with simulated (hindsight) STALE marks, a note open."""
    from playwright.sync_api import sync_playwright

    demo = Path(str(resources.files("refold") / "data" / DEMO))
    with tempfile.TemporaryDirectory() as d:
        html = Path(d) / "demo.html"
        html.write_text(build_report(load(demo), stale="hindsight-aggressive"), encoding="utf-8")
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            page = browser.new_page(viewport={"width": 1440, "height": 860}, device_scale_factor=1)
            page.goto(html.as_uri() + "#call=24&policy=refold")
            page.wait_for_selector("body[data-ready='1']")
            notes = page.locator("#prompt .row[data-shown='note']")
            if notes.count():
                notes.last.click()
            page.screenshot(path=str(out), full_page=True)
            browser.close()
    print(f"wrote {out}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="*", type=Path)
    ap.add_argument("--out", type=Path, help="also write the results here")
    ap.add_argument("--screenshot", type=Path, help="only write the README screenshot here")
    ap.add_argument("--long", nargs="*", default=[], metavar="STEPS:WHICH", help="long synthetic runs, e.g. 1000:all 2000:base")
    ap.add_argument("--no-default", action="store_true", help="skip the default cases (synthetic 150, demo)")
    ap.add_argument("--no-browser", action="store_true", help="long runs: build only, do not open them")
    args = ap.parse_args()
    if args.screenshot:
        screenshot(args.screenshot)
        return
    lines = [
        f"refold view benchmark (Python {platform.python_version()}, {platform.machine()}, {os.cpu_count()} CPUs, "
        "headless Chromium, median of 5 opens; all 8 replay policies + 16 switch combinations, qwen3.6 tokenizer)",
        "json = trajectory JSON uncompressed; open = navigation start to first call drawn; "
        "scrub step = median setCall(c) over c = 1..N",
    ]
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        synth = tmp / "synthetic-150.traj.json"
        synth.write_text(json.dumps(synthetic_trajectory()), encoding="utf-8")
        cases = [
            (synth, "synthetic, 150 calls, large outputs"),
            (Path(str(resources.files("refold") / "data" / DEMO)), "demo " + DEMO),
        ]
        cases = [] if args.no_default else cases
        cases += [(p, p.name[:40]) for p in args.paths]
        for path, label in cases:
            line = bench(path, label, tmp)
            print(line, flush=True)
            lines.append(line)
        for spec in args.long:
            steps, _, which = spec.partition(":")
            line = bench_long(int(steps), which or "all", tmp, browser=not args.no_browser)
            print(line, flush=True)
            lines.append(line)
    if args.out:
        args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()

"""Wall and CPU time of the whole test suite (the README's ``python -m pytest``), for issue 10's target
of <= 120 s on 2 cores. CPU time (user + sys of pytest and everything it starts) depends much less
on what else runs on the machine than wall time (on a box at load 10 it still varies by ~10%);
so the load average (before, during, after) is recorded next to it, and so is each worker's busy
time (the sum of its tests' durations, from a JUnit XML): how evenly the scheduler split the work.

    python benchmarks/bench_suite.py                      # the suite as configured (two workers)
    python benchmarks/bench_suite.py -n 0                 # extra pytest arguments, e.g. one process
    python benchmarks/bench_suite.py --out benchmarks/results/suite.txt
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="append the result to this file")
    ap.add_argument("--top", type=int, default=15, help="slowest tests to list")
    args, pytest_args = ap.parse_known_args()
    junit = Path(tempfile.mkdtemp()) / "suite.xml"
    # -vv: with addopts' -q that is verbosity 1, one "[gwN] PASSED node" line per test
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-vv", f"--junitxml={junit}"]
    cmd += ["--durations", str(args.top), *pytest_args]
    load_before = os.getloadavg()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    samples: list[float] = []  # the 1-min load average every 5 s while the suite runs
    done = threading.Event()
    sampler = threading.Thread(target=sample_load, args=(samples, done), daemon=True)
    sampler.start()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    done.set()
    sampler.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    load_after = os.getloadavg()
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    lines = proc.stdout.splitlines()
    summary = next((ln for ln in reversed(lines) if re.search(r"\d+ (passed|failed)", ln)), "(no summary)")
    slowest = [ln for ln in lines if re.match(r"\s*[\d.]+s (call|setup|teardown) ", ln)][: args.top]
    busy = worker_busy(lines, junit)
    shown = [a for a in cmd[3:] if not a.startswith("--junitxml") and a != "-vv"]
    report = "\n".join(
        [
            f"$ {' '.join(['python', '-m', 'pytest', *shown])}   (CI={os.environ.get('CI', '')!r})",
            f"exit {proc.returncode}: {summary.strip('= ')}",
            f"wall {wall:.1f} s, CPU {cpu:.1f} s (user+sys, pytest and its children), {os.cpu_count()} cores",
            f"load average before {load_before[0]:.1f}, after {load_after[0]:.1f} (1 min)"
            + (f"; during: min {min(samples):.1f}, mean {sum(samples) / len(samples):.1f}, max {max(samples):.1f}" if samples else ""),
            "busy (sum of test durations): " + ", ".join(f"{w} {t:.1f} s" for w, t in sorted(busy.items())),
            "slowest:",
            *(f"  {ln.strip()}" for ln in slowest),
            "",
        ]
    )
    print(report)
    if args.out:
        with args.out.open("a", encoding="utf-8") as f:
            f.write(report + "\n")
    return proc.returncode


def sample_load(samples: list[float], done: threading.Event) -> None:
    while not done.wait(5.0):
        samples.append(os.getloadavg()[0])


def worker_busy(lines: list[str], junit: Path) -> dict[str, float]:
    """Seconds of test time (setup + call + teardown) each xdist worker spent, or the one process."""
    worker: dict[str, str] = {}
    for ln in lines:
        if m := re.match(r"\[(gw\d+)\] \[\s*\d+%\] [A-Z]+ (.+?)\s*$", ln):
            parts = m.group(2).split("::")
            worker[f"{parts[0]}::{parts[-1]}"] = m.group(1)  # a class in between is dropped; ids may hold spaces
    busy: Counter[str] = Counter()
    if not junit.exists():
        return {}
    for case in ET.parse(junit).iter("testcase"):
        module = "/".join((case.get("classname") or "").split(".")[:2])  # tests.test_x[.Class]
        node = f"{module}.py::{case.get('name')}"
        busy[worker.get(node, "main" if not worker else "unmatched")] += float(case.get("time") or 0)
    return dict(busy)


if __name__ == "__main__":
    sys.exit(main())

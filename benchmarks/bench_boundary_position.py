"""Where the cost rule may move the boundary: ``boundary.position`` seed / window, and the peak weight.

    python benchmarks/bench_boundary_position.py DIR [DIR ...] [--runs seed:0.1,window:0.1] [--cache vllm] [--out FILE]

For each position:peak_weight pair, refold's ``default`` against ``base`` (caches, KV and cost are
SIMULATED): prompt tokens, median per-run peak KV, cost and the sessions costing more than base, as
benchmarks/bench_default.py counts them. The default is window:0.1 (``refold.mechanisms.boundary``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench_default import default_boundary, ratios_line

from refold.lab.replay.paths import collect_paths
from refold.lab.replay.runner import replay_paths
from refold.lab.replay.settings import Settings


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--runs", default="seed:0.1,window:0.1,window:0.05")
    ap.add_argument("--cache", default="vllm")
    ap.add_argument("--out")
    a = ap.parse_args(argv)
    files = collect_paths(a.paths)
    lines = [f"boundary.position and peak_weight on {len(files)} files ({', '.join(a.paths)}); {a.cache} profile; KV and cost SIMULATED", ""]
    for run in a.runs.split(","):
        position, weight = run.split(":")
        with default_boundary(position=position, peak_weight=float(weight)):
            res = replay_paths(files, Settings(policies=("base", "default"), cache=a.cache, per_call=True, validate=False), jobs=2)
        lines.append(f"position {position:6s} peak_weight {weight:<5}  {ratios_line(res)}")
        print(lines[-1], flush=True)
    if a.out:
        Path(a.out).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

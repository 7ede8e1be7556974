"""What pricing peak KV memory above a cached token would buy: ``boundary.peak_weight`` swept.

    python benchmarks/bench_peak_weight.py DIR [DIR ...] [--weights 0.1,0.15,0.2,0.3] [--out FILE]

For each weight, refold's ``default`` against ``base`` (vllm profile; caches, KV and cost are
SIMULATED): prompt tokens, median per-run peak KV and cost, as benchmarks/bench_default.py counts
them. The default is 0.1, a cached token's price (``refold.mechanisms.boundary``).
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
    ap.add_argument("--weights", default="0.1,0.15,0.2,0.3")
    ap.add_argument("--out")
    a = ap.parse_args(argv)
    files = collect_paths(a.paths)
    lines = [f"boundary.peak_weight swept on {len(files)} files ({', '.join(a.paths)}); vllm profile; KV and cost SIMULATED", ""]
    for w in (float(x) for x in a.weights.split(",")):
        with default_boundary(peak_weight=w):
            res = replay_paths(files, Settings(policies=("base", "default"), per_call=True, validate=False), jobs=1)
        lines.append(f"peak_weight {w:<5}  {ratios_line(res)}")
        print(lines[-1], flush=True)
    if a.out:
        Path(a.out).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

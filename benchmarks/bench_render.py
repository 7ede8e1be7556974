"""Per-call render time of the incremental renderer over recorded runs.

Renders every model call of every trajectory in the given folders (default: the dev set in
../shared/data/trajectories if present, else the runs shipped with the repo) under the seed's
policy and reports median and p99 per-call time and the ratio of late-call to early-call time
(median over the last quarter of each run's calls / median over its first quarter).

    python benchmarks/bench_render.py [PATH ...] [--repeat 5]
"""

from __future__ import annotations

import argparse
import gc
import platform
import statistics
import sys
import time
from pathlib import Path

from refold.config import Config
from refold.history import load
from refold.policy import Policy
from refold.render import Renderer

HERE = Path(__file__).resolve().parent


def files(paths: list[str]) -> list[Path]:
    out: list[Path] = []
    for p in map(Path, paths):
        out += sorted(q for q in p.rglob("*") if ".traj" in q.name) if p.is_dir() else [p]
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("paths", nargs="*")
    ap.add_argument("--repeat", type=int, default=5, help="render each run this many times, keep the fastest per call")
    ap.add_argument("--mask-after", type=int, default=None)
    args = ap.parse_args()
    default = HERE.parent.parent / "shared" / "data" / "trajectories"
    paths = args.paths or ([str(default)] if default.is_dir() else [str(HERE.parent / "tests" / "data")])
    runs = files(paths)
    policy = Policy(mask_after=args.mask_after)
    all_ms: list[float] = []
    ratios: list[float] = []
    early_all: list[float] = []
    late_all: list[float] = []
    for f in runs:
        h = load(f)
        best = [float("inf")] * len(h)
        for _ in range(args.repeat):
            r = Renderer(Config(policy=policy))
            gc.disable()
            for t in range(len(h)):
                t0 = time.perf_counter()
                r.render(h, t)
                best[t] = min(best[t], (time.perf_counter() - t0) * 1000)
            gc.enable()
        all_ms += best
        q = max(1, len(best) // 4)
        early, late = statistics.median(best[:q]), statistics.median(best[-q:])
        early_all += best[:q]
        late_all += best[-q:]
        ratios.append(late / early)
    all_ms.sort()
    p99 = all_ms[min(len(all_ms) - 1, int(0.99 * len(all_ms)))]
    print(f"refold render benchmark  python {platform.python_version()}  {platform.machine()}")
    print(f"policy: {policy.model_dump(exclude_defaults=True) or 'seed default (k=3, dedup+fold+chunk)'}")
    print(f"runs: {len(runs)} from {', '.join(paths)}   calls: {len(all_ms)}   repeat: {args.repeat} (fastest kept)")
    print(f"per-call render ms: median {statistics.median(all_ms):.4f}  p99 {p99:.4f}  max {all_ms[-1]:.4f}")
    print(
        f"late/early ratio: pooled {statistics.median(late_all) / statistics.median(early_all):.2f}  "
        f"per-run median {statistics.median(ratios):.2f}  per-run max {max(ratios):.2f}"
    )
    print("targets: median <= 0.1 ms, late/early <= 2")


if __name__ == "__main__":
    sys.exit(main())

"""``Policy.mask_by``: masking by arrival (the default) against masking by last use, per cache profile.

    python benchmarks/bench_mask_by.py DIR [DIR ...] [--out FILE] [--jobs 2]

For every cache profile (simulated caches, as ``bench_default.py``): prompt tokens and simulated
cost against base's, the hidden-then-needed rate and tokens lost for good, of refold's default
config with ``mask_by = arrival`` and with ``mask_by = use``; then the render time per call (CPU
clock, one fresh Renderer per history, every call rendered as an agent loop does) under each,
after an untimed pass of both.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from refold.config import Config
from refold.lab.replay import policies as pol
from refold.lab.replay import runner
from refold.lab.replay.paths import collect_paths
from refold.lab.replay.projectors import Options, RendererProjector
from refold.lab.replay.runner import replay_paths
from refold.lab.replay.settings import Settings
from refold.loaders import load_all
from refold.render import Renderer

sys.path.insert(0, str(Path(__file__).parent))
from bench_default import CACHES, totals  # noqa: E402


def _modes(argv: list[str]) -> tuple[str, ...]:
    """``--modes a,b`` (read before the worker pool forks: the variants are registered at import)."""
    if "--modes" in argv:
        i = argv.index("--modes")
        return tuple(argv[i + 1].split(","))
    return ("arrival", "use", "edit")


MODES = _modes(sys.argv)


def _variant(mode: str) -> Any:
    def make(o: Options) -> RendererProjector:
        p = pol._default(o)
        policy = p.policy.model_copy(update={"mask_by": mode})
        return RendererProjector(f"mask-{mode}", p.config.replace(policy=policy))

    return make


for _m in MODES:  # registered before the worker pool forks: workers inherit them
    pol.POLICIES[f"mask-{_m}"] = _variant(_m)
runner.STALE_POLICIES = runner.STALE_POLICIES | {f"mask-{m}" for m in MODES}  # replayed as ``default`` is


def render_ms(files: list[Path], mode: str) -> list[float]:
    """CPU ms per call of every history, rendered call by call by a fresh renderer."""
    config = Config.parse(mask_by=mode)
    out: list[float] = []
    for f in files:
        try:
            sessions = load_all(f)
        except Exception:  # a file the replay cannot read either: not timed
            continue
        for h in sessions:
            r = Renderer(config)
            for t in range(len(h) + 1):
                start = time.process_time()
                r.render(h, t)
                out.append((time.process_time() - start) * 1000)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--out", default=None)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--modes", default=",".join(MODES), help="mask_by values compared (arrival,use,edit)")
    a = ap.parse_args(argv)
    files = collect_paths(a.paths)
    names = [f"mask-{m}" for m in MODES]
    lines = [
        f"# python benchmarks/bench_mask_by.py {' '.join(a.paths)}   ({datetime.now(UTC):%Y-%m-%d %H:%M} UTC)",
        f"# {len(files)} files; caches and cost are SIMULATED; ratios are against base",
        "",
    ]
    for cache in CACHES:
        res = replay_paths(files, Settings(policies=("base", *names), cache=cache, per_call=False, validate=False), jobs=a.jobs)
        base = totals(res, "base")
        for mode, name in zip(MODES, names, strict=True):
            d = totals(res, name)
            lines.append(
                f"{cache:18s} {mode:8s} tokens {d['prompt_tokens'] / base['prompt_tokens']:.3f}x  "
                f"cost {d['cost_usd'] / base['cost_usd']:.3f}x  hidden-then-needed {d['needed_rate']:.2%}  "
                f"lost {int(d['removed_tokens_lost'])}"
            )
    lines.append("")
    for mode in MODES:  # an untimed pass each: lazy imports and regex caches load once, not in the first mode's figures
        render_ms(files, mode)
    for mode in MODES:
        ms = sorted(render_ms(files, mode))
        if ms:
            p99 = ms[min(len(ms) - 1, int(len(ms) * 0.99))]
            lines.append(f"render {mode:8s} {len(ms)} calls  median {statistics.median(ms):.2f} ms  p99 {p99:.2f} ms  total {sum(ms) / 1000:.1f} s (CPU)")
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if a.out:
        Path(a.out).write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""How much of the default's cost is the cost rule's guess of the calls still to come? (SIMULATED)

    python benchmarks/bench_horizon.py DIR [DIR ...] [--cache anthropic,openai] [--out benchmarks/results/horizon.txt]

The cost rule moves the boundary when J(moved) <= J(kept) with R = max(5, t) calls still expected
(``refold.mechanisms.boundary``). This benchmark replays ``default`` against ``base`` with R as
the rule has it, and with an oracle that knows each run's true number of remaining calls (no
renderer can know it: an upper bound on what a better guess of R could give), and with R = t/2.
Caches, KV and cost are SIMULATED. The oracle replaces ``should_move`` in this process only.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import refold.lab.replay.projectors as projectors
import refold.render.renderer as renderer
from refold.config import Config
from refold.history import History
from refold.lab.replay.paths import collect_paths
from refold.lab.replay.runner import replay_paths
from refold.lab.replay.settings import Settings
from refold.mechanisms import boundary

HORIZONS: dict[str, Callable[[int, int], int]] = {
    "max(5, t) (the rule)": lambda t, n: max(5, t),
    "max(5, t/2)": lambda t, n: max(5, t // 2),
    "true remaining (oracle)": lambda t, n: max(n - t - 1, 0),
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--cache", default="anthropic,openai,vllm")
    ap.add_argument("--out", default="benchmarks/results/horizon.txt")
    a = ap.parse_args(argv)
    files = collect_paths(a.paths)
    n_steps = [0]
    original = projectors.RendererProjector.prompts

    def prompts(self: projectors.RendererProjector, history: History, final: bool = False) -> Iterator[projectors.Prompt]:
        n_steps[0] = len(history)
        yield from original(self, history, final)

    projectors.RendererProjector.prompts = prompts  # type: ignore[method-assign]
    lines = [f"default vs base on {len(files)} files ({', '.join(a.paths)}) with the cost rule's horizon R replaced; SIMULATED caches and cost", ""]
    for cache in a.cache.split(","):
        for label, horizon in HORIZONS.items():
            def should_move(config: Config, t: int, kept: boundary.Candidate, moved: boundary.Candidate, idle_s: float | None = None,
                            horizon: Callable[[int, int], int] = horizon) -> bool:
                prices = boundary.PRICES[config.cache]
                if idle_s is not None and prices.ttl_s is not None and idle_s > prices.ttl_s:
                    return True  # a cold cache: as the rule does
                r = horizon(t, n_steps[0])
                return boundary.cost(moved, prices, r) <= boundary.cost(kept, prices, r)

            renderer.should_move = should_move  # type: ignore[assignment]
            res = replay_paths(files, Settings(policies=("base", "default"), cache=cache, per_call=False, validate=False), jobs=1)
            tot: dict[str, dict[str, float]] = {p: {"tokens": 0.0, "cost": 0.0} for p in ("base", "default")}
            peaks: dict[str, list[int]] = {}
            for r in res:
                if r.error:
                    continue
                for p in tot:
                    d: dict[str, Any] = r.policies[p]
                    tot[p]["tokens"] += d["prompt_tokens"]
                    tot[p]["cost"] += d["cost_usd"]
                if r.policies["base"].get("peak_kv_tokens"):
                    pair = peaks.setdefault(r.file.split("#")[0], [0, 0])
                    pair[0] = max(pair[0], r.policies["default"]["peak_kv_tokens"])
                    pair[1] = max(pair[1], r.policies["base"]["peak_kv_tokens"])
            peak = statistics.median(x / y for x, y in peaks.values()) if peaks else float("nan")
            lines.append(
                f"{cache:10s} R = {label:26s} tokens {tot['default']['tokens'] / tot['base']['tokens']:.3f}x  "
                f"cost {tot['default']['cost'] / tot['base']['cost']:.3f}x  median peak KV {peak:.3f}x"
            )
        lines.append("")
    Path(a.out).write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What the hidden-then-needed measure adds to a replay's time.

For every run in the given paths (files or folders): the CPU time of ``replay_history`` (which
includes the measure) under the chosen policies, and the CPU time of the measure alone (index the
history, check every prompt of every policy, prompts rendered beforehand). Reports the totals and
``replay / (replay - needed)``: how much slower replay is than it would be without the measure.
Best of ``--repeat`` per run; the tokenizer is loaded before timing.

    python benchmarks/bench_needed.py PATH... [--policies base,refold,refold-best,masking] [--repeat 3]
"""

from __future__ import annotations

import argparse
import gc
import platform
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from refold.history import History
from refold.lab.replay.needed import NeededIndex, hidden_then_needed
from refold.lab.replay.paths import collect_paths
from refold.lab.replay.runner import TaskResult, iter_prompts, replay_history
from refold.lab.replay.settings import Settings
from refold.loaders import load_all
from refold.tokens import Tokenizer


def _cpu(fn: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        gc.collect()
        start = time.process_time()
        fn()
        best = min(best, time.process_time() - start)
    return best


def _needed_only(h: History, tok: Tokenizer, prompts: Mapping[str, Sequence[Any]]) -> None:
    index = NeededIndex(h, tok)
    for p in prompts.values():
        hidden_then_needed(h, p, tok, index=index)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--policies", default="base,refold,refold-best,masking")
    ap.add_argument("--tokenizer", default="qwen3.6")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    policies = tuple(p for p in args.policies.split(",") if p)
    settings = Settings(policies=policies, tokenizer=args.tokenizer, validate=False, per_call=False)
    tok = settings.options().tokenizer
    files = collect_paths(args.paths)
    total_replay = total_needed = 0.0
    calls = 0
    sessions = 0
    for f in files:
        try:
            histories = load_all(f)  # one session per agent of a multi-agent file
        except Exception as e:  # noqa: BLE001 - a benchmark skips what replay would report
            print(f"skip {f}: {e}", file=sys.stderr)
            continue
        for h in histories:
            sessions += 1
            prompts = {
                p: [(x.t, x.messages, x.origins) for x in iter_prompts(h, p, tokenizer=args.tokenizer)]
                for p in policies
            }
            calls += len(h)
            total_replay += _cpu(partial(replay_history, h, settings, TaskResult(file=f)), args.repeat)
            total_needed += _cpu(partial(_needed_only, h, tok, prompts), args.repeat)
    rest = total_replay - total_needed
    print(f"refold hidden-then-needed benchmark  python {platform.python_version()}  {platform.machine()}")
    print(
        f"runs: {len(files)} ({sessions} sessions) from {', '.join(Path(p).name for p in args.paths)}   calls: {calls}   "
        f"policies: {','.join(policies)}   repeat: {args.repeat} (best kept, CPU time)"
    )
    print(
        f"replay CPU s: {total_replay:.2f}  of which hidden-then-needed: {total_needed:.2f} "
        f"({total_needed / total_replay:.0%})"
    )
    print(f"replay time with / without the measure: {total_replay / rest:.2f}x  (target <= 2x)")


if __name__ == "__main__":
    main()

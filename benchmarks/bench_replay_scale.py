"""How `refold replay` and `refold view` scale with run length: synthetic runs of 250..2,000 steps.

Each case runs in a child process (its own peak RSS): the replay engine (``replay_paths`` with the
default Settings: every policy, qwen3.6, vLLM cache, cache validation on base), the view data
build (``build_report`` with the ``--view`` policies, no switch combinations, qwen3.6), and token
counting alone on every base prompt (rendered beforehand): ``tokens`` = each prompt's id list, as
``measure`` gets it for the cache simulator; ``count`` = only its length (compact, clear-tool-uses);
``policies`` = the replay, with the CPU seconds of each policy's ``measure`` (the base run for cache
validation counts under ``base`` too).
Runs are ``benchmarks/synthetic.py``'s mini-swe-agent runs written as mini-swe-agent-1 files.
The growth exponent between two sizes is log(t2/t1)/log(n2/n1) (1 = linear, 2 = quadratic), on
CPU seconds of the child (wall seconds are shown too; they swing with the load of a shared box).

Run:  PYTHONPATH=src python benchmarks/bench_replay_scale.py [--sizes 250,500,1000,2000]
          [--what replay,policies,view,tokens,count] [--out benchmarks/results/replay_scale.txt --label after]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent

CHILD = r"""
import json, resource, sys, time
path, what, view = sys.argv[1:4]
from refold.loaders import load
t0, c0 = time.perf_counter(), time.process_time()
extra = {}
if what in ("replay", "policies"):
    from refold.lab.replay import Settings, replay_paths
    if what == "policies":  # CPU seconds of each policy's measure (its renderer, tokens, cache, checks)
        from refold.lab.replay import runner
        measure = runner.measure
        def timed(history, projector, *a, **k):
            c = time.process_time()
            try:
                return measure(history, projector, *a, **k)
            finally:
                extra[projector.name] = round(extra.get(projector.name, 0) + time.process_time() - c, 2)
        runner.measure = timed
    (r,) = replay_paths([path], Settings())
    assert r.error is None, r.error
    if what == "replay":
        extra["base_prompt_tokens"] = r.policies["base"]["prompt_tokens"]
elif what == "view":
    from refold.lab.viewer import build_report
    every = view == "all"  # refold view's default: every policy and the 16 switch combinations
    page = build_report(load(path), variants=None if every else view.split(","), mechanisms=every)
    extra["html_bytes"] = len(page)
else:  # tokens / count: every base prompt's ids as measure gets them, or just their number
    # (what the compact and clear-tool-uses policies need); rendering is not timed
    from refold.lab.replay import Settings, make_projector
    from refold import chat_tokens
    h = load(path)
    tok = Settings().options().tokenizer
    prompts = [p.messages for p in make_projector("base", Settings().options()).prompts(h)]
    try:
        from refold.prompt_tokens import PromptTokens
    except ImportError:  # before: every prompt tokenized whole (per-message memo)
        PromptTokens = None
    t0, c0 = time.perf_counter(), time.process_time()
    if what == "count" and PromptTokens is not None:
        counter = PromptTokens(tok)
        total = sum(counter.count(m) for m in prompts)
    elif what == "count":
        total = sum(chat_tokens.count_messages(m, tok) for m in prompts)
    elif PromptTokens is not None:
        counter = PromptTokens(tok)
        total = sum(len(counter.ids(m)) for m in prompts)
    else:
        total = sum(len(chat_tokens.prompt_token_ids(m, tok)) for m in prompts)
    extra["base_prompt_tokens"] = total
seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"seconds": seconds, "cpu": cpu, "peak_mib": peak, **extra}))
"""


def write_run(steps: int, folder: Path) -> Path:
    sys.path.insert(0, str(HERE))
    from synthetic import synthetic_messages

    path = folder / f"synthetic-{steps}.json"
    run = {"trajectory_format": "mini-swe-agent-1", "instance_id": f"synthetic-{steps}", "messages": synthetic_messages(steps)}
    path.write_text(json.dumps(run), encoding="utf-8")
    return path


def run_case(path: Path, what: str, view: str) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), what, view], capture_output=True, text=True, env=os.environ
    )
    if out.returncode:
        raise SystemExit(f"{what} {path.name} failed:\n{out.stderr[-2000:]}")
    got: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="250,500,1000,2000")
    ap.add_argument("--what", default="replay,view,tokens")
    ap.add_argument("--view", default="base,default,refold", help="policies of the view build ('all': as refold view)")
    ap.add_argument("--label", default="", help="a title for this block of results (e.g. before/after)")
    ap.add_argument("--out", help="append the results here")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    lines = [
        f"{args.label} ({platform.python_version()}, {platform.machine()}, {os.cpu_count()} CPUs): "
        f"PYTHONPATH=src python benchmarks/bench_replay_scale.py --sizes {args.sizes} --what {args.what} --view {args.view}"
    ]
    print(lines[0], flush=True)
    with tempfile.TemporaryDirectory() as d:
        paths = {n: write_run(n, Path(d)) for n in sizes}
        for what in args.what.split(","):
            prev: tuple[int, float] | None = None
            for n in sizes:
                got = run_case(paths[n], what, args.view)
                s = got["cpu"]
                growth = f"  growth x^{math.log(s / prev[1]) / math.log(n / prev[0]):.2f}" if prev else " " * 14
                extra = "  ".join(f"{k} {v:,}" for k, v in got.items() if k not in ("seconds", "cpu", "peak_mib"))
                line = (
                    f"{what:<7} {n:>5} steps  cpu {s:8.2f} s  wall {got['seconds']:8.2f} s  "
                    f"peak RSS {got['peak_mib']:7,.0f} MiB{growth}  {extra}"
                )
                print(line, flush=True)
                lines.append(line)
                prev = (n, s)
    if args.out:
        with open(args.out, "a", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n\n")


if __name__ == "__main__":
    main()

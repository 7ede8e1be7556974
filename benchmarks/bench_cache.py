"""Benchmark refold.lab.cache simulators on synthetic agent sessions.

21 sessions x 8 "policies" x 100 turns; prompts grow to ~60k tokens; each turn appends the previous
completion and a tool output; policy k re-renders the history every few turns by replacing an
early span (a fold), which invalidates everything after it.  Token lists are rebuilt per turn from
per-message chunks (shared int objects, as a tokenizer cache would give).

Run: PYTHONPATH=src python benchmarks/bench_cache.py
"""

from __future__ import annotations

import random
import time
from itertools import accumulate, chain

from refold.lab.cache import PrefixCacheSim, make_cache

SESSIONS, POLICIES, TURNS = 21, 8, 100


def session_prompts(seed: int, policy: int) -> list[tuple[list[int], list[int], list[int]]]:
    rng = random.Random(seed)
    msgs: list[list[int]] = [[rng.randrange(150_000) for _ in range(3000)]]  # system + task
    out: list[tuple[list[int], list[int], list[int]]] = []
    for turn in range(TURNS):
        prompt = list(chain.from_iterable(msgs))
        gen = [rng.randrange(150_000) for _ in range(rng.randrange(50, 400))]
        bounds = list(accumulate(len(m) for m in msgs))  # message ends (Anthropic lookback unit)
        out.append((prompt, gen, bounds))
        msgs.append(gen)
        msgs.append([rng.randrange(150_000) for _ in range(rng.randrange(100, 1000))])
        if policy and turn % (4 + policy) == 0 and len(msgs) > 6:  # fold one old message
            i = rng.randrange(1, len(msgs) - 4)
            msgs[i] = msgs[i][:20]
    return out


def run(
    name: str, sessions: list[list[tuple[list[int], list[int], list[int]]]], **opts: int
) -> tuple[float, int, int]:
    sim: PrefixCacheSim = make_cache(name, **opts)
    prompt = cached = 0
    t0 = time.perf_counter()
    for turn in range(TURNS):  # interleave sessions like one server would see them
        for s, reqs in enumerate(sessions):
            toks, gen, bounds = reqs[turn]
            r = sim.request(toks, generated=gen, session=s, boundaries=bounds)
            prompt += r.prompt_tokens
            cached += r.cached_tokens
    return time.perf_counter() - t0, prompt, cached


def main() -> None:
    t0 = time.perf_counter()
    data = [[session_prompts(s, p) for s in range(SESSIONS)] for p in range(POLICIES)]
    build = time.perf_counter() - t0
    n_req = SESSIONS * POLICIES * TURNS
    total_tokens = sum(len(t) for pol in data for ses in pol for t, _, _ in ses)
    max_prompt = max(len(t) for pol in data for ses in pol for t, _, _ in ses)
    print(f"workload: {SESSIONS} sessions x {POLICIES} policies x {TURNS} turns = {n_req} requests")
    print(f"prompt tokens total {total_tokens / 1e6:.1f}M, max prompt {max_prompt}, build {build:.1f}s")
    configs: list[tuple[str, dict[str, int]]] = [
        ("vllm", {}),
        ("vllm", {"capacity_blocks": 60_000}),  # ~960k tokens < the 21 sessions working set: evicts
        ("sglang", {}),
        ("sglang", {"capacity_tokens": 240_000}),  # ~Qwen3-32B KV pool on one H200
        ("openai", {}),
        ("anthropic", {}),
        ("deepseek", {}),
        ("none", {}),
    ]
    for name, opts in configs:
        total = 0.0
        prompt = cached = 0
        for pol in data:  # one server per policy
            dt, p, c = run(name, pol, **opts)
            total += dt
            prompt += p
            cached += c
        label = name + "".join(f" {k}={v}" for k, v in opts.items())
        print(
            f"{label:<32} {total:7.2f}s total  {total / n_req * 1e3:6.3f} ms/request  hit rate {cached / prompt:6.1%}"
        )


if __name__ == "__main__":
    main()

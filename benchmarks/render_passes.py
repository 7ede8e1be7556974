"""The passes bench_render makes over a history: timed call by call, traced for memory, traced for
opcodes, and a fresh Renderer's first render (imported by bench_render.py; not a script)."""

from __future__ import annotations

import gc
import json
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

from refold import shell
from refold.config import Config
from refold.history import History
from refold.mechanisms import summary

try:
    from refold.render import Renderer
except ImportError:  # the renderer may live elsewhere after a rewrite; refold exports it
    from refold import Renderer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from synthetic import synthetic_messages  # noqa: E402

CLOCKS: dict[str, Callable[[], float]] = {"cpu": time.thread_time, "wall": time.perf_counter}
_clock: Callable[[], float] = time.thread_time
_overhead = 0.0  # seconds one reading pair of the clock costs, subtracted from each call


def use_clock(name: str) -> float:
    """Time calls with ``name`` (cpu: this thread's CPU time, not inflated by other load); its overhead in s."""
    global _clock, _overhead
    _clock = CLOCKS[name]
    pairs = []
    for _ in range(2000):
        t0 = _clock()
        pairs.append(_clock() - t0)
    _overhead = statistics.median(pairs)
    return _overhead


def timed(h: History, config: Config) -> tuple[list[float], list[float]]:
    """ms of each call t = 0..n, one Renderer, gc off (a collection is not the renderer's cost):
    the render itself, and the render plus reading ``messages`` and ``origins`` (the renderer
    joins those lists on first read, so a caller that reads them pays this)."""
    cold_caches()
    r = Renderer(config)
    out, listed = [], []
    clock = _clock
    gc.collect()
    gc.disable()
    try:
        for t in range(len(h) + 1):
            t0 = clock()
            p = r.render(h, t)
            t1 = clock()
            _ = p.messages, p.origins
            t2 = clock()
            out.append(max(0.0, t1 - t0 - _overhead) * 1000)
            listed.append(max(0.0, t2 - t0 - 2 * _overhead) * 1000)
    finally:
        gc.enable()
    return out, listed


def cold_caches() -> None:
    """Empty the process-wide memo of output summaries: each pass starts as a new run would.

    Without this, synthetic-10000 (whose first 2,000 steps are synthetic-2000's) finds the
    summaries of its first steps cached by the run before it, and its first 5% look cheap."""
    summary._summarize.cache_clear()
    analyzed = getattr(shell, "_analyze", None)  # the shell analysis cache, where there is one
    if analyzed is not None:
        analyzed.cache_clear()


def fastest(h: History, config: Config, repeat: int) -> tuple[list[float], list[float]]:
    best, best_listed = timed(h, config)
    for _ in range(repeat - 1):
        ms, listed = timed(h, config)
        best = [min(a, b) for a, b in zip(best, ms, strict=True)]
        best_listed = [min(a, b) for a, b in zip(best_listed, listed, strict=True)]
    return best, best_listed


def held(build: Callable[[], Any]) -> tuple[Any, int]:
    """What ``build`` returns and the bytes it allocated that are still alive afterwards."""
    gc.collect()
    tracemalloc.start()
    try:
        value = build()
        gc.collect()
        size = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    return value, size


def renderer_bytes(h: History, config: Config) -> int:
    def run() -> Any:
        r = Renderer(config)
        for t in range(len(h) + 1):
            r.render(h, t)
        return r  # kept alive until measured: its caches are what it holds

    return held(run)[1]


def opcodes(h: History, config: Config) -> list[int]:
    """Python opcodes each call t = 0..n executes (``sys.settrace`` opcode events, in an untimed
    pass): a measure of the work per call that the machine's load does not change. C code (list
    slices, dict lookups) counts as the one opcode that calls it."""
    cold_caches()
    r = Renderer(config)
    count = 0

    def local(frame: Any, event: str, arg: Any) -> Any:
        nonlocal count
        if event == "opcode":
            count += 1
        return local

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        frame.f_trace_opcodes = True
        frame.f_trace_lines = False
        return local

    out = []
    for t in range(len(h) + 1):
        before = count
        sys.settrace(tracer)
        try:
            r.render(h, t)
        finally:
            sys.settrace(None)
        out.append(count - before)
    return out


def from_wire(wire: str, source: str) -> History:
    return History.from_messages(json.loads(wire), source=source)


def first_render(n: int, seed: int, configs: dict[str, tuple[str, Config]]) -> list[str]:
    """CPU seconds to build an n-step History from JSON and to render its last call, per config,
    gc on (as in a server), each from cold caches (the summary memo and the shell analysis cache)."""
    wire = json.dumps(synthetic_messages(n, seed))
    lines = []
    for key, (_, config) in configs.items():
        cold_caches()
        t0 = time.thread_time()
        h = History.from_messages(json.loads(wire), source=f"synthetic-{n}")
        t1 = time.thread_time()
        r = Renderer(config).render(h)
        t2 = time.thread_time()
        _ = r.messages
        # the same call with nothing to replay (no decision depends on an earlier call): what any
        # render of it does once (receive, dedup, summarize the masked outputs, lay out)
        one = config.replace(boundary={"rule": "fixed"}, ledger={"budget_tokens": None})
        cold_caches()
        t3 = time.thread_time()
        Renderer(one).render(h)
        t4 = time.thread_time()
        lines.append(
            f"first render {key:8} synthetic-{n} (simulated, seed {seed}): History from JSON {t1 - t0:.2f} s "
            f"({(t1 - t0) / n * 1000:.3f} ms/step), render of call {n} by a fresh Renderer {t2 - t1:.2f} s "
            f"({(t2 - t1) / n * 1000:.3f} ms/call replayed), {len(r.messages)} messages; "
            f"without the replay (fixed boundary, no budget line) {t4 - t3:.2f} s"
        )
    return lines

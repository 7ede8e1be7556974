"""Discrete-event simulation of ``w`` agent sessions sharing one vLLM engine (cache_spec.md §5.1).

Session ``i`` replays trace ``i mod n`` (copy ``i // n``; copies are salted after the part all runs
share, see :func:`.workload.set_shared_prefixes`) and sends its first request at ``i * stagger``
seconds.  Each request, once finished, schedules the session's next request ``tool_delay`` seconds
later (the tool runs).  The engine loop: if nothing is running or waiting, jump to the next
arrival; else schedule one step, advance the clock by the step-time model, finish the step.
Everything is deterministic: no randomness, ties broken by session index.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ...errors import ServerSimError
from ..replay.metrics import percentile
from .engine import Engine, Request
from .steptime import StepTime
from .workload import Trace, salted

__all__ = ["ServerConfig", "SimResult", "check_fits", "find_max_sessions", "simulate"]


@dataclass(frozen=True, slots=True)
class ServerConfig:
    capacity_blocks: int
    block_size: int = 16
    max_num_batched_tokens: int = 8192  # vLLM default on >= 70 GiB GPUs (H100/H200)
    max_num_seqs: int = 1024
    tool_delay: float = 2.0  # seconds between a reply and the session's next request
    stagger: float = 1.0  # session i starts at i * stagger seconds
    free_partial_first: bool = True  # PR #42656 free-queue order
    state_blocks: int = 0  # blocks of per-sequence state a hybrid model pins while running

    def check(self) -> None:
        for name in ("capacity_blocks", "block_size", "max_num_batched_tokens", "max_num_seqs"):
            if getattr(self, name) < 1:
                raise ServerSimError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.tool_delay < 0 or self.stagger < 0:
            raise ServerSimError("tool delay and stagger must be >= 0")


@dataclass(slots=True)
class SimResult:
    """One (policy, w) run.  Every figure is SIMULATED."""

    policy: str
    sessions: int
    requests: int
    prompt_tokens: int
    cached_tokens: int  # prefix hits at each request's first admission (what vLLM reports)
    prefilled_tokens: int  # prompt tokens computed, recompute after preemption included
    output_tokens: int
    preemptions: int
    preempted_requests: int
    evicted_blocks: int
    wait_mean: float
    wait_p50: float
    wait_p99: float
    wait_total_mean: float  # incl. waits after preemption
    ttft_mean: float
    ttft_p50: float
    ttft_p99: float
    peak_blocks: int
    mean_blocks: float  # time-weighted over the makespan
    capacity_blocks: int
    makespan: float
    steps: int

    @property
    def hit_rate(self) -> float:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    @property
    def throughput(self) -> float:
        """Output tokens per simulated second."""
        return self.output_tokens / self.makespan if self.makespan else 0.0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for k, v in d.items():
            if isinstance(v, float):
                d[k] = round(v, 6)
        d["hit_rate"] = round(self.hit_rate, 6)
        d["throughput_tok_s"] = round(self.throughput, 3)
        d["simulated"] = True
        return d


def check_fits(traces: Sequence[Trace], cfg: ServerConfig) -> None:
    """Raise ServerSimError if some request could never fit in the pool alone."""
    b = cfg.block_size
    for t in traces:
        need = -(-t.max_kv_tokens // b) + cfg.state_blocks
        if need > cfg.capacity_blocks:
            raise ServerSimError(
                f"{t.source}: a request needs {need * b:,} KV tokens under {t.policy}, more than the "
                f"pool's {cfg.capacity_blocks * b:,}; raise --kv-tokens/--gpu-gib"
            )


def simulate(
    traces: Sequence[Trace],
    sessions: int,
    cfg: ServerConfig,
    step_time: StepTime,
    *,
    on_step: Callable[[Engine], None] | None = None,
) -> SimResult:
    """Run ``sessions`` concurrent sessions over ``traces`` (one policy) to completion.

    ``on_step(engine)`` (for tests) is called after every schedule and every finished step.
    """
    cfg.check()
    if not traces:
        raise ServerSimError("no recorded runs to simulate")
    if sessions < 1:
        raise ServerSimError(f"sessions must be >= 1, got {sessions}")
    check_fits(traces, cfg)
    n = len(traces)
    session_trace = [traces[i % n] for i in range(sessions)]
    copy = [i // n for i in range(sessions)]
    engine = Engine(
        cfg.capacity_blocks,
        cfg.block_size,
        max_num_batched_tokens=cfg.max_num_batched_tokens,
        max_num_seqs=cfg.max_num_seqs,
        free_partial_first=cfg.free_partial_first,
        state_blocks=cfg.state_blocks,
    )
    heap: list[tuple[float, int, int]] = [
        (i * cfg.stagger, i, 0) for i in range(sessions) if session_trace[i].turns
    ]
    heapq.heapify(heap)
    done_reqs: list[Request] = []
    clock = area = 0.0
    steps = peak = rid = stalls = 0
    while heap or not engine.idle:
        while heap and heap[0][0] <= clock:
            at, sid, k = heapq.heappop(heap)
            tr = session_trace[sid]
            turn = tr.turns[k]
            hashes = salted(turn.hashes, tr.shared_blocks, copy[sid])
            engine.add(Request(rid, sid, k, at, turn.prompt_len, turn.out_len, hashes))
            rid += 1
        if engine.idle:
            clock = heap[0][0]
            continue
        plan = engine.schedule(clock)
        if plan.empty:
            stalls += 1
            if heap and not engine.running:
                clock = max(clock, heap[0][0])
            elif stalls > 3:
                raise ServerSimError("the engine cannot schedule anything (simulator bug)")
            continue
        stalls = 0
        if on_step is not None:
            on_step(engine)
        dt = step_time(plan)
        pinned = engine.pool.pinned
        peak = max(peak, pinned)
        area += pinned * dt
        clock += dt
        steps += 1
        finished = engine.finish_step(plan, clock)
        if on_step is not None:
            on_step(engine)
        for req in finished:
            done_reqs.append(req)
            turns = session_trace[req.session].turns
            nxt = req.turn + 1
            if nxt < len(turns):
                delay = cfg.tool_delay if turns[nxt].after_tool else 0.0
                heapq.heappush(heap, (clock + delay, req.session, nxt))
    return _result(session_trace[0].policy, sessions, done_reqs, engine, cfg, clock, area, peak, steps)


def _result(
    policy: str,
    sessions: int,
    reqs: list[Request],
    engine: Engine,
    cfg: ServerConfig,
    makespan: float,
    area: float,
    peak: int,
    steps: int,
) -> SimResult:
    waits = [r.queue_wait for r in reqs]
    ttft = [r.ttft for r in reqs]
    m = len(reqs) or 1
    return SimResult(
        policy=policy,
        sessions=sessions,
        requests=len(reqs),
        prompt_tokens=sum(r.prompt_len for r in reqs),
        cached_tokens=sum(r.cached_tokens for r in reqs),
        prefilled_tokens=sum(r.prefilled_tokens for r in reqs),
        output_tokens=sum(r.out_len for r in reqs),
        preemptions=engine.preemptions,
        preempted_requests=sum(1 for r in reqs if r.preemptions),
        evicted_blocks=engine.pool.evictions,
        wait_mean=sum(waits) / m,
        wait_p50=percentile(waits, 50),
        wait_p99=percentile(waits, 99),
        wait_total_mean=sum(r.waited for r in reqs) / m,
        ttft_mean=sum(ttft) / m,
        ttft_p50=percentile(ttft, 50),
        ttft_p99=percentile(ttft, 99),
        peak_blocks=peak,
        mean_blocks=area / makespan if makespan else 0.0,
        capacity_blocks=cfg.capacity_blocks,
        makespan=makespan,
        steps=steps,
    )


def find_max_sessions(
    run: Callable[[int], SimResult], ok: Callable[[SimResult], bool], hi: int
) -> tuple[int, dict[int, SimResult]]:
    """Largest ``w`` in 1..hi with ``ok(run(w))``, by bisection (assumes ``ok`` is monotone in w).

    Returns (w, every result computed); w = 0 if even one session fails ``ok``.
    """
    seen: dict[int, SimResult] = {}

    def good(w: int) -> bool:
        if w not in seen:
            seen[w] = run(w)
        return ok(seen[w])

    if good(hi):
        return hi, seen
    lo, top = 0, hi  # good(lo) (or lo == 0), not good(top)
    while top - lo > 1:
        mid = (lo + top) // 2
        if good(mid):
            lo = mid
        else:
            top = mid
    return lo, seen

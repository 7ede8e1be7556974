"""GPU-free simulation of many agent sessions sharing one vLLM server (cache_spec.md §1, §5).

SIMULATED, every figure.  Recorded runs are re-rendered under refold's policies
(:func:`build_trace`); ``w`` sessions replay them concurrently against one engine with a bounded
KV block pool, prefix caching, FCFS admission and preemption by recompute (:class:`Engine`); a
pluggable step-time model turns each engine step into seconds (:mod:`.steptime`).

    traces = [build_trace(load(f), "refold-best") for f in files]
    set_shared_prefixes(traces, 16)
    res = simulate(traces, 32, ServerConfig(capacity_blocks=20_000), make_step_time("roofline"))
"""

from __future__ import annotations

from .engine import BlockPool, Engine, Request, StepPlan
from .sim import ServerConfig, SimResult, check_fits, find_max_sessions, simulate
from .steptime import (
    GPUS,
    MODELS,
    STEP_MODELS,
    StepTime,
    capacity_blocks_for,
    dynamo_step,
    make_step_time,
    roofline_step,
)
from .workload import Trace, Turn, block_hashes, build_trace, salted, set_shared_prefixes

__all__ = [
    "GPUS",
    "MODELS",
    "STEP_MODELS",
    "BlockPool",
    "Engine",
    "Request",
    "ServerConfig",
    "SimResult",
    "StepPlan",
    "StepTime",
    "Trace",
    "Turn",
    "block_hashes",
    "build_trace",
    "check_fits",
    "capacity_blocks_for",
    "dynamo_step",
    "find_max_sessions",
    "make_step_time",
    "roofline_step",
    "salted",
    "set_shared_prefixes",
    "simulate",
]

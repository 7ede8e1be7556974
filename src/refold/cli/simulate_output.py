"""What ``refold simulate`` prints and writes: the table of runs, the largest w per policy, the
assumptions no GPU measurement backs, the JSON report (``refold-serversim-1``) and the plot's series.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console

from ..lab.serversim import SimResult, Trace
from ._output import Column, print_table
from ._plot import Series

FORMAT = "refold-serversim-1"


COLUMNS = (
    Column("policy", left=True),
    Column("w"),
    Column("requests", compact=False),
    Column("wait mean", compact=False),
    Column("wait p50", compact=False),
    Column("wait p99"),
    Column("TTFT mean", compact=False),
    Column("TTFT p99"),
    Column("preempt"),
    Column("hit"),
    Column("KV peak"),
    Column("KV mean", compact=False),
    Column("prefilled", compact=False),
    Column("makespan", compact=False),
    Column("out tok/s"),
)


def rows(results: list[SimResult]) -> list[list[str]]:
    out = []
    for r in results:
        cap = r.capacity_blocks
        out.append(
            [
                r.policy,
                str(r.sessions),
                f"{r.requests:,}",
                f"{r.wait_mean:.2f}s",
                f"{r.wait_p50:.2f}s",
                f"{r.wait_p99:.2f}s",
                f"{r.ttft_mean:.2f}s",
                f"{r.ttft_p99:.2f}s",
                f"{r.preemptions:,}",
                f"{r.hit_rate:.0%}",
                f"{r.peak_blocks / cap:.0%}",
                f"{r.mean_blocks / cap:.0%}",
                f"{r.prefilled_tokens:,}",
                f"{r.makespan:,.0f}s",
                f"{r.throughput:,.0f}",
            ]
        )
    return out


def simulate_series(traces: dict[str, list[Trace]], results: list[SimResult]) -> Series:
    """Per-call prompt sizes of each session's trace, and each run's hit vs prefilled tokens."""
    out = Series(
        bars_title="prompt tokens per run: cached (prefix hits) vs recomputed (prefilled), SIMULATED",
        note="SIMULATED server (no GPU); prompt sizes from re-rendering the recorded runs",
        unit="sessions",
    )
    for name, trs in traces.items():
        out.per_call[name] = [[t.prompt_len for t in tr.turns] for tr in trs]
    out.bars = [(f"{r.policy} w={r.sessions}", r.cached_tokens, r.prefilled_tokens) for r in results]
    return out


def uncalibrated(model: str, hybrid: bool, step_model: str) -> list[str]:
    """What the simulation assumes without a GPU measurement behind it (said in its output)."""
    out = [
        f"step time ({step_model}: MFU, bandwidth efficiency and overhead are priors)",
        "activation reserve (4 GiB)",
        "tool delay and arrival stagger (fixed, not from recorded timestamps)",
        "output lengths of unreplied calls (the run's mean, where the log records neither usage nor summary)",
    ]
    if hybrid:
        out += [
            f"{model} aligned block size and per-sequence state are derived from vLLM's formula "
            "(cache_spec.md §1.9), not observed",
            "hybrid hits stop at the previous prompt's checkpoint; cached states at boundaries are "
            "not charged to the pool",
        ]
    return out


def print_results(out: Console, title: str, results: list[SimResult], wide: bool | None) -> None:
    print_table(out, title, COLUMNS, rows(results), wide)


def print_maxima(
    out: Console, maxima: dict[str, dict[str, int]], wait_threshold: float, how: str, tested: tuple[int, int]
) -> None:
    """Each policy's largest w meeting each criterion; ``tested``: the smallest and largest w tried
    (a maximum at the largest is only a lower bound, none at the smallest says so)."""

    def said(w: int) -> str:
        if w >= tested[1]:
            return f"{w} or more (the largest w tried)"
        return f"none (not even w={tested[0]})" if w == 0 else str(w)

    for name, m in maxima.items():
        out.print(
            f"{name}: max w without preemption {said(m['no_preemption'])}, with mean queue wait <= "
            f"{wait_threshold:g}s {said(m['wait'])} ({how}; SIMULATED)",
            highlight=False,
        )


def json_report(
    files: list[str],
    settings: dict[str, Any],
    sessions: int,
    assumed: list[str],
    results: list[SimResult],
    maxima: dict[str, dict[str, int]],
    bisection: dict[str, dict[int, SimResult]],
) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "simulated": True,
        "files": files,
        "settings": settings,
        "sessions": sessions,  # one per agent of a multi-agent file
        "uncalibrated": assumed,
        "results": [r.to_dict() for r in results],
        "max_sessions": maxima,
        "bisection": {k: sorted(v) for k, v in bisection.items()},
    }

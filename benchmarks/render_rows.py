"""A row of the render benchmark (one config, one history or the pooled recorded runs), its
figures and the targets they are held to (issue 10, item 6)."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

TARGET_MEDIAN_MS = 0.05  # recorded runs
TARGET_P99_MS = 5.0  # synthetic runs of the largest size
TARGET_RATIO = 2.0  # last 5% / first 5%, largest synthetic size
TARGET_MEMORY = 2.0  # renderer / history, everywhere


@dataclass
class Row:
    config: str
    history: str
    ms: list[float]  # every call, pooled over runs
    first: list[float]  # first 5% of each run's calls
    last: list[float]  # last 5% of each run's calls
    renderer_bytes: int | None  # None: the memory pass was skipped (too slow, see --memory-budget)
    history_bytes: int
    largest: bool = False  # the synthetic size the p99 and ratio targets apply to
    recorded: bool = False
    listed: list[float] = field(default_factory=list)  # render + reading messages and origins, every call
    opcodes: list[int] = field(default_factory=list)  # Python opcodes executed per call (recorded runs)

    @property
    def ratio(self) -> float:
        first = statistics.fmean(self.first)
        return statistics.fmean(self.last) / first if first > 0 else math.inf

    @property
    def memory(self) -> float | None:
        return None if self.renderer_bytes is None else self.renderer_bytes / self.history_bytes

    def p(self, q: float, listed: bool = False) -> float:
        s = sorted(self.listed if listed else self.ms)
        return s[max(0, math.ceil(q * len(s)) - 1)]

    def misses(self) -> list[str]:
        out = []
        if self.recorded and statistics.median(self.ms) > TARGET_MEDIAN_MS:
            out.append("median")
        if self.largest and self.p(0.99) > TARGET_P99_MS:
            out.append("p99")
        if self.largest and self.ratio > TARGET_RATIO:
            out.append("ratio")
        if self.memory is not None and self.memory > TARGET_MEMORY:
            out.append("memory")
        return out


def describe_opcodes(r: Row) -> str:
    """Median and p90 per call (recorded runs); median, p99 and last/first 5% (a synthetic run, one history)."""
    ops = sorted(r.opcodes)
    if r.recorded:
        return f"{r.config}/{r.history} median {statistics.median(ops):.0f}, p90 {ops[int(0.9 * len(ops))]}"
    first, last = edges([float(x) for x in r.opcodes])
    ratio = statistics.mean(last) / statistics.mean(first) if sum(first) else math.inf
    p99 = ops[max(0, math.ceil(0.99 * len(ops)) - 1)]  # as Row.p
    return f"{r.config}/{r.history} median {statistics.median(ops):.0f}, p99 {p99}, last/first 5% {ratio:.2f}"


def edges(ms: list[float]) -> tuple[list[float], list[float]]:
    m = max(1, round(0.05 * len(ms)))
    return ms[:m], ms[-m:]

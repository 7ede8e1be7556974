"""Shared types for the prefix-cache simulators: the result record, the protocol, helpers."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

__all__ = [
    "CacheResult",
    "NoCache",
    "PrefixCacheSim",
    "common_prefix_len",
    "first_difference",
    "generated_ids",
    "grid_hit",
]


@dataclass(frozen=True, slots=True)
class CacheResult:
    """What one request did to a prefix cache.

    ``prompt_tokens`` includes the cached tokens (OpenAI convention, not Anthropic's ``input_tokens``).
    ``written_tokens`` are prompt tokens newly written to the cache by this request (vLLM's
    ``created_cache_tokens``; Anthropic's ``cache_creation_input_tokens``); they are a subset of
    ``recomputed_tokens``.  ``evicted_tokens`` counts cached tokens this request evicted.
    """

    prompt_tokens: int
    cached_tokens: int
    written_tokens: int = 0
    evicted_tokens: int = 0

    @property
    def recomputed_tokens(self) -> int:
        """Prompt tokens that had to be prefilled (``prompt_tokens - cached_tokens``)."""
        return self.prompt_tokens - self.cached_tokens


@runtime_checkable
class PrefixCacheSim(Protocol):
    """One simulated server or provider cache; many sessions may share one instance.

    Every simulator accepts every keyword and ignores those it has no use for:

    * ``generated``: completion token ids, or just their number (then the blocks they fill take
      capacity but are registered under keys nothing can match).
    * ``session``: any hashable; only used to memoize work between consecutive requests of a session.
    * ``breakpoints``: token offsets (prefix lengths) carrying Anthropic ``cache_control`` marks.
    * ``boundaries``: token offsets where content blocks / messages end (Anthropic lookback unit,
      DeepSeek-V4 "end of user input" units).
    """

    def request(
        self,
        tokens: Sequence[int],
        *,
        generated: Sequence[int] | int = (),
        session: Hashable = None,
        breakpoints: Sequence[int] = (),
        boundaries: Sequence[int] = (),
    ) -> CacheResult: ...


class NoCache:
    """Nothing is ever cached: every prompt token is recomputed."""

    name = "none"

    def request(
        self,
        tokens: Sequence[int],
        *,
        generated: Sequence[int] | int = (),
        session: Hashable = None,
        breakpoints: Sequence[int] = (),
        boundaries: Sequence[int] = (),
    ) -> CacheResult:
        return CacheResult(len(tokens), 0, 0)


def _as_list(x: Sequence[int]) -> list[int]:
    return x if isinstance(x, list) else list(x)


def common_prefix_len(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token sequences.

    Uses C-level slice comparisons (one whole-prefix compare in the common "extension" case, then
    4096/64-token chunks) so it costs ~1-12 ns per token, not a Python loop per token.
    """
    la = _as_list(a)
    lb = _as_list(b)
    n = min(len(la), len(lb))
    if la[:n] == lb[:n]:
        return n
    return first_difference(la, lb, n)


def first_difference(la: list[int], lb: list[int], n: int, start: int = 0) -> int:
    """Index of the first difference within the first ``n`` items (``n`` if none), comparing from
    ``start`` (the caller knows the items before it are equal)."""
    lo = start
    for step in (4096, 64):
        while lo + step <= n and la[lo : lo + step] == lb[lo : lo + step]:
            lo += step
    while lo < n and la[lo] == lb[lo]:
        lo += 1
    return lo


def grid_hit(n: int, min_tokens: int, increment: int) -> int:
    """The cached tokens of a provider that caches in steps: 0 below ``min_tokens``, else the
    largest ``min_tokens + increment * k`` not above ``n`` (the tokens a request shares)."""
    if n < min_tokens:
        return 0
    return min_tokens + increment * ((n - min_tokens) // increment)


def generated_ids(generated: Sequence[int] | int) -> tuple[int, list[int] | None]:
    """Return (count, ids or None) for the ``generated`` argument."""
    if isinstance(generated, int):
        if generated < 0:
            raise ValueError(f"generated must be >= 0, got {generated}")
        return generated, None
    ids = _as_list(generated)
    return len(ids), ids

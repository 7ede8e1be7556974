"""A hosted cache whose state at each call is replayed from the run's recorded cached tokens.

A best-effort provider cache (OpenAI, Gemini) does not always hold the latest prefix: a call that
reaches another machine, or one that holds an older prompt, hits less (gpt-5-mini: 6-16% large
misses, clustered by run; hits that fall back to a prefix several calls old). No rule predicts
which calls (benchmarks/results/cache_calibration.md). But for a recorded run, the record says
what each call found: ``base`` re-sends exactly what was sent, so the recorded hit of call ``k``
tells *how stale* the machine it reached was: it held the prompts of calls ``0..j`` and not
later ones (``j = -1``: nothing). :meth:`ReplayedCache.probe` finds that ``j`` for every call of
``base``; replaying a policy, call ``k`` then reaches a machine holding that policy's own prompts
``0..j_k`` (``as_of``). So every policy meets the provider's recorded conditions (cold machines,
stale prefixes), and ``base`` reproduces the recorded hits. Calls without a record (no usage, a
call whose reply was not stored) see the latest state, adjusted as the calibrated profile does.

Hits are on the profile's grid (``min_tokens + increment * k``), so prompts are stored as chained
hashes of ``gcd(min_tokens, increment)``-token blocks, each with the first call that stored it.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence

from .base import CacheResult, generated_ids, grid_hit
from .calibrated import CALIBRATED, CalibratedCache

__all__ = ["REPLAYED", "ReplayedCache", "replayed"]

# What the record shows is stored, where the predictive fit chose otherwise: on gpt-5-mini a call
# after a reply without reasoning hits into that reply (the fitted `openai` profile leaves replies
# out only because its coarse tier seldom reaches them).
_STORE: dict[str, dict[str, object]] = {"openai": {"cache_generated": True}}


class ReplayedCache:
    """The calibrated profile ``base_profile``'s grid, with each call's staleness given by
    ``as_of`` (set before the request; None: the latest state, via the calibrated profile)."""

    def __init__(self, base_profile: str) -> None:
        params = {**CALIBRATED[base_profile], **_STORE.get(base_profile, {})}
        self.name = f"{base_profile}-replayed"
        self._fallback = CalibratedCache(base_profile, **params)  # type: ignore[arg-type]
        self.min_tokens: int = self._fallback.min_tokens
        self.increment: int = self._fallback.increment
        self.cache_generated: bool = self._fallback.cache_generated
        self.per_route: bool = self._fallback.per_route
        self.block = math.gcd(self.min_tokens, self.increment)
        self._stores: dict[Hashable, dict[int, int]] = {}
        self.calls = 0
        self.as_of: int | None = None
        self.now: float | None = None
        """The request's recorded time, for the calibrated profile's tiers (calls without a record)."""

    def _hashes(self, toks: Sequence[int]) -> list[int]:
        out: list[int] = []
        h, b = 0, self.block
        for i in range(0, len(toks) - len(toks) % b, b):
            h = hash((h, tuple(toks[i : i + b])))
            out.append(h)
        return out

    def _versions(self, hashes: list[int], store: dict[int, int]) -> list[int]:
        out = []
        for h in hashes:
            v = store.get(h)
            if v is None:
                break
            out.append(v)
        return out

    def _hit(self, versions: list[int], as_of: int, p: int) -> int:
        n = 0
        for v in versions:
            if v > as_of:
                break
            n += 1
        return min(p, grid_hit(n * self.block, self.min_tokens, self.increment))

    def _store(self, session: Hashable) -> dict[int, int]:
        return self._stores.setdefault(session if self.per_route else None, {})

    def _insert(self, toks: list[int], hashes: list[int], store: dict[int, int], generated: Sequence[int] | int) -> None:
        for h in hashes:
            store.setdefault(h, self.calls)
        _, gen = generated_ids(generated)
        if self.cache_generated and gen:
            for h in self._hashes(toks + list(gen))[len(hashes) :]:
                store.setdefault(h, self.calls)

    def probe(self, tokens: Sequence[int], target: float, *, generated: Sequence[int] | int = (), session: Hashable = None) -> int:
        """Record call: the state ``j`` whose hit for ``tokens`` is closest to ``target`` (the
        recorded cached tokens, in this tokenizer; ties: the latest); then store the call like
        :meth:`request`."""
        toks = list(tokens)
        hashes = self._hashes(toks)
        store = self._store(session)
        versions = self._versions(hashes, store)
        latest = self.calls - 1
        # the hit only changes where a leading block appears: one candidate state per version
        candidates = sorted({latest, -1, *(v - 1 for v in versions if v - 1 < latest)}, reverse=True)
        j = min(candidates, key=lambda c: abs(self._hit(versions, c, len(toks)) - target))
        self._fallback.now = self.now
        self._fallback.request(toks, generated=generated, session=session)
        self._insert(toks, hashes, store, generated)
        self.calls += 1
        return j

    def request(
        self,
        tokens: Sequence[int],
        *,
        generated: Sequence[int] | int = (),
        session: Hashable = None,
        breakpoints: Sequence[int] = (),
        boundaries: Sequence[int] = (),
    ) -> CacheResult:
        toks = list(tokens)
        p = len(toks)
        hashes = self._hashes(toks)
        store = self._store(session)
        self._fallback.now = self.now
        fresh = self._fallback.request(toks, generated=generated, session=session)
        if self.as_of is None:
            cached = fresh.cached_tokens
        else:
            cached = self._hit(self._versions(hashes, store), min(self.as_of, self.calls - 1), p)
        before = sum(1 for h in hashes if h in store) * self.block
        self._insert(toks, hashes, store, generated)
        self.calls += 1
        return CacheResult(p, cached, max(0, min(p - before, p - cached)))


REPLAYED = ("openai-replayed", "gemini-openrouter-replayed")
"""Cache names of the replayed profiles (one per calibrated profile)."""


def replayed(name: str) -> ReplayedCache:
    """``openai-replayed`` -> ReplayedCache("openai")."""
    base = name.removesuffix("-replayed")
    if name not in REPLAYED:
        raise ValueError(f"unknown replayed profile {name!r}; valid: {', '.join(REPLAYED)}")
    return ReplayedCache(base)

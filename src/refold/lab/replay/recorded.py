"""What a run recorded about the provider's cache, set against the replay: the state each call
met (for the ``*-replayed`` profiles) and how well each profile predicts the recorded hits."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...history import History
from ..cache import ROUTED_CACHES, CalibratedCache, ReplayedCache, make_cache
from .cache_requests import CallIds

__all__ = ["CacheValidation", "RecordedAsOf", "recorded_as_of"]


def recorded_as_of(history: History, calls: Sequence[CallIds], cache_name: str) -> list[int | None] | None:
    """For a replayed profile: the cache state each model call of ``history`` met, from ``base``'s
    calls (``calls``, in order) and the recorded cached tokens (scaled by the recorded share when
    the tokenizers differ). None for other profiles or runs without a record."""
    states = RecordedAsOf(history, cache_name)
    for c in calls:
        states.append(c)
    return states.result()


class RecordedAsOf:
    """``recorded_as_of`` fed one call at a time (``measure(keep_ids=...)``): no call's ids are held."""

    def __init__(self, history: History, cache_name: str) -> None:
        self.history = history
        cache = make_cache(cache_name)
        self._cache = cache if isinstance(cache, ReplayedCache) else None
        self._routed = cache_name in ROUTED_CACHES
        self._out: list[int | None] = []
        self._recorded = 0

    def append(self, c: CallIds) -> None:
        cache = self._cache
        if cache is None:
            return
        usage = self.history.step(c.step).meta.get("usage") or {} if c.step else {}
        p, hit = usage.get("prompt_tokens"), usage.get("cached_tokens")
        where = c.route if self._routed else None
        cache.now = c.time
        if isinstance(p, int) and p > 0 and isinstance(hit, int):
            self._out.append(cache.probe(c.ids, hit / p * len(c.ids), generated=c.generated, session=where))
            self._recorded += 1
        else:  # no record: the latest state
            cache.probe(c.ids, float("inf"), generated=c.generated, session=where)
            self._out.append(None)

    def result(self) -> list[int | None] | None:
        return self._out if self._cache is not None and self._recorded else None


class CacheValidation:
    """Compare provider-reported cached tokens (Step.meta["usage"]) with simulators on ``base``.

    Every call warms the simulated cache (unreplied ones too); only stored calls, which carry
    the provider's usage, are compared. Different tokenizers make absolute counts incomparable,
    so the comparison is on the cached *fraction* of each prompt: per-call mean absolute error
    and the task's overall fraction. Fed one call at a time (``measure(keep_ids=...)``), so a
    replay never holds every call's prompt ids (quadratic in the run's length): each profile's
    simulator is independent, so calls in order per profile give the same figures as profiles
    one by one."""

    def __init__(
        self, history: History, profiles: Sequence[str] = ("openai", "gemini-openrouter", "openai-exact", "vllm")
    ) -> None:
        usage = [s.meta.get("usage") or {} for s in history.steps]
        rep = [(u.get("prompt_tokens"), u.get("cached_tokens")) for u in usage]
        self._rep = [(p, c) for p, c in rep if isinstance(p, int) and isinstance(c, int) and p > 0]
        self.valid = bool(rep) and len(self._rep) == len(rep)
        names = profiles if self.valid else ()
        self._caches = {name: make_cache(name) for name in names}
        self._fracs: dict[str, list[float]] = {name: [] for name in names}
        self._totals = dict.fromkeys(names, (0, 0))
        self._steps: list[int] = []  # the stored step of each compared call

    def append(self, c: CallIds) -> None:
        for name, cache in self._caches.items():
            if isinstance(cache, CalibratedCache | ReplayedCache):
                cache.now = c.time
            res = cache.request(c.ids, generated=c.generated, session=c.route if name in ROUTED_CACHES else "v")
            if c.step is None:
                continue
            self._fracs[name].append(res.cached_tokens / max(1, len(c.ids)))
            cached, prompt = self._totals[name]
            self._totals[name] = (cached + res.cached_tokens, prompt + len(c.ids))
        if c.step is not None:
            self._steps.append(c.step)

    def result(self) -> dict[str, Any] | None:
        if not self.valid:
            return None
        rep = self._rep
        out: dict[str, Any] = {
            "reported_cached_fraction": round(sum(c for _, c in rep) / sum(p for p, _ in rep), 6),
            "profiles": {},
        }
        rep_frac = [c / p for p, c in rep]
        ref = [rep_frac[s - 1] for s in self._steps]
        for name, fracs in self._fracs.items():
            if not fracs:
                return None
            err = [abs(a - b) for a, b in zip(fracs, ref, strict=True)]
            cached_total, prompt_total = self._totals[name]
            out["profiles"][name] = {
                "simulated_cached_fraction": round(cached_total / max(1, prompt_total), 6),
                "mae_per_call": round(sum(err) / len(err), 6),
                "bias_per_call": round(sum(a - b for a, b in zip(fracs, ref, strict=True)) / len(err), 6),
            }
        return out

"""What a run recorded about the provider's cache, set against the replay: the state each call
met (for the ``*-replayed`` profiles) and how well each profile predicts the recorded hits."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...history import History
from ...tokens import Tokenizer
from ..cache import ROUTED_CACHES, CalibratedCache, ReplayedCache, make_cache
from .metrics import CallIds

__all__ = ["recorded_as_of", "validate_cache"]


def recorded_as_of(history: History, calls: Sequence[CallIds], cache_name: str) -> list[int | None] | None:
    """For a replayed profile: the cache state each model call of ``history`` met, from ``base``'s
    calls (``calls``, in order) and the recorded cached tokens (scaled by the recorded share when
    the tokenizers differ). None for other profiles or runs without a record."""
    cache = make_cache(cache_name)
    if not isinstance(cache, ReplayedCache):
        return None
    out: list[int | None] = []
    recorded = 0
    routed = cache_name in ROUTED_CACHES
    for c in calls:
        usage = history.step(c.step).meta.get("usage") or {} if c.step else {}
        p, hit = usage.get("prompt_tokens"), usage.get("cached_tokens")
        where = c.route if routed else None
        cache.now = c.time
        if isinstance(p, int) and p > 0 and isinstance(hit, int):
            out.append(cache.probe(c.ids, hit / p * len(c.ids), generated=c.generated, session=where))
            recorded += 1
        else:  # no record: the latest state
            cache.probe(c.ids, float("inf"), generated=c.generated, session=where)
            out.append(None)
    return out if recorded else None


def validate_cache(
    history: History,
    calls: Sequence[CallIds],
    tok: Tokenizer,
    profiles: Sequence[str] = ("openai", "gemini-openrouter", "openai-exact", "vllm"),
) -> dict[str, Any] | None:
    """Compare provider-reported cached tokens (Step.meta["usage"]) with simulators on ``base``.

    Every call warms the simulated cache (unreplied ones too); only stored calls, which carry
    the provider's usage, are compared. Different tokenizers make absolute counts incomparable,
    so the comparison is on the cached *fraction* of each prompt: per-call mean absolute error
    and the task's overall fraction.
    """
    usage = [s.meta.get("usage") or {} for s in history.steps]
    rep = [(u.get("prompt_tokens"), u.get("cached_tokens")) for u in usage]
    if not rep or any(not isinstance(p, int) or not isinstance(c, int) or p <= 0 for p, c in rep):
        return None
    rep_frac = [c / p for p, c in rep]  # type: ignore[operator]
    out: dict[str, Any] = {
        "reported_cached_fraction": round(sum(c for _, c in rep) / sum(p for p, _ in rep), 6),  # type: ignore[misc]
        "profiles": {},
    }
    for name in profiles:
        cache = make_cache(name)
        fracs: list[float] = []
        ref: list[float] = []
        cached_total = prompt_total = 0
        for c in calls:
            if isinstance(cache, CalibratedCache | ReplayedCache):
                cache.now = c.time
            res = cache.request(c.ids, generated=c.generated, session=c.route if name in ROUTED_CACHES else "v")
            if c.step is None:
                continue
            fracs.append(res.cached_tokens / max(1, len(c.ids)))
            ref.append(rep_frac[c.step - 1])
            cached_total += res.cached_tokens
            prompt_total += len(c.ids)
        if not fracs:
            return None
        err = [abs(a - b) for a, b in zip(fracs, ref, strict=True)]
        out["profiles"][name] = {
            "simulated_cached_fraction": round(cached_total / max(1, prompt_total), 6),
            "mae_per_call": round(sum(err) / len(err), 6),
            "bias_per_call": round(sum(a - b for a, b in zip(fracs, ref, strict=True)) / len(err), 6),
        }
    return out

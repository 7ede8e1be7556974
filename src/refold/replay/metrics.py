"""Metrics of one recorded run under one policy: tokens, prefix cache, KV, cost, what was removed."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ..cache import DEFAULT_PRICES, PrefixCacheSim, Price, cost_usd, kv_gib, make_cache
from ..history import History
from ..messages import clean
from ..tokens import Tokenizer, message_tokens, prompt_token_ids
from ..types import Shown
from .policies import Projector, Prompt

__all__ = ["PolicyMetrics", "default_price", "measure", "percentile", "validate_cache"]

PRICE_FOR_CACHE = {
    "vllm": "qwen3.6-27b-vllm",
    "sglang": "qwen3.6-27b-vllm",
    "none": "qwen3.6-27b-vllm",
    "openai": "gpt-5-mini",
    "anthropic": "claude-sonnet-4.5",
    "deepseek": "deepseek-v4",
}


def default_price(cache: str) -> str:
    return PRICE_FOR_CACHE.get(cache, "qwen3.6-27b-vllm")


@dataclass(slots=True)
class PolicyMetrics:
    """Totals of one task under one policy (the per-task entry of the JSON report)."""

    calls: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    recomputed_tokens: int = 0
    written_tokens: int = 0
    output_tokens: int = 0
    peak_prompt_tokens: int = 0
    peak_kv_tokens: int = 0
    peak_kv_gib: float = 0.0
    cost_usd: float = 0.0
    render_ms_median: float = 0.0
    render_ms_p99: float = 0.0
    history_tokens: int = 0
    removed_tokens_restorable: int = 0
    removed_tokens_lost: int = 0
    restores: int = 0
    compactions: int = 0
    compaction_input_tokens: int = 0
    compaction_cached_tokens: int = 0
    compaction_output_tokens: int = 0
    stubs: int = 0
    folded_steps: int = 0
    per_call: dict[str, list[int]] = field(default_factory=dict)

    def to_dict(self, per_call: bool = True) -> dict[str, Any]:
        d = asdict(self)
        d["render_ms_median"] = round(self.render_ms_median, 4)
        d["render_ms_p99"] = round(self.render_ms_p99, 4)
        d["cost_usd"] = round(self.cost_usd, 8)
        d["peak_kv_gib"] = round(self.peak_kv_gib, 6)
        if not per_call:
            d.pop("per_call")
        return d


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return float(ordered[min(rank, len(ordered)) - 1])


def _generated(history: History, t: int, tok: Tokenizer, priming: list[int]) -> list[int] | int:
    """Ids of the reply call t+1 produced, as the next prompt shows them (after the priming)."""
    ids = message_tokens(clean(history.step(t + 1).reply), tok)
    if ids[: len(priming)] == priming:
        return ids[len(priming) :]
    return len(ids)


def _boundaries(messages: Sequence[dict[str, Any]], tok: Tokenizer, total: int) -> list[int]:
    out, pos = [], 0
    for m in messages:
        pos += len(message_tokens(m, tok))
        out.append(min(pos, total))
    return out


def _request(
    cache: PrefixCacheSim,
    cache_name: str,
    ids: list[int],
    msgs: Sequence[dict[str, Any]],
    tok: Tokenizer,
    generated: list[int] | int,
    session: str,
) -> tuple[int, int]:
    if cache_name in ("anthropic", "deepseek"):
        res = cache.request(
            ids,
            generated=generated,
            session=session,
            breakpoints=[len(ids)],
            boundaries=_boundaries(msgs, tok, len(ids)),
        )
    else:
        res = cache.request(ids, generated=generated, session=session)
    return res.cached_tokens, res.written_tokens


def measure(
    history: History,
    projector: Projector,
    tok: Tokenizer,
    *,
    cache_name: str = "vllm",
    price: Price | None = None,
    kv_model: str = "qwen3.6-27b",
    base_step_tokens: Sequence[int] | None = None,
    keep_ids: list[list[int]] | None = None,
) -> PolicyMetrics:
    """Replay every call of ``history`` under ``projector`` through a fresh cache simulator.

    ``base_step_tokens[i-1]`` (tokens of step i as recorded) enables the removed-tokens split;
    ``keep_ids`` (a list) receives each call's prompt token ids (for cache validation).
    """
    price = price or DEFAULT_PRICES[default_price(cache_name)]
    cache = make_cache(cache_name)
    priming = prompt_token_ids([], tok)
    m = PolicyMetrics()
    ms: list[float] = []
    per_prompt: list[int] = []
    per_cached: list[int] = []
    last: Prompt | None = None
    session = f"{history.source}:{projector.name}"
    for p in projector.prompts(history):
        if p.compaction is not None:
            c = p.compaction
            cids = prompt_token_ids(c.input_messages, tok)
            cached, written = _request(
                cache, cache_name, cids, c.input_messages, tok, c.summary_tokens, session
            )
            m.compactions += 1
            m.compaction_input_tokens += len(cids)
            m.compaction_cached_tokens += cached
            m.compaction_output_tokens += c.summary_tokens
            m.cost_usd += cost_usd(
                price, len(cids), cached, min(written, len(cids) - cached), c.summary_tokens
            )
        ids = prompt_token_ids(p.messages, tok)
        gen = _generated(history, p.t, tok, priming)
        out_n = gen if isinstance(gen, int) else len(gen)
        cached, written = _request(cache, cache_name, ids, p.messages, tok, gen, session)
        n = len(ids)
        m.calls += 1
        m.prompt_tokens += n
        m.cached_tokens += cached
        m.recomputed_tokens += n - cached
        m.written_tokens += written
        m.output_tokens += out_n
        m.peak_prompt_tokens = max(m.peak_prompt_tokens, n)
        m.peak_kv_tokens = max(m.peak_kv_tokens, n + max(out_n - 1, 0))
        m.cost_usd += cost_usd(price, n, cached, min(written, n - cached), out_n)
        ms.append(p.render_ms)
        per_prompt.append(n)
        per_cached.append(cached)
        if p.stats is not None:
            m.restores = p.stats.restores
            m.stubs = p.stats.stubs + p.stats.trimmed
            m.folded_steps = p.stats.folded_steps
        if keep_ids is not None:
            keep_ids.append(ids)
        last = p
    m.peak_kv_gib = kv_gib(kv_model, m.peak_kv_tokens) if m.peak_kv_tokens else 0.0
    m.render_ms_median = percentile(ms, 50)
    m.render_ms_p99 = percentile(ms, 99)
    m.per_call = {"prompt_tokens": per_prompt, "cached_tokens": per_cached}
    if last is not None and base_step_tokens is not None:
        _removed(m, last, tok, base_step_tokens)
    return m


def _removed(m: PolicyMetrics, last: Prompt, tok: Tokenizer, base_step_tokens: Sequence[int]) -> None:
    """Split the history's tokens at the last call into shown / removed-restorable / removed-lost."""
    kept: dict[int, int] = {}
    for msg, o in zip(last.messages, last.origins, strict=True):
        if o.step is not None and o.part in ("reply", "output") and o.shown != Shown.NOTE:
            kept[o.step] = kept.get(o.step, 0) + len(message_tokens(msg, tok))
    steps = last.t  # the last prompt holds steps 1..t
    m.history_tokens = sum(base_step_tokens[:steps])
    for i in range(1, steps + 1):
        removed = max(0, base_step_tokens[i - 1] - kept.get(i, 0))
        if last.reversible and i > last.lost_upto:
            m.removed_tokens_restorable += removed
        else:
            m.removed_tokens_lost += removed


def step_tokens(history: History, tok: Tokenizer) -> list[int]:
    """Tokens of each step as recorded (reply + outputs, API fields, chat template)."""
    return [
        sum(len(message_tokens(msg, tok)) for msg in (clean(s.reply), *(clean(o) for o in s.observations)))
        for s in history.steps
    ]


def validate_cache(
    history: History, ids: list[list[int]], tok: Tokenizer, profiles: Sequence[str] = ("openai", "vllm")
) -> dict[str, Any] | None:
    """Compare provider-reported cached tokens (Step.meta["usage"]) with simulators on ``base``.

    Different tokenizers make absolute counts incomparable, so the comparison is on the cached
    *fraction* of each prompt: per-call mean absolute error and the task's overall fraction.
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
    priming = prompt_token_ids([], tok)
    for name in profiles:
        cache = make_cache(name)
        fracs: list[float] = []
        cached_total = 0
        for t, call_ids in enumerate(ids):
            res = cache.request(call_ids, generated=_generated(history, t, tok, priming), session="v")
            fracs.append(res.cached_tokens / max(1, len(call_ids)))
            cached_total += res.cached_tokens
        err = [abs(a - b) for a, b in zip(fracs, rep_frac, strict=True)]
        out["profiles"][name] = {
            "simulated_cached_fraction": round(cached_total / max(1, sum(len(x) for x in ids)), 6),
            "mae_per_call": round(sum(err) / len(err), 6),
            "bias_per_call": round(sum(a - b for a, b in zip(fracs, rep_frac, strict=True)) / len(err), 6),
        }
    return out

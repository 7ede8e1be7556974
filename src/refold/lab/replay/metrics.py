"""Metrics of one recorded run under one policy: tokens, prefix cache, KV, cost, what was removed."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ...chat_tokens import message_tokens, prompt_token_ids
from ...history import History
from ...mechanisms.boundary import PRICES, idle_s
from ...messages import clean
from ...prompt_tokens import MessageBounds, PromptTokens
from ...tokens import Tokenizer
from ...types import Shown
from ..cache import (
    DEFAULT_PRICES,
    ROUTED_CACHES,
    CalibratedCache,
    CountCalibration,
    Price,
    ReplayedCache,
    cost_usd,
    kv_gib,
    make_cache,
)
from .cache_requests import CallIds, CallSink, cache_request, generated_ids, known_same, message_chars
from .policies import price_profile
from .projectors import Projector, Prompt
from .recorded_calls import (
    reasoning_tokens,
    recorded_route,
    recorded_times,
    unreplied_calls_by_step,
    unreplied_output_estimate,
    unreplied_prompt,
)

__all__ = ["PolicyMetrics", "default_price", "measure", "percentile", "step_tokens"]

PRICE_FOR_CACHE = {
    "vllm": "qwen3.6-27b-vllm",
    "sglang": "qwen3.6-27b-vllm",
    "none": "qwen3.6-27b-vllm",
    "openai": "gpt-5-mini",
    "openai-exact": "gpt-5-mini",
    "openai-replayed": "gpt-5-mini",
    "openai-expected": "gpt-5-mini",
    "gemini-openrouter": "gemini-3-pro",
    "gemini-openrouter-replayed": "gemini-3-pro",
    "gemini-openrouter-expected": "gemini-3-pro",
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
    reasoning_tokens: int = 0
    """Of ``output_tokens``: reasoning the provider reported (billed, never shown again)."""
    unreplied_calls: int = 0
    """Of ``calls``: calls whose reply was not stored (their prompt is rebuilt)."""
    unreplied_output_tokens: int = 0
    """Of ``output_tokens``: the unreplied calls' output (as recorded, e.g. a summary; else ESTIMATED)."""
    unreplied_prompt_tokens: int = 0
    """Of ``prompt_tokens``: the unreplied calls' prompts (a run's recorded usage covers only its
    stored calls: what is compared with it leaves these out)."""
    hidden_needed_calls: int = 0
    """Calls whose recorded reply names a key shown only in hidden content (replay/needed.py)."""
    hidden_needed_restore_tokens: int = 0
    cold_calls: int = 0
    """Calls after an idle gap longer than the cache profile's lifetime (the cache starts empty)."""
    cost_counts: str = ""
    """What ``cost_usd`` counts: "" the replay tokenizer's tokens, else a CountCalibration label."""
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



def measure(
    history: History,
    projector: Projector,
    tok: Tokenizer,
    *,
    cache_name: str = "vllm",
    price: Price | None = None,
    kv_model: str = "qwen3.6-27b",
    base_step_tokens: Sequence[int] | None = None,
    keep_ids: CallSink | None = None,
    tools: Sequence[dict[str, Any]] | None = None,
    as_of: Sequence[int | None] | None = None,
    calibration: CountCalibration | None = None,
    prefix: Sequence[int] = (),
) -> PolicyMetrics:
    """Replay every call of ``history`` under ``projector`` through a fresh cache simulator.

    Every model call counts: the stored ones and those whose reply was not stored
    (``History.meta["unreplied"]``, e.g. mini's format errors, a compaction's summarization call),
    in the order they were made (after the last stored reply: cut from ``prompts(final=True)``).
    ``tools`` are the function schemas each request carried (counted in its prompt).
    Output = the reply's tokens + its recorded reasoning tokens.
    ``base_step_tokens[i-1]`` (tokens of step i as recorded) enables the removed-tokens split;
    ``keep_ids`` (a list, or a streaming ``CallSink``) receives each call (for cache validation);
    ``as_of[k]`` is the cache state model call ``k`` meets under a replayed profile
    (``recorded_as_of``). ``calibration``
    prices ESTIMATED provider counts instead of the replay tokenizer's (cost only; token figures
    stay in the replay tokenizer). ``prefix``: ids every call's prompt starts with, the same at
    each call (an ESTIMATED request prefix the log does not hold, replay/prefix.py).
    """
    price = price or DEFAULT_PRICES[default_price(cache_name)]
    cache = make_cache(cache_name)
    priming = prompt_token_ids([], tok)
    # each call's prompt repeats most of the last one's: only what changed is tokenized
    prompt_ids = PromptTokens(tok, tools=tools)
    # each simulator copies what it keeps: without ``keep_ids`` no call's ids outlive it, so they are
    # lent, not copied (a copy per call is a whole prompt's ids: the replay's largest per-call cost)
    ids_of_all = prompt_ids.ids if keep_ids is not None else prompt_ids.lent
    # per cache session: how many leading ids every prompt since its last request kept (vLLM then
    # compares only the rest with its copy); a session's calls may interleave with other sessions'
    floors: dict[str, int] = {}

    def ids_of(msgs: Sequence[dict[str, Any]]) -> list[int]:
        ids = ids_of_all(msgs)
        s = prompt_ids.stable
        for k, v in floors.items():
            if v > s:
                floors[k] = s
        return ids

    bounds = MessageBounds(tok)
    head = list(prefix)
    m = PolicyMetrics()
    ms: list[float] = []
    per_prompt: list[int] = []
    per_cached: list[int] = []
    per_output: list[int] = []
    per_step: list[int] = []
    last: Prompt | None = None
    session = f"{history.source}:{projector.name}"
    unreplied = unreplied_calls_by_step(history, tok)
    lost_out = unreplied_output_estimate(history) if unreplied else 0
    n_steps = len(history)

    routed = cache_name in ROUTED_CACHES
    # a hosted cache forgets a prefix left idle longer than its lifetime: after such a gap (recorded
    # step times) every policy starts cold, as the render's cost rule assumes
    profile = price_profile(cache_name)
    ttl = PRICES[profile].ttl_s if profile and not isinstance(cache, ReplayedCache) else None
    stale = cache if isinstance(cache, ReplayedCache) and as_of is not None else None
    states: Sequence[int | None] = as_of or ()
    # a timed profile meets each call at its recorded time (every policy makes the same calls)
    times = recorded_times(history)
    timed = cache if isinstance(cache, CalibratedCache | ReplayedCache) else None

    def call(
        ids: list[int],
        msgs: Sequence[dict[str, Any]],
        gen: list[int] | int,
        out_n: int,
        step: int,
        route: str | None,
        marks: Sequence[int] | None = None,
        at: float | None = None,
        visible: int = 0,
    ) -> None:
        # a routed profile keeps one cache per recorded endpoint (every policy is routed alike)
        where = f"{session}@{route}" if routed else session
        if stale is not None:  # this call meets the provider's recorded state (as base did)
            k = m.calls
            stale.calls, stale.as_of = k, states[k] if k < len(states) else None
        if timed is not None:
            timed.now = at
        if head:
            ids = head + ids
        cached, written = cache_request(
            cache, cache_name, ids, msgs, bounds, gen, where, marks, len(head), known_same(floors, where, len(head))
        )
        n = len(ids)
        m.calls += 1
        m.prompt_tokens += n
        m.cached_tokens += cached
        m.recomputed_tokens += n - cached
        m.written_tokens += written
        m.output_tokens += out_n
        m.peak_prompt_tokens = max(m.peak_prompt_tokens, n)
        m.peak_kv_tokens = max(m.peak_kv_tokens, n + max(out_n - 1, 0))
        if calibration is None:
            m.cost_usd += cost_usd(price, n, cached, min(written, n - cached), out_n)
        else:  # the provider's counts, ESTIMATED; ``visible`` of out_n is in replay tokens
            nb = calibration.prompt(n, message_chars(msgs))
            cb = min(nb, round(cached * nb / n)) if n else 0
            wb = min(nb - cb, round(min(written, n - cached) * nb / n)) if n else 0
            m.cost_usd += cost_usd(price, nb, cb, wb, out_n - visible + calibration.output(visible))
        per_prompt.append(n)
        per_cached.append(cached)
        per_output.append(out_n)
        per_step.append(step)
        if keep_ids is not None:
            keep_ids.append(CallIds(ids, gen, step or None, route, at))

    prompts = projector.prompts(history, final=True) if unreplied.get(n_steps) else projector.prompts(history)
    for p in prompts:
        if p.compaction is not None:
            c = p.compaction
            cids = head + ids_of(c.input_messages) if head else ids_of(c.input_messages)
            if stale is not None:
                stale.calls, stale.as_of = m.calls, None
            if timed is not None:
                timed.now = None  # not a recorded call: no time
            cached, written = cache_request(
                cache, cache_name, cids, c.input_messages, bounds, c.summary_tokens, session,
                head=len(head), same=known_same(floors, session, len(head)),
            )
            m.compactions += 1
            m.compaction_input_tokens += len(cids)
            m.compaction_cached_tokens += cached
            m.compaction_output_tokens += c.summary_tokens
            m.cost_usd += cost_usd(
                price, len(cids), cached, min(written, len(cids) - cached), c.summary_tokens
            )  # a compaction is refold's own call: counted in the replay tokenizer
        trailing = p.t == n_steps  # the final prompt: unreplied calls only, routed as the last stored one
        route = recorded_route(history, p.t if trailing else p.t + 1)
        gap = idle_s(history, p.t) if ttl is not None else None
        if gap is not None and ttl is not None and gap > ttl:
            cache = make_cache(cache_name)
            timed = cache if isinstance(cache, CalibratedCache | ReplayedCache) else None
            m.cold_calls += 1
        before = times.get(p.t) if times else None
        now = before if trailing else times.get(p.t + 1) if times else None
        lost = unreplied.get(p.t, ())
        for i, (seen, recorded_out) in enumerate(lost):
            msgs = unreplied_prompt(history, p, seen)
            # an unreplied call has no record of its time: evenly between its stored neighbours
            at = now if now is None or before is None else before + (now - before) * (i + 1) / (len(lost) + 1)
            out = lost_out if recorded_out is None else recorded_out
            ids = ids_of(msgs)
            m.unreplied_prompt_tokens += len(head) + len(ids)
            call(ids, msgs, out, out, 0, route, at=at)
            m.unreplied_calls += 1
            m.unreplied_output_tokens += out
        if trailing:  # stats and the removed-tokens split stay those of the last stored call
            break
        ids = ids_of(p.messages)
        reply = history.step(p.t + 1).reply
        gen = generated_ids(history, p.t, tok, priming)
        reasoning = reasoning_tokens(reply)
        out_n = (gen if isinstance(gen, int) else len(gen)) + reasoning
        # reasoning comes before the visible reply: the generated sequence no longer matches
        # the next prompt, so the simulator gets only its length
        call(ids, p.messages, out_n if reasoning else gen, out_n, p.t + 1, route, p.breakpoints, at=now, visible=out_n - reasoning)
        m.reasoning_tokens += reasoning
        ms.append(p.render_ms)
        if p.stats is not None:
            m.restores = p.stats.restores
            m.stubs = p.stats.stubs + p.stats.trimmed
            m.folded_steps = p.stats.folded_steps
        last = p
    m.cost_counts = calibration.label if calibration is not None else ""
    m.peak_kv_gib = kv_gib(kv_model, m.peak_kv_tokens) if m.peak_kv_tokens else 0.0
    m.render_ms_median = percentile(ms, 50)
    m.render_ms_p99 = percentile(ms, 99)
    m.per_call = {
        "prompt_tokens": per_prompt,
        "cached_tokens": per_cached,
        "output_tokens": per_output,
        "step": per_step,
    }
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

"""What a recorded run says about the calls it made, beyond its stored steps: the calls whose
reply was not stored (mini 2.x format errors, a Claude Code / Codex compaction's summarization
call) and their prompts, when each call was made, which endpoint served it, and the reasoning
tokens the provider reported."""

from __future__ import annotations

from typing import Any

from ...history import History, usage_count
from ...tokens import Tokenizer
from .projectors import Prompt


def reasoning_tokens(reply: dict[str, Any]) -> int:
    """Reasoning tokens the provider reported for a reply (0 if none recorded).

    They are generated (billed as output, held in KV while decoding) but never shown again.
    """
    extra = reply.get("extra")
    response = extra.get("response") if isinstance(extra, dict) else None
    usage = response.get("usage") if isinstance(response, dict) else None
    details = usage.get("completion_tokens_details") if isinstance(usage, dict) else None
    n = usage_count(details.get("reasoning_tokens")) if isinstance(details, dict) else None
    return n or 0


def recorded_completion_tokens(history: History) -> list[int | None]:
    """Each stored call's reported ``completion_tokens`` (reasoning included), None where missing."""
    out: list[int | None] = []
    for s in history.steps:
        v = (s.meta.get("usage") or {}).get("completion_tokens")
        out.append(v if isinstance(v, int) and not isinstance(v, bool) else None)
    return out


def unreplied_output_estimate(history: History) -> int:
    """Output tokens charged to a call whose reply was not stored: the run's mean recorded
    completion tokens (an ESTIMATE: the reply is gone), 0 when nothing is recorded."""
    vals = [v for v in recorded_completion_tokens(history) if v is not None]
    return round(sum(vals) / len(vals)) if vals else 0


def recorded_route(history: History, step: int) -> str | None:
    """The endpoint that served a stored call (OpenRouter's ``response.provider``), if recorded."""
    if not 1 <= step <= len(history):
        return None
    extra = history.step(step).reply.get("extra")
    response = extra.get("response") if isinstance(extra, dict) else None
    route = response.get("provider") if isinstance(response, dict) else None
    return route if isinstance(route, str) and route else None


def recorded_times(history: History) -> dict[int, float] | None:
    """Each stored call's request time in seconds: the provider's ``response.created`` where every
    stored call has one, else the client's ``extra.timestamp``; None when neither is complete
    (one clock per run: the two differ by seconds)."""
    for field_ in ("created", "timestamp"):
        out: dict[int, float] = {}
        for s in history.steps:
            extra = s.reply.get("extra")
            src = extra.get("response") if field_ == "created" and isinstance(extra, dict) else extra
            v = src.get(field_) if isinstance(src, dict) else None
            if not isinstance(v, int | float) or isinstance(v, bool):
                break
            out[s.index] = float(v)
        else:
            if out:
                return out
    return None


def unreplied_by_step(history: History) -> dict[int, list[int]]:
    """Per step t, the unreplied calls made after it: how many of its messages each had seen."""
    return {t: [seen for seen, _ in calls] for t, calls in unreplied_calls_by_step(history).items()}


def unreplied_calls_by_step(
    history: History, tok: Tokenizer | None = None
) -> dict[int, list[tuple[int, int | None]]]:
    """Per step t, the unreplied calls made after it: (messages of step t seen, the output tokens
    the log recorded for the call, else None). Step ``len(history)``: calls after the last reply.

    Recorded output: the entry's ``output_tokens`` (the call's usage), else with ``tok`` its
    ``summary`` (a compaction's reply, kept by the next context) as that tokenizer counts it."""
    out: dict[int, list[tuple[int, int | None]]] = {}
    for u in history.meta.get("unreplied") or []:
        if isinstance(u, dict) and isinstance(u.get("step"), int) and isinstance(u.get("observations"), int):
            n = u.get("output_tokens")
            recorded = n if isinstance(n, int) and not isinstance(n, bool) and n >= 0 else None
            summary = u.get("summary")
            if recorded is None and tok is not None and isinstance(summary, str) and summary:
                recorded = tok.count(summary)
            out.setdefault(u["step"], []).append((u["observations"], recorded))
    return out


def has_trailing_calls(history: History) -> bool:
    """Whether calls were made after the last stored reply (their prompt is the final one)."""
    return bool(unreplied_by_step(history).get(len(history)))


def unreplied_prompt(history: History, p: Prompt, seen: int) -> list[dict[str, Any]]:
    """The prompt of a call made after step ``p.t`` had shown ``seen`` of its messages: call
    ``p.t + 1``'s prompt without the later messages of that step (exact for ``base``; a policy
    that rewrote that step's tail is approximated by the same cut). After the last step
    (``p.t == len(history)``) ``p`` is the projector's final prompt (``prompts(final=True)``)."""
    total = len(history.step(p.t).observations) if p.t else len(history.prefix)
    drop = total - seen
    if drop <= 0:
        return list(p.messages)
    return list(p.messages[: max(0, len(p.messages) - drop)])

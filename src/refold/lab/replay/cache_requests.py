"""Each replayed call as one request to the simulated cache: where Anthropic breakpoints go, the
estimated request prefix ("head") as a block of its own, what vLLM may skip comparing, and the ids
kept per call for cache validation."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ...chat_tokens import message_tokens
from ...history import History
from ...messages import clean
from ...prompt_tokens import MessageBounds
from ...tokens import Tokenizer
from ..cache import PrefixCacheSim, VllmPrefixCache

__all__ = ["CallIds", "CallSink", "cache_request", "generated_ids", "known_same", "message_chars"]


def generated_ids(history: History, t: int, tok: Tokenizer, priming: list[int]) -> list[int] | int:
    """Ids of the reply call t+1 produced, as the next prompt shows them (after the priming)."""
    ids = message_tokens(clean(history.step(t + 1).reply), tok)
    if ids[: len(priming)] == priming:
        return ids[len(priming) :]
    return len(ids)


def message_chars(messages: Sequence[dict[str, Any]]) -> int:
    """Characters of a request's text: contents and tool-call arguments (a count calibration's feature)."""
    n = 0
    for m in messages:
        c = m.get("content")
        if isinstance(c, str):
            n += len(c)
        elif isinstance(c, list):
            n += sum(len(p.get("text") or "") for p in c if isinstance(p, dict) and isinstance(p.get("text"), str))
        for tc in m.get("tool_calls") or ():
            fn = tc.get("function") if isinstance(tc, dict) else None
            args = fn.get("arguments") if isinstance(fn, dict) else None
            n += len(args) if isinstance(args, str) else 0
    return n


_MAX_BREAKPOINTS = 4  # Anthropic's cache_control limit per request
_NONE_CHANGED = 1 << 62  # a floor no prompt has lowered yet


def cache_request(
    cache: PrefixCacheSim,
    cache_name: str,
    ids: list[int],
    msgs: Sequence[dict[str, Any]],
    boundaries: MessageBounds,
    generated: list[int] | int,
    session: str,
    marks: Sequence[int] | None = None,
    head: int = 0,
    same: int = 0,
) -> tuple[int, int]:
    """One request; ``marks``: messages refold put Anthropic breakpoints on (None: one at the end);
    ``head``: leading ids before the messages (an estimated unrecorded prefix), one cache block
    with a breakpoint of its own where one is free (as Claude Code marks its system prompt)."""
    if cache_name in ("anthropic", "deepseek"):
        bounds = boundaries(msgs, len(ids) - head)
        if head:
            bounds = [head + b for b in bounds]
        points = [len(ids)]
        if marks is not None and cache_name == "anthropic":
            points = sorted({bounds[i] for i in marks if 0 <= i < len(bounds) and bounds[i] > 0}) or points
        if head:
            points = sorted({head, *points}) if len(points) < _MAX_BREAKPOINTS else points
            bounds = [head, *bounds]
        res = cache.request(ids, generated=generated, session=session, breakpoints=points, boundaries=bounds)
    elif isinstance(cache, VllmPrefixCache):
        res = cache.request(ids, generated=generated, session=session, same=same)
    else:
        res = cache.request(ids, generated=generated, session=session)
    return res.cached_tokens, res.written_tokens


def known_same(floors: dict[str, int], session: str, head: int) -> int:
    """Leading ids of this call known equal to ``session``'s previous prompt (0: unknown); from
    now on the session's floor tracks the prompts after this one."""
    floor = floors.get(session)
    floors[session] = _NONE_CHANGED
    return 0 if floor is None else head + floor


@dataclass(frozen=True, slots=True)
class CallIds:
    """One replayed call kept for cache validation: its prompt ids, what it generated, and the
    stored step it produced (None: a call whose reply was not stored)."""

    ids: list[int]
    generated: list[int] | int
    step: int | None
    route: str | None = None
    time: float | None = None
    """When the call was made (recorded seconds; interpolated for an unreplied call)."""


class CallSink(Protocol):
    """Receives each replayed call (a list, or a streaming consumer such as ``CacheValidation``)."""

    def append(self, call: CallIds, /) -> None: ...

"""Anthropic-style ``cache_control`` breakpoints placed where a refold prompt is stable.

mini-swe-agent marks only the last message. A refold prompt changes behind the boundary only
when the boundary moves, so the stable points are: the end of the prefix (system + task), the
last message before the first step after b_t, the end of the previous call's prompt (the last
message before the newest step: the write the provider made last time), and the end. Providers
allow at most 4 breakpoints; we keep the ones nearest the end when fewer are allowed, because
a later breakpoint that hits covers every earlier one.
"""

from __future__ import annotations

import copy
import operator
from collections.abc import Callable
from typing import Any

from ..types import Message, Rendered

EPHEMERAL: dict[str, str] = {"type": "ephemeral"}
MAX_BREAKPOINTS = 4


def breakpoints(rendered: Rendered, limit: int = MAX_BREAKPOINTS) -> list[int]:
    """Indices of the messages that get a breakpoint, ascending, at most ``limit``."""
    n = len(rendered.messages)
    if n == 0 or limit <= 0:
        return []
    steps = list(map(_STEP, rendered.origins))  # C-level; the scans below walk back from the end
    b = rendered.stats.boundary
    prefix_end = _last_none(steps)
    behind_end = _last(steps, lambda s: s is None or s <= b)
    last_step = steps[-1]
    previous_end = -1
    if last_step is not None:
        previous_end = _last(steps, lambda s: s is None or s < last_step)
    stable_end = rendered.stats.stable - 1  # after a boundary move: the last message the cache still holds
    chosen = sorted({i for i in (prefix_end, stable_end, behind_end, previous_end, n - 1) if i >= 0})
    if len(chosen) > limit and prefix_end in chosen and stable_end > prefix_end:
        chosen.remove(prefix_end)  # the stable point covers the prefix
    return chosen[-limit:]


_STEP = operator.attrgetter("step")


def _last(steps: list[int | None], keep: Callable[[int | None], bool]) -> int:
    """The last index whose step satisfies ``keep`` (-1 if none): a walk back from the end, which
    stops after the newest steps (the scan from the start it replaces walked every message)."""
    for i in range(len(steps) - 1, -1, -1):
        if keep(steps[i]):
            return i
    return -1


def _last_none(steps: list[int | None]) -> int:
    """The last index whose step is None (-1 if none), found at C speed."""
    try:
        return len(steps) - 1 - steps[::-1].index(None)
    except ValueError:
        return -1


def place_cache_control(rendered: Rendered, limit: int = MAX_BREAKPOINTS) -> list[Message]:
    """A copy of ``rendered.messages`` with breakpoints set (the rendered messages stay untouched)."""
    marks = set(breakpoints(rendered, limit))
    return [_marked(m) if i in marks else _unmarked(m) for i, m in enumerate(rendered.messages)]


def _unmarked(message: Message) -> Message:
    """The message without any cache_control a caller may have set (copied only if needed)."""
    content = message.get("content")
    parts: list[Any] = content if isinstance(content, list) else []
    has_part_marks = any(isinstance(p, dict) and "cache_control" in p for p in parts)
    if "cache_control" not in message and not has_part_marks:
        return message
    out = {k: v for k, v in message.items() if k != "cache_control"}
    if has_part_marks:
        out["content"] = [
            {k: v for k, v in p.items() if k != "cache_control"} if isinstance(p, dict) else p for p in parts
        ]
    return out


def _marked(message: Message) -> Message:
    out = copy.deepcopy(_unmarked(message))
    content: Any = out.get("content")
    if content is None or out.get("role") == "tool" or (isinstance(content, list) and not content):
        # tool results and tool-call-only replies take the mark on the message (as mini does)
        out["cache_control"] = dict(EPHEMERAL)
        return out
    if isinstance(content, str):
        out["content"] = [{"type": "text", "text": content, "cache_control": dict(EPHEMERAL)}]
        return out
    last = len(content) - 1
    part = content[last]
    out["content"][last] = {**part, "cache_control": dict(EPHEMERAL)} if isinstance(part, dict) else part
    return out

"""mini-swe-agent 2.x: the model calls a run made whose reply it did not store."""

from __future__ import annotations

from typing import Any

__all__ = ["unreplied_calls"]


def unreplied_calls(messages: list[Any]) -> list[dict[str, Any]]:
    """Model calls whose reply was not stored (mini 2.x: a ``user`` message with
    ``extra.interrupt_type`` ``FormatError`` that does not answer an assistant message). The other
    interrupt types are the person's (``UserInterruption``, ``UserRejection``, ``UserNewTask``):
    a message typed in, no model call.

    The call's prompt was every message before the interrupt. Each entry places it in the
    History: ``{"step": t, "observations": j, "type": ...}`` = after step t's reply and its first
    j observations (t = 0: within the prefix, j = prefix messages sent). The History itself stays
    one step per stored reply; replay reads this list from ``History.meta["unreplied"]``.
    """
    out: list[dict[str, Any]] = []
    step, seen, prev_role = 0, 0, None
    for m in messages:
        if not isinstance(m, dict) or m.get("role") not in ("system", "user", "assistant", "tool"):
            continue
        role = m["role"]
        if role == "assistant" and not (step == 0 and m.get("is_demo")):
            step, seen = step + 1, 0
        else:
            extra = m.get("extra")
            kind = extra.get("interrupt_type") if isinstance(extra, dict) else None
            if kind == "FormatError" and prev_role != "assistant":
                out.append({"step": step, "observations": seen, "type": kind})
            seen += 1
        prev_role = role
    return out

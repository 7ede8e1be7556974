"""mini-swe-agent runs: the model calls a 2.x run made whose reply it did not store, and the user's
pins a refold run keeps (``info.refold_pins``, or a pins file beside a live run)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["PINS", "read_pins", "unreplied_calls"]


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


PINS = "refold_pins"
"""The key under ``info`` (a trajectory) or at the top (a pins file) that holds the user's pins."""


def read_pins(data: Any, where: str) -> list[dict[str, Any]]:
    """The pin records of a trajectory or a pins file (``[]`` when it has none); a malformed list
    is a ValueError of one line naming ``where``."""
    if not isinstance(data, Mapping):
        return []
    info = data.get("info")
    found = info.get(PINS) if isinstance(info, Mapping) and PINS in info else data.get(PINS)
    if found is None:
        return []
    if not isinstance(found, list) or not all(
        isinstance(r, dict) and isinstance(r.get("target"), str) and isinstance(r.get("at"), int) for r in found
    ):
        raise ValueError(f"{where}: field '{PINS}' must be a list of {{target, at, on}} records")
    return [dict(r) for r in found]

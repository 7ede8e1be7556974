"""Small builders for the chat messages a rendered prompt is made of."""

from __future__ import annotations

from typing import Any

from .protocol import CM
from .types import Message, Step

_API_KEYS = ("role", "content", "tool_calls", "tool_call_id", "name")

__all__ = ["clean", "label", "mask_text", "with_content", "with_text"]


def clean(message: Message) -> Message:
    """The message as an API receives it (drops recorder fields such as mini's ``extra``)."""
    return {k: message[k] for k in _API_KEYS if k in message}


def with_text(message: Message, text: str) -> Message:
    out = clean(message)
    out["content"] = text
    return out


def with_content(message: Message, text: str) -> Message:
    """``message`` with its text replaced; non-text parts (images) are kept after it."""
    out = clean(message)
    if isinstance(message.get("content"), list):
        parts: list[Any] = [{"type": "text", "text": text}]
        parts += [p for p in message["content"] if isinstance(p, dict) and p.get("type") != "text"]
        out["content"] = parts
    else:
        out["content"] = text
    return out


def label(step: int, body: str) -> str:
    return f"[step {step}]\n{body}"


def mask_text(step: Step, *, reversible: bool) -> str:
    lines = sum(t.count("\n") + 1 for t in step.output_texts)
    hint = f" `restore {step.index}` shows it." if reversible else " It cannot be restored."
    return f"[step {step.index}]\n{CM} Output of step {step.index} ({lines} lines) hidden to save context.{hint}"

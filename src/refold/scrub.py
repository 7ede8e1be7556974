"""Lone surrogates (``"\\udc80"``: legal JSON, common in tool output decoded with
``surrogateescape``) replaced by U+FFFD: such text cannot be encoded, tokenized or hashed. The
proxy scrubs what it accepts and the loaders what they read, so both store the same text."""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["scrub_arguments", "scrub_calls", "scrub_text", "scrub_value"]

_SURROGATE = re.compile("[\ud800-\udfff]")


def scrub_text(s: str) -> str:
    """``s`` with every lone surrogate replaced by U+FFFD (a no-op for text that has none)."""
    if s.isascii():
        return s
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", s)
    return s


def scrub_arguments(text: str) -> str:
    """Tool-call arguments (JSON text) whose escapes decode to lone surrogates, re-encoded with
    U+FFFD in their place: the command they carry is read, summarized and stored like any text."""
    if "\\u" not in text:
        return text
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return text
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(scrub_value(value), ensure_ascii=False)
    except (ValueError, RecursionError):
        pass
    return text


def scrub_value(v: Any) -> Any:
    if isinstance(v, str):
        return scrub_text(v)
    if isinstance(v, dict):
        return {scrub_text(str(k)): scrub_value(x) for k, x in v.items()}
    if isinstance(v, list):
        return [scrub_value(x) for x in v]
    return v


def scrub_calls(message: dict[str, Any]) -> None:
    """``scrub_arguments`` on every tool call of a checked message, in place."""
    for c in message.get("tool_calls") or []:
        fn = c.get("function") if isinstance(c, dict) else None
        if isinstance(fn, dict) and isinstance(fn.get("arguments"), str):
            fn["arguments"] = scrub_arguments(fn["arguments"])

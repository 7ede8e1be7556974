"""Custom tool calls on chat completions (``tools: [{"type": "custom", ...}]``, GPT-5's free-form
tools): an assistant message calls one as ``{"id", "type": "custom", "custom": {"name", "input"}}``.

The session and its renderer read every call as a function call, so a custom call is held in the
session as ``{"id", "type": "custom", "function": {"name", "arguments": <input>}}`` (its ``type``
kept) and sent upstream in its own shape again. A client's reply is what the upstream sent: only
the proxy's reading of it changes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import ProxyError
from ..types import Message


def check_custom(c: dict[str, Any], p: str, fail: Callable[[str, str], ProxyError]) -> None:
    """``c`` (a tool call of type ``custom`` without ``function``): a name and its text input."""
    custom = c.get("custom")
    if not isinstance(custom, dict):
        raise fail(f"{p}.custom", "must be an object with 'name' and 'input'")
    if not isinstance(custom.get("name"), str):
        raise fail(f"{p}.custom.name", "must be a string")
    if custom.get("input") is not None and not isinstance(custom["input"], str):
        raise fail(f"{p}.custom.input", "must be a string")


def _is_custom(c: Any) -> bool:
    return isinstance(c, dict) and c.get("type") == "custom" and isinstance(c.get("custom"), dict)


def as_function(message: Message) -> Message:
    """``message`` with its custom calls in the function shape the session reads (a copy when any)."""
    calls = message.get("tool_calls")
    if not isinstance(calls, list) or not any(_is_custom(c) for c in calls):
        return message
    out = []
    for c in calls:
        if _is_custom(c):
            fn = {"name": c["custom"].get("name"), "arguments": c["custom"].get("input") or ""}
            c = {**{k: v for k, v in c.items() if k != "custom"}, "function": fn}
        out.append(c)
    return {**message, "tool_calls": out}


def as_custom(message: Message) -> Message:
    """``message`` with the calls ``as_function`` changed in their own shape again (a copy when any)."""
    calls = message.get("tool_calls")
    if not isinstance(calls, list) or not any(isinstance(c, dict) and c.get("type") == "custom" and "function" in c
                                              for c in calls):
        return message
    out = []
    for c in calls:
        if isinstance(c, dict) and c.get("type") == "custom" and isinstance(c.get("function"), dict):
            fn = c["function"]
            c = {**{k: v for k, v in c.items() if k != "function"}, "custom": {"name": fn.get("name"), "input": fn.get("arguments") or ""}}
        out.append(c)
    return {**message, "tool_calls": out}


def outbound(body: dict[str, Any]) -> dict[str, Any]:
    """A chat request as the upstream takes it: custom calls in their own shape."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return body
    out = [as_custom(m) if isinstance(m, dict) and m.get("role") == "assistant" else m for m in messages]
    return body if all(a is b for a, b in zip(out, messages, strict=True)) else {**body, "messages": out}

"""A stored reply's tool calls as the client sent them, for ``restore`` (``refold.restore.CallLines``).

A session records a Messages or Responses reply in refold's chat form: a harness's shell tool is
``bash`` with ``{"command"}`` (``shell_tools.canonical_call``), so Claude Code's ``Bash`` call with
``{"command", "description"}`` is not what the model wrote. The reply keeps its native blocks or
items under ``extra[<surface key>]``; this reads them back, so a restored step shows the calls as
the model made them. Anything unexpected: None, and ``restore`` shows the stored form.
"""

from __future__ import annotations

import json
from typing import Any

from ..restore import CallLines, call_line
from ..types import Message


def call_lines(key: str) -> CallLines:
    """``CallLines`` for replies whose native form is under ``extra[key]``."""

    def lines(reply: Message) -> list[str] | None:
        native = (reply.get("extra") or {}).get(key)
        if not isinstance(native, list):
            return None
        out = [line for item in native if isinstance(item, dict) and (line := _line(item)) is not None]
        return out or None

    return lines


KEYS = ("anthropic", "responses")
"""``anthropic_wire.KEY`` and ``responses_wire.KEY`` (not imported: they import the surfaces, which import this)."""


def any_call_lines(reply: Message) -> list[str] | None:
    """``CallLines`` for a session of any surface (the session pages, ``refold sessions expand``)."""
    for key in KEYS:
        out = call_lines(key)(reply)
        if out is not None:
            return out
    return None


def _line(item: dict[str, Any]) -> str | None:
    kind, name = item.get("type"), item.get("name")
    if kind == "tool_use" and isinstance(name, str):  # Anthropic
        return call_line(name, json.dumps(item.get("input", {}), ensure_ascii=False))
    if kind == "function_call" and isinstance(name, str):  # Responses
        args = item.get("arguments")
        return call_line(name, args if isinstance(args, str) else json.dumps(args, ensure_ascii=False))
    if kind == "custom_tool_call" and isinstance(name, str):  # a free-form tool: its input is the text
        return call_line(name, item.get("input"))
    if kind == "local_shell_call":
        return call_line("local_shell", json.dumps(item.get("action"), ensure_ascii=False))
    return None

"""How a surface's tool calls are read: shell tools matched case-insensitively, and a reply split
into the calls the client gets and the context commands the proxy keeps for itself (a harness's
shell tool read as ``bash``: ``refold.shell_tools``)."""

from __future__ import annotations

import copy
from collections.abc import Collection
from typing import Any

from ..shell import SHELL_TOOLS
from ..types import Message

_CALL_ITEMS = frozenset({"tool_use", "function_call", "custom_tool_call", "local_shell_call"})
_THINKING = frozenset({"thinking", "redacted_thinking"})


def recognizable(reply: Message) -> Message:
    """The reply as the recognizer reads it: shell tools matched case-insensitively (Claude Code's
    ``Bash``); the stored reply keeps the names as issued."""
    calls = reply.get("tool_calls") or []
    out = []
    for c in calls:
        fn = dict(c.get("function") or {})
        name = str(fn.get("name") or "")
        if name.lower() in SHELL_TOOLS:
            fn["name"] = name.lower()
        out.append({**c, "function": fn})
    return {**reply, "tool_calls": out} if out else reply


def _is_call(item: Any, ids: Collection[str]) -> bool:
    return (
        isinstance(item, dict) and item.get("type") in _CALL_ITEMS
        and (item.get("id") in ids or item.get("call_id") in ids)
    )


def split_calls(reply: Message, ids: Collection[str], key: str) -> tuple[Message, Message]:
    """``reply`` as the client holds it (without the calls ``ids``) and those calls as a reply of
    their own (native blocks or items under ``extra[key]``; a signed thinking block that opens the
    reply is repeated before them: Anthropic wants the last assistant turn of a tool loop to start
    with one)."""
    calls = [c for c in reply.get("tool_calls") or [] if isinstance(c, dict)]
    extra = reply.get("extra")
    extra = extra if isinstance(extra, dict) else {}
    native = extra.get(key)
    kept: Message = {**reply, "tool_calls": [c for c in calls if c.get("id") not in ids]}
    if not kept["tool_calls"]:
        del kept["tool_calls"]
    own: Message = {"role": "assistant", "content": "", "tool_calls": [c for c in calls if c.get("id") in ids]}
    if isinstance(native, list):
        kept["extra"] = {**extra, key: [copy.deepcopy(i) for i in native if not _is_call(i, ids)]}
        lead = []
        for i in native:
            if not (isinstance(i, dict) and i.get("type") in _THINKING):
                break
            lead.append(copy.deepcopy(i))
        own["extra"] = {key: [*lead, *(copy.deepcopy(i) for i in native if _is_call(i, ids))]}
    return kept, own

"""How a surface's tool calls are read: a harness's shell tool under its own name as ``bash``
(what refold's shell analysis and context-command recognizer read), and a reply split into the
calls the client gets and the context commands the proxy keeps for itself."""

from __future__ import annotations

import copy
import json
import shlex
from collections.abc import Collection
from typing import Any

from ..shell import SHELL_TOOLS
from ..types import Message

SHELL_NAMES = frozenset({"bash", "shell", "exec_command", "shell_command", "local_shell"})
"""A harness's shell tool under its own name: Claude Code's ``Bash``, Copilot's ``bash``, Codex's
``shell`` (an argv list) and ``exec_command`` (``cmd``)."""

_CALL_ITEMS = frozenset({"tool_use", "function_call", "custom_tool_call", "local_shell_call"})
_THINKING = frozenset({"thinking", "redacted_thinking"})


def canonical_call(name: str, arguments: str, *, free_form: bool = False) -> tuple[str, str]:
    """How the session records a call: a harness's shell tool as ``bash`` with ``{"command": str}``
    (what refold's shell analysis and context-command recognizer read); other tools as issued.
    ``free_form``: a custom tool's text input, the command itself. Only the session sees this
    form; what goes upstream is the call's native block or item."""
    if name.lower() not in SHELL_NAMES:
        return name, arguments
    if free_form:
        return "bash", json.dumps({"command": arguments}, ensure_ascii=False)
    try:
        args = json.loads(arguments)
    except ValueError:
        return name, arguments
    cmd = args.get("command", args.get("cmd")) if isinstance(args, dict) else None
    if isinstance(cmd, list) and cmd and all(isinstance(c, str) for c in cmd):
        shell_c = len(cmd) == 3 and cmd[0] in ("bash", "sh", "zsh") and cmd[1] in ("-c", "-lc")
        cmd = cmd[2] if shell_c else shlex.join(cmd)
    if not isinstance(cmd, str):
        return name, arguments
    return "bash", json.dumps({"command": cmd}, ensure_ascii=False)


def tool_name(name: str) -> str:
    return "bash" if name.lower() in SHELL_NAMES else name


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

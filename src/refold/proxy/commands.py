"""Context commands the proxy answers itself (the client never sees them).

The model may issue one as a shell tool call whose command is ``restore 3``, as a call of the
``restore`` function tool the proxy advertises next to the client's tools, or (agents without
tool calling) as the only command of a reply's ```bash block.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..history import History, extract_actions
from ..policy import Policy
from ..protocol import CM, COMMAND_NAMES, ContextCommand, parse_command, parse_restore_args
from ..render import restore_text
from ..types import Message

SHELL_TOOLS = frozenset(
    {"bash", "shell", "sh", "terminal", "execute_bash", "run_command", "run_shell", "exec"}
)

RESTORE_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "restore",
        "description": (
            "Show earlier steps again exactly as first shown (reply, command and output), "
            "without running anything. Use it when a [context-manager] note says content was omitted."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "steps": {"type": "string", "description": "step numbers, e.g. '3', '3 5' or '3-5'"}
            },
            "required": ["steps"],
        },
    },
}


@dataclass(frozen=True, slots=True)
class Call:
    """One action of a reply: a context command (``command``) or anything else (``None``)."""

    id: str | None
    command: ContextCommand | None


def context_calls(reply: Message) -> list[Call] | None:
    """The reply's actions when at least one is a context command, else None."""
    calls = reply.get("tool_calls") or []
    if calls:
        out = [Call(c.get("id"), _tool_command(c)) for c in calls if isinstance(c, dict)]
        return out if any(c.command for c in out) else None
    actions = extract_actions(reply)
    if len(actions) == 1:
        cmd = parse_command(actions[0].command)
        if cmd is not None:
            return [Call(None, cmd)]
    return None


def _tool_command(call: dict[str, Any]) -> ContextCommand | None:
    fn = call.get("function") or {}
    name = fn.get("name")
    raw = fn.get("arguments")
    try:
        args = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        args = raw
    if name in COMMAND_NAMES:
        if isinstance(args, dict):
            value = next(
                (args[k] for k in ("steps", "step", "argument", "arg", "name", "query") if k in args), None
            )
            if value is None:
                value = next(iter(args.values()), "")
            if isinstance(value, list):
                value = " ".join(str(v) for v in value)
            return ContextCommand(name, str(value))
        return ContextCommand(name, "" if args is None else str(args))
    if name in SHELL_TOOLS and isinstance(args, dict):
        command = args.get("command", args.get("cmd"))
        if isinstance(command, list):
            command = " ".join(str(c) for c in command)
        if isinstance(command, str):
            return parse_command(command)
    return None


def answer(history: History, policy: Policy, cmd: ContextCommand) -> tuple[str, list[int]]:
    """The text shown to the model for ``cmd`` and the steps it restored."""
    if cmd.name != "restore":
        return (
            f"{CM} `{cmd.name}` is not available here; this context manager answers `restore <step>` only. "
            "Continue with your task.",
            [],
        )
    steps, error = parse_restore_args(cmd.argument, len(history))
    if error:
        return error, []
    return restore_text(history, steps, policy), steps


def observations(
    history: History, policy: Policy, reply: Message, calls: list[Call]
) -> tuple[list[Message], list[int]]:
    """The messages answering ``reply``'s actions, and every step restored."""
    restored: list[int] = []
    out: list[Message] = []
    for c in calls:
        if c.command is None:
            text = (
                f"{CM} Not run: this reply also issued a context command, which is answered on its own. "
                "Issue this command again in your next reply."
            )
        else:
            text, steps = answer(history, policy, c.command)
            restored += steps
        out.append(
            {"role": "tool", "tool_call_id": c.id, "content": text}
            if c.id is not None
            else {"role": "user", "content": text}
        )
    return out, list(dict.fromkeys(restored))

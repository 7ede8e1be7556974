"""How the viewer shows a message and what its row says: tool-call arguments pretty-printed, a
reply's command, an output's exit status and one-line summary."""

from __future__ import annotations

import json
from typing import Any

from ...mechanisms.summary import Summary, summarize
from ...mechanisms.summary_wrap import command_line
from ...types import Message, Step, content_text


def pretty_arguments(arguments: Any) -> str:
    """Tool-call arguments as a reader wants them: ``key: value`` lines, a multi-line string
    (a command, a file body) as an indented block, anything else as indented JSON."""
    value = arguments
    if isinstance(arguments, str):
        try:
            value = json.loads(arguments)
        except ValueError:
            return arguments  # not JSON: as recorded
    if not isinstance(value, dict):
        return json.dumps(value, indent=2, ensure_ascii=False)
    lines: list[str] = []
    for key, v in value.items():
        if isinstance(v, str) and "\n" in v:
            lines.append(f"{key}:")
            lines.extend("    " + line for line in v.split("\n"))
        elif isinstance(v, str):
            lines.append(f"{key}: {v}")
        else:
            body = json.dumps(v, indent=2, ensure_ascii=False).split("\n")
            lines.append(f"{key}: {body[0]}")
            lines.extend("  " + line for line in body[1:])
    return "\n".join(lines)


def display_text(message: Message) -> str:
    """What the viewer shows for a message: its text, then each tool call with its arguments
    pretty-printed (``→ name`` and indented ``key: value`` lines)."""
    text = content_text(message.get("content"))
    calls = message.get("tool_calls") or []
    blocks = []
    for call in calls:
        fn = (call or {}).get("function") or {}
        args = pretty_arguments(fn.get("arguments", ""))
        head = f"→ {fn.get('name', 'tool')}"
        blocks.append(
            head + ("\n" + "\n".join("  " + ln for ln in args.split("\n")) if args.strip() else "()")
        )
    if blocks:
        text = (text + "\n" if text else "") + "\n".join(blocks)
    return text


def _summary(step: Step, j: int, text: str) -> Summary:
    action = step.actions[min(j, len(step.actions) - 1)] if step.actions else None
    return summarize(action.command if action else "", text, action.tool if action else "bash")


def reply_preview(step: Step) -> str:
    """A reply's row: the command(s) it ran, or its first line when it ran none."""
    first_line = next(
        (
            ln.strip()
            for ln in step.reply_text.split("\n")
            if ln.strip() and not ln.strip().upper().startswith(("PROGRESS", "STALE"))
        ),
        "",
    )
    if step.observations and _summary(step, 0, step.output_texts[0]).kind == "format":
        return "✗ format error, nothing ran · " + first_line[:160]
    if step.actions:
        first = step.actions[0]
        head = ("$ " if first.tool == "bash" else "") + command_line(first.tool, first.command)
        more = len(step.actions) - 1
        return head + (f"  (+{more} more)" if more else "")
    return first_line[:200]


def output_preview(step: Step, j: int, text: str) -> str:
    """An output's row: its exit status when it failed and the one-line summary of what it showed."""
    s = _summary(step, j, text)
    status = f"[exit {s.status}] " if s.status not in (None, 0) else ""
    return status + s.text

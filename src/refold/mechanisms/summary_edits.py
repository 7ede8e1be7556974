"""What Claude Code's and Codex's editing and planning tools said, in one line: ``Edit``/``Write``/
``MultiEdit`` results (applied, created, or not applied and why), a rejected tool use, ``TodoWrite``'s
and ``update_plan``'s plan. Pure; ``None`` when the output is not one of theirs."""

from __future__ import annotations

import json
import re

from .summary_text import _files, _left_cut, _one_line, _plural

__all__ = ["EDIT_TOOLS", "edit_result", "plan_state", "rejected", "tool_error"]

EDIT_TOOLS = frozenset({"Edit", "Write", "MultiEdit", "NotebookEdit"})

_UPDATED = re.compile(r"^The file (.+?) has been (?:updated|edited)(?: successfully)?\.")
_SNIPPET = re.compile(r"Here's the result of running `cat -n` on a snippet of the edited file:\s*\n")
_ALL = re.compile(r"All occurrences of '.*' were successfully replaced with '.*'\.?\s*$", re.DOTALL)
_CREATED = re.compile(r"^File created successfully at: (.+?)\s*$", re.MULTILINE)
_MULTI = re.compile(r"^Applied (\d+) edits? to (.+?):", re.MULTILINE)
_TOOL_ERROR = re.compile(r"^\s*<tool_use_error>(.*?)(?:</tool_use_error>|\Z)", re.DOTALL)
_TOO_LARGE = re.compile(r"^\s*(File content \([\d,.]+ \w+\) exceeds maximum allowed [^.\n]*\.?)")  # Read: nothing read
_PAST_END = re.compile(r"^\s*(Warning: the file exists but is (?:shorter than the provided offset|empty)[^\n]*)")
_REJECTED = "The user doesn't want to proceed with this tool use."
_NUMBER = re.compile(r"^\s*(\d+)(?:\u2192|\t)", re.MULTILINE)


def rejected(body: str) -> bool:
    """Claude Code's answer when the user declines a tool call: nothing was run or written."""
    return body.lstrip().startswith(_REJECTED)


_PATCHED = re.compile(r"^Success\. Updated the following files:\n((?:[AMD] .+\n?)+)")
_PATCH_VERB = {"A": "added", "M": "modified", "D": "deleted"}


def tool_error(body: str) -> str | None:
    """The message of Claude Code's ``<tool_use_error>`` (a Read of a missing file, a bad Grep path)."""
    err = _TOOL_ERROR.match(body) or _TOO_LARGE.match(body) or _PAST_END.match(body)
    return " ".join(err.group(1).split()) if err and err.group(1).strip() else None


def edit_result(tool: str, body: str, writes: tuple[str, ...], limit: int = 160) -> tuple[str, str] | None:
    """``(kind, line)`` of an edit tool's result: ``edit``, or ``error`` when it was not applied.
    ``limit``: a long path is cut from the left so that what follows it stays whole."""
    patched = _PATCHED.match(body.lstrip())
    if patched:  # Codex's apply_patch
        rows = [ln.split(" ", 1) for ln in patched.group(1).strip().split("\n")]
        groups = {v: [p for k, p in rows if k == c] for c, v in _PATCH_VERB.items()}
        return "edit", "patch applied: " + "; ".join(
            f"{verb} {_files(paths, room=60)[2:-1]}" if len(paths) > 1 else f"{verb} {paths[0]}"
            for verb, paths in groups.items()
            if paths
        )
    if tool not in EDIT_TOOLS:
        return None
    target = writes[0] if writes else "the file"
    if rejected(body):
        return "error", f"edit of {target} NOT applied: the user rejected it"
    err = _TOOL_ERROR.match(body)
    if err:
        return "error", f"edit of {target} NOT applied: {_one_line(err.group(1).strip(), 100)}"
    created = _CREATED.search(body)
    if created:
        return "edit", f"created {created.group(1)}"
    multi = _MULTI.search(body)
    if multi:
        return "edit", f"edited {multi.group(2)} ({_plural(int(multi.group(1)), 'edit')} applied)"
    m = _UPDATED.match(body.lstrip())
    if m is None:
        return None
    rest = body.lstrip()[m.end() :]
    path = _left_cut(m.group(1), max(30, limit - 60))
    if _ALL.search(rest):
        return "edit", f"edited {path}: every occurrence replaced"
    snippet = _SNIPPET.search(rest)
    numbers = [int(n) for n in _NUMBER.findall(rest[snippet.end() :])] if snippet else []
    if numbers:
        return "edit", f"edited {path}; printed its lines {numbers[0]}-{numbers[-1]} after the edit"
    return "edit", f"edited {path}"


_DONE = ("completed", "done")


def plan_state(tool: str, arguments: str) -> str | None:
    """A plan written with ``TodoWrite`` (``todos``) or ``update_plan`` (``plan``): how many of its
    items are done, which one is in progress, how many are left."""
    if tool not in ("TodoWrite", "update_plan"):
        return None
    try:
        args = json.loads(arguments)
    except ValueError:
        return None
    items = args.get("todos", args.get("plan")) if isinstance(args, dict) else None
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        return None
    status = [str(i.get("status", "")) for i in items]
    done = sum(s in _DONE for s in status)
    active = [str(i.get("content") or i.get("step") or "") for i in items if i.get("status") == "in_progress"]
    left = len(items) - done - len(active)
    parts = [f"{done} of {_plural(len(items), 'item')} done"]
    if active:
        parts.append(
            f'in progress: "{_one_line(active[0], 70)}"'
            + (f" (+{len(active) - 1} more)" if len(active) > 1 else "")
        )
    if left:
        parts.append(f"{left} pending")
    return "plan updated: " + ", ".join(parts)

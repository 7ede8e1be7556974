"""Shapes a recorded message must have before a History is built from it: each tool call as the
chat APIs shape it, and no content part of another API (one ``TrajectoryError`` line naming the
message and field, instead of a traceback or content silently left out)."""

from __future__ import annotations

from typing import Any

from .errors import TrajectoryError


def check_tool_calls(messages: list[Any], name: str) -> None:
    """Each recorded tool call as the chat APIs shape it, or one line naming the message and field
    (rendering and token counts read these fields)."""
    for i, m in enumerate(messages):
        calls = m.get("tool_calls") if isinstance(m, dict) else None
        if calls is None:
            continue
        role = str(m.get("role"))
        where = f"message {i} ({role if len(role) <= 40 else role[:37] + '...'})"  # a junk role stays one short line
        if not isinstance(calls, list):
            raise TrajectoryError(name, f"{where}: 'tool_calls' is not a list")
        for j, c in enumerate(calls):
            fn = c.get("function") if isinstance(c, dict) else None
            if not isinstance(fn, dict):
                raise TrajectoryError(name, f"{where}: tool_calls[{j}].function is not an object")
            if not isinstance(fn.get("name"), str):
                raise TrajectoryError(name, f"{where}: tool_calls[{j}].function.name is not a string")
            if not isinstance(fn.get("arguments", ""), str | dict):
                raise TrajectoryError(name, f"{where}: tool_calls[{j}].function.arguments is neither a string nor an object")


_FOREIGN_PARTS = {
    "tool_use": "Anthropic Messages",
    "tool_result": "Anthropic Messages",
    "function_call": "OpenAI Responses",
    "function_call_output": "OpenAI Responses",
}


def check_parts(messages: list[Any], name: str) -> None:
    """Content as chat messages carry it (text, null, or a list of parts); a part of another API's
    shape is refused, naming it: read as chat messages, its calls and results were dropped from
    every prompt, count and note (Anthropic tool_use blocks)."""
    for i, m in enumerate(messages):
        content = m.get("content") if isinstance(m, dict) else None
        if content is not None and not isinstance(content, str | list):  # 5 was counted as the text "5"
            raise TrajectoryError(name, f"message {i}: content is {type(content).__name__}, not text or a list of parts")
        for j, part in enumerate(content if isinstance(content, list) else ()):
            if not isinstance(part, dict | str):
                raise TrajectoryError(name, f"message {i}: content[{j}] is {type(part).__name__}, not a content part")
            kind = part.get("type") if isinstance(part, dict) else None
            if isinstance(kind, str) and kind in _FOREIGN_PARTS:
                raise TrajectoryError(
                    name,
                    f"message {i}: content[{j}] is an {_FOREIGN_PARTS[kind]} '{kind}' block; refold reads "
                    "chat-completions messages (tool_calls and role 'tool'), or serves that API live (refold serve)",
                )

"""OpenAI Responses API items, read and rebuilt the same way by the proxy's ``/v1/responses``
surface (``proxy.responses_wire``) and by mini-swe-agent's Responses-API model classes
(``formats.mini_responses``): which items are calls and outputs, an item's text, and a
rendered reply turned back into output items (reasoning and calls as received, the text replaced
only where the rendering changed it)."""

from __future__ import annotations

import copy
import json
import re
from typing import Any

from .shell_tools import canonical_call
from .types import Message, content_text

CALLS = ("function_call", "custom_tool_call", "local_shell_call")
OUTPUTS = ("function_call_output", "custom_tool_call_output", "local_shell_call_output")


def item_kind(item: dict[str, Any]) -> str:
    """An item's ``type``; an untyped item with a ``role`` is a message (the short input form)."""
    kind = item.get("type")
    return kind if isinstance(kind, str) else ("message" if "role" in item else "")


def item_text(item: dict[str, Any]) -> str:
    """The text of a message item (a string, or its text parts joined)."""
    content = item.get("content")
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return "".join(
        str(p.get("text", ""))
        for p in content
        if isinstance(p, dict) and p.get("type") in ("output_text", "text", "input_text")
    )


def chat_call(item: dict[str, Any]) -> dict[str, Any]:
    """A call item as the chat tool call the session records (a harness's shell tool as ``bash``)."""
    kind = item_kind(item)
    call_id = item.get("call_id") or item.get("id")
    if kind == "local_shell_call":
        action = item.get("action")
        argv = action.get("command", []) if isinstance(action, dict) else []
        name, args = "shell", json.dumps({"command": argv}, ensure_ascii=False)
    elif kind == "custom_tool_call":  # a free-form tool: its input is the text (a shell tool's: the command)
        name, args = canonical_call(str(item.get("name") or ""), str(item.get("input") or ""), free_form=True)
    else:
        raw = item.get("arguments")
        name, args = str(item.get("name") or ""), raw if isinstance(raw, str) else json.dumps(raw or {})
    name, args = canonical_call(name, args)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}


def reply_message(items: list[dict[str, Any]], key: str) -> Message:
    """One response's output items as the assistant message they stand for; the items are kept
    as received under ``extra[key]``."""
    text = "".join(item_text(i) for i in items if item_kind(i) == "message")
    msg: Message = {"role": "assistant", "content": text, "extra": {key: copy.deepcopy(items)}}
    calls = [chat_call(i) for i in items if item_kind(i) in CALLS]
    if calls:
        msg["tool_calls"] = calls
    return msg


def text_item(text: str, like: dict[str, Any] | None = None) -> dict[str, Any]:
    """An assistant message item holding ``text`` (with the other fields of ``like``, if given)."""
    item = {k: copy.deepcopy(v) for k, v in (like or {}).items() if k != "content"}
    item.setdefault("type", "message")
    item.setdefault("role", "assistant")
    item["content"] = [{"type": "output_text", "text": text, "annotations": []}]
    return item


def assistant_items(m: Message, native: Any) -> list[dict[str, Any]]:
    """A rendered reply ``m`` as output items: its received items ``native`` (reasoning with its
    ``encrypted_content``, the calls it still makes), with the rendered text where it changed;
    built from the chat form when nothing was received."""
    text = content_text(m.get("content"))
    calls = [c for c in m.get("tool_calls") or [] if isinstance(c, dict)]
    if not isinstance(native, list):
        out = [text_item(text)] if text else []
        for c in calls:
            fn = c.get("function") or {}
            out.append({"type": "function_call", "call_id": c.get("id"), "name": fn.get("name"), "arguments": fn.get("arguments") or "{}"})
        return out
    ids = {c.get("id") for c in calls}
    original = "".join(item_text(i) for i in native if isinstance(i, dict) and item_kind(i) == "message")
    same = text == original or not text
    out = []
    placed = False
    for item in native:
        kind = item_kind(item) if isinstance(item, dict) else None
        if kind == "message":
            if same:
                out.append(copy.deepcopy(item))
            elif not placed:
                out.append(text_item(text, item))
                placed = True
        elif kind in CALLS:
            if (item.get("call_id") or item.get("id")) in ids:
                out.append(copy.deepcopy(item))
        else:
            out.append(copy.deepcopy(item))  # reasoning (encrypted_content intact) and other items
    if not same and not placed:
        at = next((k for k, i in enumerate(out) if item_kind(i) in CALLS), len(out))
        out.insert(at, text_item(text))
    return out


RUNNING = re.compile(r"Process running with session ID (\d{1,12})\n")
"""Unified exec (Codex 0.12x): a command still running after its yield answers with its session id."""


def read_polls(messages: list[Message]) -> int:
    """Read each ``write_stdin`` that only polls a running command (no input) as that command, in
    place, as the Codex loader does: its output is the command's. Returns how many were read so."""
    commands: dict[Any, str] = {}
    running: dict[int, str] = {}
    n = 0
    for m in messages:
        if m.get("role") == "tool":
            body = m.get("content")
            found = RUNNING.search(body[:300]) if isinstance(body, str) else None
            cid = m.get("tool_call_id")
            command = commands.get(cid) if isinstance(cid, str) else None
            if found and command is not None:
                running[int(found.group(1))] = command
            continue
        for c in m.get("tool_calls") or [] if m.get("role") == "assistant" else []:
            fn = c.get("function") if isinstance(c, dict) else None
            if not isinstance(fn, dict):
                continue
            try:
                args = json.loads(fn["arguments"])
            except (ValueError, TypeError, KeyError):
                continue
            if not isinstance(args, dict):
                continue
            # ids as written are strings (a call's) and ints (a session's): anything else names none
            call_id, session = c.get("id"), args.get("session_id")
            if fn.get("name") == "bash" and isinstance(args.get("command"), str) and isinstance(call_id, str):
                commands[call_id] = args["command"]
            elif fn.get("name") == "write_stdin" and args.get("chars") in ("", None) and type(session) is int and session in running:
                command = running[session]
                fn["name"], fn["arguments"] = "bash", json.dumps({"command": command}, ensure_ascii=False)
                if isinstance(call_id, str):
                    commands[call_id] = command
                n += 1
    return n

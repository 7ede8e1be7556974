"""OpenAI Responses input items <-> the session's OpenAI-style messages, and back after rendering.

A run of output items (``reasoning``, assistant ``message``, ``function_call``,
``custom_tool_call``, ``local_shell_call``, other ``*_call`` items) is one assistant reply; the
items after it (``function_call_output`` and the other outputs, user and developer messages) are
what came back. Each message keeps its native items under ``extra["responses"]``. Going back,
``reasoning`` items (with their ``encrypted_content``) and calls are copied as received; the
assistant text is as received unless the rendering changed it (a condensed old reply); outputs
keep their item and carry the rendered text. ``instructions`` is the system prompt, with refold's
protocol section joined to it. What stands before a ``compaction`` item is the history Codex's
compaction kept: its assistant answers are prefix messages (``KEPT``), no steps, as the Codex
loader reads them, and its other items (the encrypted summary) go back where they stood.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

from ..errors import ProxyError
from ..history import KEPT, History
from ..responses_items import OUTPUTS, assistant_items, item_kind, item_text, read_polls, reply_message
from ..shell_tools import tool_name
from ..types import Message, Origin, Rendered, content_text
from .passthrough import is_compaction
from .surface import Parsed
from .validate import MAX_DEPTH, bad_upstream, too_deep

KEY = "responses"
INPUT_ROLES = ("user", "system", "developer")
COMPACTIONS = ("compaction", "compaction_summary")
OPAQUE = "opaque"
"""``Parsed.state`` key: (index in the messages it stood before, item) of each kept item read as no message."""


_FIELD = re.compile(r"([A-Za-z_][\w.]*): ")


def bad(message: str) -> ProxyError:
    """A 400 whose ``param`` is the field the message opens with (``input.0.role: ...``), as
    chat completions' errors name theirs."""
    field = _FIELD.match(message)
    return ProxyError(400, message, code="invalid_request", param=field.group(1) if field else None)


def items_of(body: dict[str, Any]) -> list[dict[str, Any]]:
    raw = body.get("input")
    if isinstance(raw, str):
        return [{"role": "user", "content": raw}]
    if not isinstance(raw, list) or not all(isinstance(i, dict) for i in raw):
        raise bad("input: must be a string or an array of input items")
    return list(raw)


def parse(body: dict[str, Any], prior: list[dict[str, Any]] | None = None) -> Parsed:
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise bad("model: must be a non-empty string")
    if body.get("stream") is not None and not isinstance(body["stream"], bool):
        raise bad(f"stream: must be true or false, got {json.dumps(body['stream'])}")  # "false" is not false
    items = [*(prior or []), *items_of(body)]
    if not items:
        raise bad("input: must not be empty")
    out: list[Message] = []
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise bad("instructions: must be a string")
    if instructions:
        out.append({"role": "system", "content": instructions, "extra": {KEY: "instructions"}})
    group: list[dict[str, Any]] = []
    # Codex's replacement_history (a compaction's kept history) ends with its ``compaction`` item:
    # what stands before it no call of this context wrote (read as the Codex loader reads it)
    kept_to = max((n for n, i in enumerate(items) if item_kind(i) in COMPACTIONS), default=-1)
    opaque: list[tuple[int, dict[str, Any]]] = []

    def close() -> None:
        if group:
            out.append(reply_message(group, KEY))
            group.clear()

    for n, item in enumerate(items):
        kind = item_kind(item)
        if kind == "item_reference":
            raise bad(f"input.{n}: an item_reference cannot be rendered (check renderable() first)")
        if n <= kept_to and kind and not (kind == "message" and item.get("role") in INPUT_ROLES):
            close()
            if kind == "message" and item.get("role") == "assistant":
                if not isinstance(item.get("content", ""), str | list):
                    raise bad(f"input.{n}.content: must be a string or an array of content parts")
                kept = reply_message([item], KEY)
                kept["extra"][KEPT] = True  # an answer the compaction kept: prefix, not a step
                out.append(kept)
            else:  # the encrypted summary (and any item the loader skips): sent back where it stood
                opaque.append((len(out), copy.deepcopy(item)))
            continue
        if kind == "message" and item.get("role") in INPUT_ROLES:
            content = item.get("content")
            if not isinstance(content, str | list):
                raise bad(f"input.{n}.content: must be a string or an array of content parts")
            close()
            out.append({"role": item["role"], "content": copy.deepcopy(content)})
        elif kind in OUTPUTS:
            call_id = item.get("call_id") or item.get("id")
            if not isinstance(call_id, str):
                raise bad(f"input.{n}.call_id: must be a string")
            output = item.get("output")
            close()
            out.append({
                "role": "tool",
                "tool_call_id": call_id,
                "content": copy.deepcopy(output) if isinstance(output, str | list) else json.dumps(output),
                "extra": {KEY: copy.deepcopy(item)},
            })
        elif kind == "message" and item.get("role") != "assistant":
            raise bad(f"input.{n}.role: must be one of user, system, developer, assistant")
        elif kind == "message" and not isinstance(item.get("content", ""), str | list):
            raise bad(f"input.{n}.content: must be a string or an array of content parts")
        elif kind:
            if isinstance(item.get("arguments"), str) and too_deep(item["arguments"]):  # read again as JSON
                raise bad(f"input.{n}.arguments: is JSON nested too deeply (limit {MAX_DEPTH})")
            group.append(item)  # assistant messages, reasoning, calls, other items kept verbatim
        else:
            raise bad(f"input.{n}: an item needs a 'type' (or a 'role')")
    close()
    read_polls(out)  # as the Codex loader reads them: replay and serve render one history
    tools = body.get("tools")
    if tools is not None and not (isinstance(tools, list) and all(isinstance(t, dict) for t in tools)):
        raise bad("tools: must be an array of objects")
    named = [{"type": "function", "function": {"name": tool_name(t["name"])}} for t in tools or [] if isinstance(t.get("name"), str)]
    return Parsed(out, named or None, {"items": items, OPAQUE: opaque})


def renderable(body: dict[str, Any]) -> bool:
    """False when the input points at items stored upstream (``item_reference``): refold cannot
    see them, so such a request is passed through."""
    raw = body.get("input")
    return not (isinstance(raw, list) and any(isinstance(i, dict) and i.get("type") == "item_reference" for i in raw))


def is_compaction_request(body: dict[str, Any]) -> bool:
    try:
        items = items_of(body)
    except ProxyError:
        return False
    last = items[-1] if items else {}
    return item_kind(last) == "message" and last.get("role") == "user" and is_compaction(content_text(last.get("content")) or item_text(last))


# ---- back to the wire ---------------------------------------------------------------------------


def _input_content(content: Any) -> Any:
    if not isinstance(content, list):
        return content if isinstance(content, str) else ""
    out = []
    for p in content:
        if isinstance(p, dict) and p.get("type") == "text":
            if p.get("text"):
                out.append({"type": "input_text", "text": p["text"]})
        else:
            out.append(copy.deepcopy(p))
    return out


def _output_item(m: Message, o: Origin, history: History) -> dict[str, Any]:
    call_id = m.get("tool_call_id")
    output = _input_content(m.get("content"))
    kind = "function_call_output"
    if o.step is not None and 1 <= o.step <= len(history):
        step = history.step(o.step)
        for obs in step.observations:
            native = (obs.get("extra") or {}).get(KEY)
            if obs.get("tool_call_id") == call_id and isinstance(native, dict):
                item = copy.deepcopy(native)
                item["output"] = output
                return item
        calls = (step.reply.get("extra") or {}).get(KEY)
        for item in calls if isinstance(calls, list) else []:  # the proxy's answer to a custom tool's call
            if isinstance(item, dict) and item_kind(item) == "custom_tool_call" and item.get("call_id") == call_id:
                kind = "custom_tool_call_output"
    return {"type": kind, "call_id": call_id, "output": output}


def build(
    body: dict[str, Any],
    parsed: Parsed,
    rendered: Rendered,
    history: History,
    tail: Message | None,
    added: list[dict[str, Any]],
) -> dict[str, Any]:
    out = {k: copy.deepcopy(v) for k, v in body.items() if k not in ("input", "instructions", "previous_response_id", "tools")}
    items: list[dict[str, Any]] = []
    first = history.prefix[0] if history.prefix else {}
    # the prefix is rendered as recorded; the protocol's section comes first when it has no system prompt
    shift = int(bool(rendered.origins) and rendered.origins[0].part == "system" and first.get("role") not in ("system", "developer"))
    opaque = list(parsed.state.get(OPAQUE) or [])
    for i, (m, o) in enumerate(zip(rendered.messages, rendered.origins, strict=True)):
        role = m.get("role")
        j = i - shift  # its index in the prefix, if it is a prefix message
        while opaque and opaque[0][0] <= j:
            items.append(opaque.pop(0)[1])
        if i == 0 and o.part == "system" and (
            (first.get("extra") or {}).get(KEY) == "instructions" or first.get("role") not in ("system", "developer")
        ):
            out["instructions"] = content_text(m.get("content"))
        elif role == "assistant":
            native = (history.step(o.step).reply.get("extra") or {}).get(KEY) if o.part == "reply" and o.step else None
            if o.step is None and 0 <= j < len(history.prefix):  # a kept answer: its item as received
                native = (history.prefix[j].get("extra") or {}).get(KEY)
            items += assistant_items(m, native)
        elif role == "tool":
            items.append(_output_item(m, o, history))
        else:
            items.append({"type": "message", "role": role, "content": _input_content(m.get("content"))})
    items += [item for _, item in opaque]
    if tail is not None:
        items += assistant_items(tail, (tail.get("extra") or {}).get(KEY))
    out["input"] = items
    tools = [copy.deepcopy(t) for t in body.get("tools") or []]
    tools += [
        {
            "type": "function",
            "name": t["function"]["name"],
            "description": t["function"]["description"],
            "parameters": t["function"]["parameters"],
        }
        for t in added
    ]
    if tools:
        out["tools"] = tools
    return out


def reply(data: Any) -> Message | None:
    if not isinstance(data, dict) or data.get("error") or not isinstance(data.get("output"), list):
        return None
    return reply_message([i for i in data["output"] if isinstance(i, dict)], KEY)


def check_reply(data: Any) -> Any:
    """A Responses answer from upstream in the shape the session reads (a 502 naming the field)."""
    if not isinstance(data, dict):
        raise bad_upstream("body", "is not a JSON object")
    if data.get("error"):
        return data
    output = data.get("output")
    if not isinstance(output, list):
        raise bad_upstream("output", "is not a list of output items")
    for i, item in enumerate(output):
        p = f"output[{i}]"
        if not isinstance(item, dict):
            raise bad_upstream(p, "is not an object")
        kind = item.get("type")
        if kind == "message":
            parts = item.get("content", [])
            if not isinstance(parts, list):
                raise bad_upstream(f"{p}.content", "is not a list of content parts")
            for j, part in enumerate(parts):
                if not isinstance(part, dict) or not isinstance(part.get("text", ""), str):
                    raise bad_upstream(f"{p}.content[{j}]", "is not a content part with text")
        elif kind == "function_call":
            for key in ("name", "arguments"):
                if not isinstance(item.get(key), str):
                    raise bad_upstream(f"{p}.{key}", "is not a string")
            if not isinstance(item.get("call_id", item.get("id")), str):
                raise bad_upstream(f"{p}.call_id", "is not a string")
    return data


FINAL_EVENTS = ("response.completed", "response.incomplete", "response.failed")


def aggregate(events: list[Any]) -> dict[str, Any]:
    """The response object of a Responses stream (its ``response.completed`` event)."""
    done: list[dict[str, Any]] = []
    for data in events:
        if not isinstance(data, dict):
            continue
        kind = data.get("type")
        if kind in FINAL_EVENTS and isinstance(data.get("response"), dict):
            return dict(data["response"])
        if kind == "error":
            return {"error": data.get("error") or data}
        if kind == "response.output_item.done" and isinstance(data.get("item"), dict):
            done.append(data["item"])
    return {"object": "response", "status": "incomplete", "output": done}

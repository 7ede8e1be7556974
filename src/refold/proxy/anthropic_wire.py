"""Anthropic Messages -> the session's OpenAI-style messages, and a reply or stream back to one message.

Every message keeps its native blocks under ``extra["anthropic"]`` (no rendering reads ``extra``);
``anthropic_build`` turns a rendering back into a Messages request from them.

System blocks a harness changes on every request (Claude Code's ``x-anthropic-billing-header``
line, whose ``cch=`` value is new each time) are kept out of the session's identity and its stored
prefix; ``parse`` sets them aside in ``Parsed.state["volatile"]`` for ``anthropic_build``.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

from ..errors import ProxyError
from ..shell_tools import canonical_call, tool_name
from ..types import Message
from .passthrough import is_compaction as compaction_text
from .surface import Parsed
from .validate import bad_upstream

KEY = "anthropic"
VOLATILE = (re.compile(r"^\s*x-anthropic-billing-header:", re.IGNORECASE),)
"""System text blocks that change on every request and carry nothing the model needs to keep."""
ROLES = ("user", "assistant")
THINKING = ("thinking", "redacted_thinking")


def bad(message: str) -> ProxyError:
    return ProxyError(400, message, code="invalid_request")


def strip_cc(block: Any) -> Any:
    """A copy without ``cache_control`` (refold places the breakpoints); signed blocks untouched."""
    if not isinstance(block, dict):
        return copy.deepcopy(block)
    if block.get("type") in THINKING:
        return copy.deepcopy(block)
    out = {k: copy.deepcopy(v) for k, v in block.items() if k != "cache_control"}
    if isinstance(out.get("content"), list):
        out["content"] = [strip_cc(b) for b in out["content"]]
    return out


def as_blocks(content: Any) -> list[Any]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    return list(content) if isinstance(content, list) else []


def joined_text(blocks: list[Any]) -> str:
    return "".join(
        b["text"] for b in blocks if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)
    )


def _cc_of(blocks: list[Any]) -> dict[str, Any] | None:
    found = None
    for b in blocks:
        if isinstance(b, dict) and isinstance(b.get("cache_control"), dict):
            found = b["cache_control"]
        if isinstance(b, dict) and isinstance(b.get("content"), list):
            found = _cc_of(b["content"]) or found
    return found


def is_compaction(body: dict[str, Any]) -> bool:
    """A harness's summarization turn: its last user message asks for a summary of the conversation."""
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs or not isinstance(msgs[-1], dict):
        return False
    last = msgs[-1]
    if last.get("role") != "user":
        return False
    text = joined_text(as_blocks(last.get("content")))
    return compaction_text(text)


def tool_calls(blocks: list[Any]) -> list[dict[str, Any]]:
    out = []
    for b in blocks:
        if isinstance(b, dict) and b.get("type") == "tool_use":
            name, args = canonical_call(str(b.get("name") or ""), json.dumps(b.get("input", {}), ensure_ascii=False))
            out.append({"id": b.get("id"), "type": "function", "function": {"name": name, "arguments": args}})
    return out


def assistant_message(content: Any) -> Message:
    blocks = as_blocks(content)
    msg: Message = {"role": "assistant", "content": joined_text(blocks), "extra": {KEY: _strip_all(content)}}
    calls = tool_calls(blocks)
    if calls:
        msg["tool_calls"] = calls
    return msg


def _strip_all(content: Any) -> Any:
    return [strip_cc(b) for b in content] if isinstance(content, list) else content


def parse(body: dict[str, Any]) -> Parsed:
    """The request as session messages; a 400 naming the first bad field otherwise."""
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise bad("model: must be a non-empty string")
    if body.get("stream") is not None and not isinstance(body["stream"], bool):
        raise bad(f"stream: must be true or false, got {json.dumps(body['stream'])}")  # "false" is not false
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise bad("messages: must be a non-empty array")
    system = body.get("system")
    if system is None:
        sys_blocks: list[Any] = []
    elif isinstance(system, str):
        sys_blocks = [{"type": "text", "text": system}] if system else []
    elif isinstance(system, list) and all(
        isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str) for b in system
    ):
        sys_blocks = list(system)
    else:
        raise bad("system: must be a string or an array of text blocks")
    volatile = [b for b in sys_blocks if any(p.search(b["text"]) for p in VOLATILE)]
    stable = [b for b in sys_blocks if b not in volatile]
    out: list[Message] = []
    if stable:
        out.append({"role": "system", "content": joined_text(stable), "extra": {KEY: [strip_cc(b) for b in stable]}})
    cc: dict[str, Any] | None = None
    for i, m in enumerate(msgs):
        if not isinstance(m, dict):
            raise bad(f"messages.{i}: must be an object")
        role, content = m.get("role"), m.get("content")
        if role not in ROLES:
            raise bad(f"messages.{i}.role: must be 'user' or 'assistant'")
        if not isinstance(content, str) and not (isinstance(content, list) and all(isinstance(b, dict) for b in content)):
            raise bad(f"messages.{i}.content: must be a string or an array of content blocks")
        blocks = as_blocks(content)
        cc = _cc_of(blocks) or cc
        if role == "assistant":
            out.append(assistant_message(content))
            continue
        results = [b for b in blocks if b.get("type") == "tool_result"]
        for j, r in enumerate(results):
            if not isinstance(r.get("tool_use_id"), str):
                raise bad(f"messages.{i}.content.{j}.tool_use_id: must be a string")
            rc = r.get("content")
            body_of = [strip_cc(b) for b in rc] if isinstance(rc, list) else (rc if isinstance(rc, str) else "")
            out.append({"role": "tool", "tool_call_id": r["tool_use_id"], "content": body_of, "extra": {KEY: strip_cc(r)}})
        others = [strip_cc(b) for b in blocks if b.get("type") != "tool_result"]
        if others or not results:
            out.append({"role": "user", "content": content if isinstance(content, str) else others})
    tools = body.get("tools")
    if tools is not None and not (isinstance(tools, list) and all(isinstance(t, dict) for t in tools)):
        raise bad("tools: must be an array of objects")
    named = [{"type": "function", "function": {"name": tool_name(t["name"])}} for t in tools or [] if isinstance(t.get("name"), str)]
    state = {
        "volatile": volatile,
        "system_cc": _cc_of(sys_blocks),
        "cc": cc,
    }
    return Parsed(out, named or None, state)


def reply(data: Any) -> Message | None:
    if not isinstance(data, dict) or data.get("type") == "error" or not isinstance(data.get("content"), list):
        return None
    return assistant_message(data["content"])


def check_reply(data: Any) -> Any:
    """A Messages answer from upstream in the shape the session reads (a 502 naming the field)."""
    if not isinstance(data, dict):
        raise bad_upstream("body", "is not a JSON object")
    if data.get("type") == "error":
        return data
    content = data.get("content")
    if not isinstance(content, list):
        raise bad_upstream("content", "is not a list of content blocks")
    for i, b in enumerate(content):
        p = f"content[{i}]"
        if not isinstance(b, dict) or not isinstance(b.get("type"), str):
            raise bad_upstream(p, "is not a content block (an object with a 'type')")
        for key, kind in (("text", "text"), ("thinking", "thinking"), ("id", "tool_use"), ("name", "tool_use")):
            if b["type"] == kind and not isinstance(b.get(key), str):
                raise bad_upstream(f"{p}.{key}", "is not a string")
        if b["type"] == "tool_use" and not isinstance(b.get("input", {}), dict):
            raise bad_upstream(f"{p}.input", "is not an object")
    return data


def _index(v: Any, default: int) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) else default


def aggregate(events: list[tuple[str | None, Any]]) -> dict[str, Any]:
    """A Message equivalent to a stream of Anthropic events (``message_start`` ... ``message_stop``)."""
    message: dict[str, Any] = {}
    blocks: dict[int, dict[str, Any]] = {}
    partial: dict[int, str] = {}
    for _name, data in events:
        if not isinstance(data, dict):
            continue
        kind = data.get("type")
        if kind == "error":
            return {"type": "error", "error": data.get("error")}
        if kind == "message_start" and isinstance(data.get("message"), dict):
            message = copy.deepcopy(data["message"])
        elif kind == "content_block_start" and isinstance(data.get("content_block"), dict):
            blocks[_index(data.get("index"), len(blocks))] = copy.deepcopy(data["content_block"])
        elif kind == "content_block_delta" and isinstance(data.get("delta"), dict):
            i = _index(data.get("index"), 0)
            b = blocks.setdefault(i, {"type": "text", "text": ""})
            d = data["delta"]
            dk = d.get("type")
            if dk == "text_delta":
                b["text"] = b.get("text", "") + str(d.get("text", ""))
            elif dk == "input_json_delta":
                partial[i] = partial.get(i, "") + str(d.get("partial_json", ""))
            elif dk == "thinking_delta":
                b["thinking"] = b.get("thinking", "") + str(d.get("thinking", ""))
            elif dk == "signature_delta":
                b["signature"] = b.get("signature", "") + str(d.get("signature", ""))
            elif dk == "citations_delta":
                b.setdefault("citations", []).append(d.get("citation"))
        elif kind == "message_delta":
            delta = data.get("delta")
            for k, v in (delta if isinstance(delta, dict) else {}).items():
                message[k] = v
            if isinstance(data.get("usage"), dict):
                message["usage"] = {**(message.get("usage") or {}), **data["usage"]}
    for i, text in partial.items():
        try:
            blocks[i]["input"] = json.loads(text) if text.strip() else {}
        except ValueError:
            blocks[i]["input"] = {}
    message["content"] = [blocks[i] for i in sorted(blocks)]
    message.setdefault("type", "message")
    message.setdefault("role", "assistant")
    return message


def error_type(status: int) -> str:
    return {
        400: "invalid_request_error",
        401: "authentication_error",
        403: "permission_error",
        404: "not_found_error",
        413: "request_too_large",
        429: "rate_limit_error",
        529: "overloaded_error",
    }.get(status, "api_error" if status >= 500 else "invalid_request_error")


def error_body(status: int, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": error_type(status), "message": message}}

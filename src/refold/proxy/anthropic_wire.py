"""Anthropic Messages <-> the session's OpenAI-style messages, and back after rendering.

Every message keeps its native blocks under ``extra["anthropic"]`` (no rendering reads ``extra``).
Going back, a rendered assistant message takes its step's native blocks: ``thinking`` and
``redacted_thinking`` blocks are copied as received (never folded, trimmed or rebuilt, so their
signatures stay valid), ``tool_use`` blocks as received, and the text blocks as received unless
the rendering changed the reply's text (a condensed old reply), when one text block carries the
rendered text. Outputs become ``tool_result`` blocks (``is_error`` kept), images and documents
pass through, and every ``tool_use`` is followed by its ``tool_result`` in the next user message.

System blocks a harness changes on every request (Claude Code's ``x-anthropic-billing-header``
line, whose ``cch=`` value is new each time) are kept out of the session's identity and its stored
prefix, and moved to the end of the prompt, after the last cache breakpoint, so they never break
the cached prefix; only in front of api.anthropic.com, whose API reads that line in ``system[0]``,
does it stay there.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

from ..errors import ProxyError
from ..history import History
from ..integrations.cache_control import MAX_BREAKPOINTS, breakpoints
from ..protocol import CM
from ..types import Message, Origin, Rendered, content_text
from .passthrough import is_compaction as compaction_text
from .surface import Parsed, canonical_call, tool_name

KEY = "anthropic"
VOLATILE = (re.compile(r"^\s*x-anthropic-billing-header:", re.IGNORECASE),)
"""System text blocks that change on every request and carry nothing the model needs to keep."""
EPHEMERAL = {"type": "ephemeral"}
ROLES = ("user", "assistant")
THINKING = ("thinking", "redacted_thinking")
_NO_CACHE = (*THINKING, "server_tool_use", "web_search_tool_result")


def bad(message: str) -> ProxyError:
    return ProxyError(400, message, code="invalid_request")


def _strip(block: Any) -> Any:
    """A copy without ``cache_control`` (refold places the breakpoints); signed blocks untouched."""
    if not isinstance(block, dict):
        return copy.deepcopy(block)
    if block.get("type") in THINKING:
        return copy.deepcopy(block)
    out = {k: copy.deepcopy(v) for k, v in block.items() if k != "cache_control"}
    if isinstance(out.get("content"), list):
        out["content"] = [_strip(b) for b in out["content"]]
    return out


def _blocks(content: Any) -> list[Any]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    return list(content) if isinstance(content, list) else []


def _text(blocks: list[Any]) -> str:
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
    text = _text(_blocks(last.get("content")))
    return compaction_text(text)


def tool_calls(blocks: list[Any]) -> list[dict[str, Any]]:
    out = []
    for b in blocks:
        if isinstance(b, dict) and b.get("type") == "tool_use":
            name, args = canonical_call(str(b.get("name") or ""), json.dumps(b.get("input", {}), ensure_ascii=False))
            out.append({"id": b.get("id"), "type": "function", "function": {"name": name, "arguments": args}})
    return out


def assistant_message(content: Any) -> Message:
    blocks = _blocks(content)
    msg: Message = {"role": "assistant", "content": _text(blocks), "extra": {KEY: _strip_all(content)}}
    calls = tool_calls(blocks)
    if calls:
        msg["tool_calls"] = calls
    return msg


def _strip_all(content: Any) -> Any:
    return [_strip(b) for b in content] if isinstance(content, list) else content


def parse(body: dict[str, Any]) -> Parsed:
    """The request as session messages; a 400 naming the first bad field otherwise."""
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise bad("model: must be a non-empty string")
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
        out.append({"role": "system", "content": _text(stable), "extra": {KEY: [_strip(b) for b in stable]}})
    cc: dict[str, Any] | None = None
    for i, m in enumerate(msgs):
        if not isinstance(m, dict):
            raise bad(f"messages.{i}: must be an object")
        role, content = m.get("role"), m.get("content")
        if role not in ROLES:
            raise bad(f"messages.{i}.role: must be 'user' or 'assistant'")
        if not isinstance(content, str) and not (isinstance(content, list) and all(isinstance(b, dict) for b in content)):
            raise bad(f"messages.{i}.content: must be a string or an array of content blocks")
        blocks = _blocks(content)
        cc = _cc_of(blocks) or cc
        if role == "assistant":
            out.append(assistant_message(content))
            continue
        results = [b for b in blocks if b.get("type") == "tool_result"]
        for j, r in enumerate(results):
            if not isinstance(r.get("tool_use_id"), str):
                raise bad(f"messages.{i}.content.{j}.tool_use_id: must be a string")
            rc = r.get("content")
            body_of = [_strip(b) for b in rc] if isinstance(rc, list) else (rc if isinstance(rc, str) else "")
            out.append({"role": "tool", "tool_call_id": r["tool_use_id"], "content": body_of, "extra": {KEY: _strip(r)}})
        others = [_strip(b) for b in blocks if b.get("type") != "tool_result"]
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


# ---- back to the wire ---------------------------------------------------------------------------


def _native(history: History, o: Origin) -> Any:
    if o.step is None or not 1 <= o.step <= len(history) or o.part != "reply":
        return None
    return (history.step(o.step).reply.get("extra") or {}).get(KEY)


def assistant_blocks(m: Message, native: Any) -> list[Any]:
    """A rendered assistant message in native blocks (see the module docstring)."""
    text = content_text(m.get("content"))
    calls = [c for c in m.get("tool_calls") or [] if isinstance(c, dict)]
    ids = {c.get("id") for c in calls}
    if native is None:
        out: list[Any] = [{"type": "text", "text": text}] if text else []
        for c in calls:
            fn = c.get("function") or {}
            args = fn.get("arguments")
            try:
                value = json.loads(args) if isinstance(args, str) and args.strip() else (args or {})
            except ValueError:
                value = {"input": args}
            out.append({"type": "tool_use", "id": c.get("id"), "name": fn.get("name"), "input": value})
        return out
    blocks = _blocks(native)
    same = text == _text(blocks) or not text
    out = []
    placed = False
    for b in blocks:
        kind = b.get("type") if isinstance(b, dict) else None
        if kind == "text":
            if same:
                if b.get("text"):
                    out.append(_strip(b))
            elif not placed:
                out.append({"type": "text", "text": text})
                placed = True
        elif kind == "tool_use":
            if b.get("id") in ids:
                out.append(_strip(b))
        else:  # thinking, redacted_thinking, server tools: as received
            out.append(_strip(b))
    if not same and not placed:
        at = next((k for k, b in enumerate(out) if isinstance(b, dict) and b.get("type") == "tool_use"), len(out))
        out.insert(at, {"type": "text", "text": text})
    return out


def _tool_result(m: Message, o: Origin, history: History) -> dict[str, Any]:
    call_id = m.get("tool_call_id")
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": call_id}
    content = m.get("content")
    if isinstance(content, list):
        block["content"] = [_strip(p) for p in content if not (isinstance(p, dict) and p.get("type") == "text" and not p.get("text"))]
    else:
        block["content"] = content if isinstance(content, str) else ""
    if o.step is not None and 1 <= o.step <= len(history):
        for obs in history.step(o.step).observations:
            native = (obs.get("extra") or {}).get(KEY)
            if obs.get("tool_call_id") == call_id and isinstance(native, dict) and native.get("is_error"):
                block["is_error"] = True
    return block


def _system_blocks(m: Message, history: History) -> list[Any]:
    text = content_text(m.get("content"))
    first = history.prefix[0] if history.prefix else {}
    stable = (first.get("extra") or {}).get(KEY) if first.get("role") == "system" else None
    if isinstance(stable, list) and text.startswith(joined := _text(stable)):
        blocks = [_strip(b) for b in stable]
        if text[len(joined) :]:
            blocks.append({"type": "text", "text": text[len(joined) :]})
        return blocks
    return [{"type": "text", "text": text}] if text else []


def _cacheable(blocks: list[Any]) -> dict[str, Any] | None:
    for b in reversed(blocks):
        if isinstance(b, dict) and b.get("type") not in _NO_CACHE:
            return b
    return None


def repair(msgs: list[dict[str, Any]]) -> int:
    """Every tool_use answered in the next user message, every tool_result answering the assistant
    message before it, tool_results first; returns how many blocks had to be changed (0 on every
    prompt the renderer makes: it keeps calls and outputs together)."""
    fixes = 0
    for k, msg in enumerate(msgs):
        if msg["role"] != "user":
            continue
        prev = msgs[k - 1] if k and msgs[k - 1]["role"] == "assistant" else None
        ids = {b.get("id") for b in (prev or {}).get("content", []) if isinstance(b, dict) and b.get("type") == "tool_use"}
        content = []
        for b in msg["content"]:
            if isinstance(b, dict) and b.get("type") == "tool_result" and b.get("tool_use_id") not in ids:
                fixes += 1
                inner = b.get("content")
                text = inner if isinstance(inner, str) else _text(inner if isinstance(inner, list) else [])
                content.append({"type": "text", "text": text or f"{CM} (an output without its call)"})
            else:
                content.append(b)
        results = [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]
        msg["content"] = results + [b for b in content if b not in results]
    k = 0
    while k < len(msgs):
        msg = msgs[k]
        calls = [b.get("id") for b in msg["content"] if msg["role"] == "assistant" and isinstance(b, dict) and b.get("type") == "tool_use"]
        if calls and k + 1 < len(msgs):
            nxt = msgs[k + 1]
            if nxt["role"] != "user":
                nxt = {"role": "user", "content": []}
                msgs.insert(k + 1, nxt)
            have = {b.get("tool_use_id") for b in nxt["content"] if isinstance(b, dict) and b.get("type") == "tool_result"}
            missing = [i for i in calls if i not in have]
            fixes += len(missing)
            nxt["content"][:0] = [
                {"type": "tool_result", "tool_use_id": i, "content": f"{CM} No output was recorded for this call."}
                for i in missing
            ]
        k += 1
    return fixes


def build(
    body: dict[str, Any],
    parsed: Parsed,
    rendered: Rendered,
    history: History,
    tail: Message | None,
    added: list[dict[str, Any]],
    *,
    first_party: bool,
) -> tuple[dict[str, Any], int]:
    """The upstream request for ``rendered``, and how many blocks ``repair`` changed."""
    out = {k: copy.deepcopy(v) for k, v in body.items() if k not in ("messages", "system", "tools")}
    system: list[Any] = []
    msgs: list[dict[str, Any]] = []
    last_block: dict[int, dict[str, Any]] = {}
    for i, (m, o) in enumerate(zip(rendered.messages, rendered.origins, strict=True)):
        role = m.get("role")
        if role in ("system", "developer") and i == 0:
            system = _system_blocks(m, history)
            if (b := _cacheable(system)) is not None:
                last_block[i] = b
            continue
        if role == "assistant":
            blocks, as_role = assistant_blocks(m, _native(history, o)), "assistant"
        elif role == "tool":
            blocks, as_role = [_tool_result(m, o, history)], "user"
        else:
            blocks, as_role = [_strip(b) for b in _blocks(m.get("content"))], "user"
        if not blocks:
            continue
        if msgs and msgs[-1]["role"] == as_role:
            msgs[-1]["content"].extend(blocks)
        else:
            msgs.append({"role": as_role, "content": blocks})
        if (b := _cacheable(blocks)) is not None:
            last_block[i] = b
    if tail is not None:
        blocks = assistant_blocks(tail, (tail.get("extra") or {}).get(KEY))
        if msgs and msgs[-1]["role"] == "assistant":
            msgs[-1]["content"].extend(blocks)
        else:
            msgs.append({"role": "assistant", "content": blocks})
    fixes = repair(msgs)

    tools = [copy.deepcopy(t) for t in body.get("tools") or []]
    tools += [
        {
            "name": t["function"]["name"],
            "description": t["function"]["description"],
            "input_schema": t["function"]["parameters"],
        }
        for t in added
    ]
    # breakpoints: the client's on tools stay; one at the end of the system if it had one there;
    # the rest at refold's stable points (prefix end, boundary, previous call's end, the end)
    tool_marks = [t for t in tools if "cache_control" in t]
    while len(tool_marks) > 2:
        del tool_marks.pop(0)["cache_control"]
    used = len(tool_marks)
    # the system's own value first: a longer ttl must not follow a shorter one
    cc = parsed.state.get("system_cc") or parsed.state.get("cc") or EPHEMERAL
    if parsed.state.get("system_cc") and system:
        target = _cacheable(system)
        if target is not None:
            target["cache_control"] = copy.deepcopy(parsed.state["system_cc"])
            used += 1
    marks = breakpoints(rendered, MAX_BREAKPOINTS)
    chosen: list[dict[str, Any]] = []
    for i in reversed(marks):
        b = next((last_block[j] for j in range(i, -1, -1) if j in last_block), None)
        if b is None or any(b is c for c in chosen) or "cache_control" in b:
            continue
        if used + len(chosen) >= MAX_BREAKPOINTS:
            break
        chosen.append(b)
    for b in chosen:
        b["cache_control"] = copy.deepcopy(cc)

    volatile = [_strip(b) for b in parsed.state.get("volatile") or []]
    if volatile and first_party:
        system[:0] = volatile
    elif volatile:
        last_user = next((m for m in reversed(msgs) if m["role"] == "user"), None)
        if last_user is not None:
            last_user["content"].extend(volatile)
        else:
            system.extend(volatile)
    if system:
        out["system"] = system
    out["messages"] = msgs
    if tools:
        out["tools"] = tools
    return out, fixes


def reply(data: Any) -> Message | None:
    if not isinstance(data, dict) or data.get("type") == "error" or not isinstance(data.get("content"), list):
        return None
    return assistant_message(data["content"])


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
            blocks[int(data.get("index", len(blocks)))] = copy.deepcopy(data["content_block"])
        elif kind == "content_block_delta":
            i = int(data.get("index", 0))
            b = blocks.setdefault(i, {"type": "text", "text": ""})
            d = data.get("delta") or {}
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
            for k, v in (data.get("delta") or {}).items():
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

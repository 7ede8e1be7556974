"""A rendering of the session back into an Anthropic Messages request, with refold's cache breakpoints.

A rendered assistant message takes its step's native blocks (``extra["anthropic"]``, kept by
``anthropic_wire``): ``thinking`` and ``redacted_thinking`` blocks are copied as received (never
folded, trimmed or rebuilt, so their signatures stay valid), ``tool_use`` blocks as received, and
the text blocks as received unless the rendering changed the reply's text (a condensed old reply),
when one text block carries the rendered text. Outputs become ``tool_result`` blocks (``is_error``
kept), images and documents pass through, and every ``tool_use`` is followed by its
``tool_result`` in the next user message.

The volatile system blocks ``anthropic_wire.parse`` set aside are moved to the end of the prompt,
after the last cache breakpoint, so they never break the cached prefix; only in front of
api.anthropic.com, whose API reads that line in ``system[0]``, do they stay there.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from ..history import History
from ..integrations.cache_control import MAX_BREAKPOINTS, breakpoints
from ..protocol import CM
from ..types import Message, Origin, Rendered, content_text
from .anthropic_wire import KEY, THINKING, as_blocks, joined_text, strip_cc
from .surface import Parsed

EPHEMERAL = {"type": "ephemeral"}
_NO_CACHE = (*THINKING, "server_tool_use", "web_search_tool_result")


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
    blocks = as_blocks(native)
    same = text == joined_text(blocks) or not text
    out = []
    placed = False
    for b in blocks:
        kind = b.get("type") if isinstance(b, dict) else None
        if kind == "text":
            if same:
                if b.get("text"):
                    out.append(strip_cc(b))
            elif not placed:
                out.append({"type": "text", "text": text})
                placed = True
        elif kind == "tool_use":
            if b.get("id") in ids:
                out.append(strip_cc(b))
        else:  # thinking, redacted_thinking, server tools: as received
            out.append(strip_cc(b))
    if not same and not placed:
        at = next((k for k, b in enumerate(out) if isinstance(b, dict) and b.get("type") == "tool_use"), len(out))
        out.insert(at, {"type": "text", "text": text})
    return out


def _tool_result(m: Message, o: Origin, history: History) -> dict[str, Any]:
    call_id = m.get("tool_call_id")
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": call_id}
    content = m.get("content")
    if isinstance(content, list):
        block["content"] = [strip_cc(p) for p in content if not (isinstance(p, dict) and p.get("type") == "text" and not p.get("text"))]
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
    if isinstance(stable, list) and text.startswith(joined := joined_text(stable)):
        blocks = [strip_cc(b) for b in stable]
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
                text = inner if isinstance(inner, str) else joined_text(inner if isinstance(inner, list) else [])
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
            blocks, as_role = [strip_cc(b) for b in as_blocks(m.get("content"))], "user"
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

    volatile = [strip_cc(b) for b in parsed.state.get("volatile") or []]
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

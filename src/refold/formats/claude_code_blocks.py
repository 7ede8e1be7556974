"""Claude Code transcript lines -> chat messages: one model reply from the lines of one API response,
tool results as ``tool`` messages, the provider's usage as refold reads it (``extra.response.usage``).

``claude_code`` decides which lines make up a conversation; this module only converts them. A
message it cannot read is a ValueError with one line; the loader adds the file and line.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from ..types import Message

__all__ = ["one_turn", "reply_message", "usage_record", "user_messages", "unix_time"]

SHELL_TOOL = "Bash"
"""Claude Code's shell tool: recorded as ``bash`` (as refold's proxy records it), so the shell
analysis and the context-command recognizer read its ``command``."""


def unix_time(value: Any) -> float | None:
    """An ISO 8601 ``timestamp`` as unix seconds (``...Z`` too), None when it is not one."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _blocks(content: Any, what: str) -> list[Any]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    if not isinstance(content, list):
        raise ValueError(f"{what} content is {type(content).__name__}, not text or a list of blocks")
    for j, b in enumerate(content):
        if not isinstance(b, dict) or not isinstance(b.get("type"), str):
            raise ValueError(f"{what} content[{j}] is not a content block (an object with a 'type')")
    return content


def _image_part(block: dict[str, Any]) -> dict[str, Any] | None:
    source = block.get("source")
    if not isinstance(source, dict):
        return None
    if source.get("type") == "base64" and isinstance(source.get("data"), str):
        url = f"data:{source.get('media_type') or 'image/png'};base64,{source['data']}"
    elif source.get("type") == "url" and isinstance(source.get("url"), str):
        url = source["url"]
    else:
        return None
    return {"type": "image_url", "image_url": {"url": url}}


def _parts(blocks: list[Any]) -> list[dict[str, Any]]:
    """Text and image blocks as chat content parts (other kinds carry nothing a prompt count reads)."""
    out: list[dict[str, Any]] = []
    for b in blocks:
        if b.get("type") == "text" and isinstance(b.get("text"), str):
            out.append({"type": "text", "text": b["text"]})
        elif b.get("type") == "image":
            part = _image_part(b)
            if part is not None:
                out.append(part)
    return out


def _simplified(parts: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    """Text alone as a string (what most recorded runs hold), else the parts."""
    if all(p["type"] == "text" for p in parts):
        return "".join(p["text"] for p in parts)
    return parts


def reply_message(lines: list[dict[str, Any]], usage: dict[str, Any] | None) -> Message:
    """One model reply from the lines of one API response (newer versions write one line per block)."""
    text: list[str] = []
    thinking: list[str] = []
    calls: list[dict[str, Any]] = []
    for line in lines:
        for j, b in enumerate(_blocks(line["message"].get("content"), "assistant")):
            kind = b["type"]
            if kind == "text" and isinstance(b.get("text"), str):
                text.append(b["text"])
            elif kind == "thinking" and isinstance(b.get("thinking"), str):
                thinking.append(b["thinking"])
            elif kind == "tool_use":
                calls.append(_call(b, j))
    msg: Message = {"role": "assistant", "content": "".join(text)}  # the blocks as the API reads them: back to back
    if calls:
        msg["tool_calls"] = calls
    if thinking:  # not rendered nor counted, as reasoning_content is for chat runs
        msg["reasoning_content"] = "\n\n".join(thinking)
    first, last = lines[0], lines[-1]
    extra: dict[str, Any] = {}
    response: dict[str, Any] = {}
    for key in ("id", "model", "stop_reason"):
        value = last["message"].get(key)
        if value is not None:
            response[key] = value
    if usage is not None:
        response["usage"] = usage
    if response:
        extra["response"] = response
    at = unix_time(first.get("timestamp"))
    if at is not None:
        extra["timestamp"] = at
    if extra:
        msg["extra"] = extra
    return msg


def _call(block: dict[str, Any], j: int) -> dict[str, Any]:
    name, call_id, args = block.get("name"), block.get("id"), block.get("input", {})
    if not isinstance(name, str) or not name:
        raise ValueError(f"assistant content[{j}]: tool_use has no 'name'")
    if not isinstance(call_id, str) or not call_id:
        raise ValueError(f"assistant content[{j}]: tool_use has no 'id'")
    if name == SHELL_TOOL:
        name = "bash"
    arguments = json.dumps(args if args is not None else {}, ensure_ascii=False)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def user_messages(line: dict[str, Any]) -> tuple[list[Message], list[Message]]:
    """A user line as (tool results, other messages): the results as ``tool`` messages, the rest
    (text, images) as one ``user`` message. Claude Code sends the results first, as the API wants."""
    content = line["message"].get("content")
    at = unix_time(line.get("timestamp"))
    extra = {"timestamp": at} if at is not None else None
    if isinstance(content, str):
        return [], ([_with({"role": "user", "content": content}, extra)] if content else [])
    blocks = _blocks(content, "user")
    results: list[Message] = []
    for j, b in enumerate(blocks):
        if b["type"] != "tool_result":
            continue
        call_id = b.get("tool_use_id")
        if not isinstance(call_id, str) or not call_id:
            raise ValueError(f"user content[{j}]: tool_result has no 'tool_use_id'")
        body = b.get("content")
        if isinstance(body, list):
            inner = _parts([c for c in body if isinstance(c, dict)])
            text: str | list[dict[str, Any]] = _simplified(inner)
        else:
            text = body if isinstance(body, str) else "" if body is None else json.dumps(body, ensure_ascii=False)
        results.append(_with({"role": "tool", "tool_call_id": call_id, "content": text}, extra))
    rest = _parts([b for b in blocks if b["type"] != "tool_result"])
    others = [_with({"role": "user", "content": _simplified(rest)}, extra)] if rest else []
    return results, others


def one_turn(messages: list[Message]) -> list[Message]:
    """The user messages between two replies as the one user turn the API sends (Claude Code joins
    consecutive user messages; the Messages API would join them anyway): their parts in order."""
    if len(messages) < 2:
        return messages
    parts: list[dict[str, Any]] = []
    for m in messages:
        c = m["content"]
        parts.extend([{"type": "text", "text": c}] if isinstance(c, str) else c)
    turn: Message = {"role": "user", "content": parts}
    if "extra" in messages[-1]:  # the latest time: about when the next call was made
        turn["extra"] = dict(messages[-1]["extra"])
    return [turn]


def _with(msg: Message, extra: dict[str, Any] | None) -> Message:
    if extra:
        msg["extra"] = dict(extra)
    return msg


def _count(usage: dict[str, Any], key: str) -> int | None:
    v = usage.get(key)
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def usage_record(lines: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The response's usage in the chat shape refold reads: prompt = input + cache reads + cache
    writes (Anthropic counts them apart), cached = cache reads, completion = output tokens.

    Every line of a split response repeats the usage; the output count grows as the lines are
    written, so the largest is taken (the last line's may still be short of the final count).
    Claude Code 2.1.x often writes only the stream's first report (1-8 output tokens, no
    ``stop_reason`` on any line): a count below what the reply's own text takes is left out
    rather than reported (see ``_snapshot``).
    """
    found = [u for line in lines if isinstance(u := line["message"].get("usage"), dict)]
    if not found:
        return None
    last = found[-1]
    fresh = _count(last, "input_tokens")
    if fresh is None:
        return None
    read = _count(last, "cache_read_input_tokens") or 0
    written = _count(last, "cache_creation_input_tokens") or 0
    outputs = [n for u in found if (n := _count(u, "output_tokens")) is not None]
    record: dict[str, Any] = {
        "prompt_tokens": fresh + read + written,
        "prompt_tokens_details": {"cached_tokens": read},
        "cache_creation_input_tokens": written,
    }
    if outputs and not _snapshot(lines, max(outputs)):
        record["completion_tokens"] = max(outputs)
    return record


_CHARS_PER_TOKEN_MAX = 8
"""No tokenizer packs text or code much denser than this: fewer output tokens than a reply's
characters / 8 cannot be its final count."""


def _snapshot(lines: list[dict[str, Any]], output: int) -> bool:
    """Whether a response's output count is a mid-stream report: no line has the ``stop_reason``
    the final report brings, and the count is below what the reply's visible content takes."""
    if any(line["message"].get("stop_reason") for line in lines):
        return False
    chars = 0
    for line in lines:
        content = line["message"].get("content")
        for b in content if isinstance(content, list) else ():
            if not isinstance(b, dict):
                continue
            if b.get("type") == "tool_use":
                chars += len(json.dumps(b.get("input"), ensure_ascii=False))
            else:
                chars += sum(len(b[k]) for k in ("text", "thinking") if isinstance(b.get(k), str))
        if isinstance(content, str):
            chars += len(content)
    return output * _CHARS_PER_TOKEN_MAX < chars

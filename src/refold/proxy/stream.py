"""Streaming helpers: adding up chunks, writing events, and taking the PROGRESS/STALE head out
of what the client is shown (holding back what may be a context command is ``proxy.early``).

All are plain objects fed text or chunks as they arrive, so any endpoint that relays an
OpenAI-style stream can use them. Each streaming form equals its whole-text form: what
``HeadStripper`` releases for any split of a text is ``strip_head`` of the text.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx

from ..protocol import head_line
from ..scrub import scrub_calls

_MARKUPISH = " \t>#*_`-+0123456789.)"
_BREAK = re.compile(r"\r\n|\r|\n")
_ESCAPED = {0x85: "\\u0085", 0x2028: "\\u2028", 0x2029: "\\u2029"}
"""Line breaks to ``str.splitlines`` that JSON text holds only inside strings, where an escape is the same text."""


async def sse_lines(response: httpx.Response) -> AsyncIterator[str]:
    """The lines of an event stream, split only where SSE splits them (CRLF, LF, CR). httpx's
    ``aiter_lines`` also splits at U+2028, U+0085 and the other breaks of ``str.splitlines``,
    which JSON carries unescaped inside a data line (pydantic-serialized replies do). A byte order
    mark opening the stream is dropped, as SSE says (it would hide the first ``data:`` line)."""
    rest = ""
    first = True
    async for text in response.aiter_text():
        if first and text:
            text, first = text.removeprefix("\ufeff"), False
        rest += text
        held = rest.endswith("\r")  # maybe the first half of a CRLF
        parts = _BREAK.split(rest[:-1] if held else rest)
        rest = parts.pop() + ("\r" if held else "")
        for line in parts:
            yield line
    if rest:
        parts = _BREAK.split(rest)
        if parts[-1] == "":
            parts.pop()
        for line in parts:
            yield line


def _head_key(line: str) -> str | None:
    found = head_line(line)
    return found[0] if found is not None else None


def strip_head(text: str) -> str:
    """``text`` without its opening PROGRESS/STALE lines (and the blank lines around them);
    unchanged when it does not open with one."""
    pos, seen = 0, set()
    while pos < len(text):
        nl = text.find("\n", pos)
        end = len(text) if nl < 0 else nl
        line = text[pos:end]
        if line.strip():
            key = _head_key(line)
            if key is None or key in seen:
                break
            seen.add(key)
        pos = end + 1
    if not seen:
        return text
    return text[min(pos, len(text)) :]


def _could_be_head(partial: str) -> bool:
    """Whether an unfinished first line may still turn out to be a PROGRESS/STALE line."""
    t = partial.lstrip(_MARKUPISH).lower()
    return not t or t.startswith(("progress", "stale")) or "progress".startswith(t) or "stale".startswith(t)


class HeadStripper:
    """``strip_head`` over a text that arrives in pieces: holds only the opening lines that may
    still be head lines, then passes everything through."""

    def __init__(self) -> None:
        self._buf = ""
        self._done = False

    def feed(self, piece: str) -> str:
        if self._done:
            return piece
        self._buf += piece
        if self._decided():
            self._done = True
            out, self._buf = strip_head(self._buf), ""
            return out
        return ""

    def end(self) -> str:
        out = "" if self._done else strip_head(self._buf)
        self._done, self._buf = True, ""
        return out

    def _decided(self) -> bool:
        text, pos, seen = self._buf, 0, set()
        while True:
            nl = text.find("\n", pos)
            if nl < 0:
                break
            line = text[pos:nl]
            if line.strip():
                key = _head_key(line)
                if key is None or key in seen:
                    return True
                seen.add(key)
            pos = nl + 1
        partial = text[pos:]
        if not partial.strip():
            return False
        return len(seen) == 2 or not _could_be_head(partial)


class Accumulator:
    """Adds up the checked chunks of one streamed completion into a chat.completion body."""

    def __init__(self) -> None:
        self.head: dict[str, Any] = {}
        self.content: str | None = None
        self.extra: dict[str, str] = {}  # other text deltas, e.g. reasoning_content
        self.calls: dict[int, dict[str, Any]] = {}
        self.function_call: dict[str, str] | None = None  # the legacy single call, in pieces
        self.finish: str | None = None
        self.usage: dict[str, Any] | None = None
        self.chunks = 0

    def add(self, chunk: dict[str, Any]) -> None:
        self.chunks += 1
        if not self.head:
            self.head = {k: chunk[k] for k in ("id", "created", "model", "system_fingerprint") if k in chunk}
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            if (choice.get("index") or 0) != 0:
                continue
            delta = choice.get("delta") or {}
            for key, value in delta.items():
                if key == "content" and isinstance(value, str):
                    self.content = (self.content or "") + value
                elif key in ("reasoning_content", "reasoning", "refusal") and isinstance(value, str):
                    self.extra[key] = self.extra.get(key, "") + value
                elif key == "function_call" and isinstance(value, dict):
                    fc = self.function_call = self.function_call or {"name": "", "arguments": ""}
                    fc["name"] += value.get("name") or ""
                    fc["arguments"] += value.get("arguments") or ""
            for tc in delta.get("tool_calls") or []:
                slot = self.calls.setdefault(
                    int(tc.get("index") or 0),
                    {"id": None, "type": "function", "function": {"name": "", "arguments": ""}},
                )
                if tc.get("id"):
                    slot["id"] = tc["id"]
                fn = tc.get("function") or {}
                slot["function"]["name"] += fn.get("name") or ""
                slot["function"]["arguments"] += fn.get("arguments") or ""
            self.finish = choice.get("finish_reason") or self.finish

    def message(self) -> dict[str, Any]:
        msg: dict[str, Any] = {"role": "assistant", "content": self.content, **self.extra}
        if self.function_call is not None:
            msg["function_call"] = dict(self.function_call)
        if self.calls:
            msg["tool_calls"] = [self.calls[i] for i in sorted(self.calls)]
            scrub_calls(msg)
        return msg

    def body(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            **self.head,
            "object": "chat.completion",
            "choices": [{"index": 0, "message": self.message(), "finish_reason": self.finish}],
        }
        if self.usage is not None:
            out["usage"] = self.usage
        return out


def split_chunk(chunk: dict[str, Any]) -> tuple[dict[str, str], dict[str, Any] | None]:
    """A chunk's text deltas of choice 0 (relayed at once) and the chunk without them (held:
    tool calls, finish reason, usage), or None when nothing else is left in it."""
    texts: dict[str, str] = {}
    rest = copy.deepcopy(chunk)
    keep = bool(rest.get("usage"))
    for choice in rest.get("choices") or []:
        delta = choice.get("delta") or {}
        if (choice.get("index") or 0) == 0:
            for key in ("content", "reasoning_content", "reasoning"):
                if isinstance(delta.get(key), str):
                    texts[key] = delta.pop(key)
        delta.pop("role", None)
        if delta or choice.get("finish_reason") or choice.get("logprobs"):
            keep = True
    return texts, (rest if keep else None)


def call_deltas(chunk: dict[str, Any]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """Each ``(choice, delta)`` of choice 0 whose delta carries tool calls: the ones a relay
    holding back, cutting or renumbering calls rewrites (``set_calls``), in a copy of the chunk."""
    for choice in chunk.get("choices") or []:
        delta = choice.get("delta")
        if (choice.get("index") or 0) == 0 and isinstance(delta, dict) and delta.get("tool_calls"):
            yield choice, delta


def set_calls(delta: dict[str, Any], calls: list[dict[str, Any]]) -> None:
    """``delta``'s tool calls made ``calls``; the key goes when there are none (an empty list
    would still read as a tool-call delta)."""
    if calls:
        delta["tool_calls"] = calls
    else:
        delta.pop("tool_calls", None)


def text_chunk(template: dict[str, Any], texts: dict[str, str], *, role: bool = False) -> dict[str, Any]:
    """A chunk carrying only text deltas, with ``template``'s id, created and model."""
    delta: dict[str, Any] = {"role": "assistant"} if role else {}
    delta.update(texts)
    head: dict[str, Any] = {
        k: template[k] for k in ("id", "object", "created", "model", "system_fingerprint") if k in template
    }
    head.setdefault("object", "chat.completion.chunk")
    return {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}


def with_id(chunk: dict[str, Any], ids: dict[str, Any]) -> dict[str, Any]:
    """``chunk`` under the stream's first id/created, so every round reads as one completion."""
    return {**chunk, **ids} if ids else chunk


def event(data: dict[str, Any] | str) -> bytes:
    """One SSE event; ``data`` is a chunk or an already serialized payload."""
    payload = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    if not payload.isascii():  # clients reading lines with str.splitlines (httpx) break at these
        payload = payload.translate(_ESCAPED)
    return f"data: {payload}\n\n".encode()


DONE = b"data: [DONE]\n\n"


def error_event(message: str, code: str = "upstream_error") -> bytes:
    return event({"error": {"message": message, "type": "upstream_error", "param": None, "code": code}})


def usage_only(chunk: dict[str, Any]) -> bool:
    return not chunk.get("choices") and bool(chunk.get("usage"))

"""Server-sent events of the non-chat surfaces (Anthropic Messages, OpenAI Responses): reading
them with their exact bytes, writing one anew, and telling whether a stream ended properly."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from .stream import sse_lines


@dataclass
class Event:
    """One server-sent event as received: its raw bytes (relayed unchanged) and its parts."""

    raw: bytes
    name: str | None
    data: str


async def read_events(response: httpx.Response) -> AsyncIterator[Event]:
    """Server-sent events of ``response``, each with the exact lines it came in."""
    lines: list[str] = []
    async for line in sse_lines(response):  # not aiter_lines: it splits at U+2028 inside JSON
        if line == "":
            if lines:
                yield _event(lines)
                lines = []
            continue
        lines.append(line)
    if lines:
        yield _event(lines)


def _event(lines: list[str]) -> Event:
    name = None
    data: list[str] = []
    for line in lines:
        if line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].lstrip(" "))
    return Event(("\n".join(lines) + "\n\n").encode(), name, "\n".join(data))


def parse_json(data: str) -> Any:
    try:
        return json.loads(data)
    except ValueError:
        return None


def sse(name: str | None, data: dict[str, Any]) -> bytes:
    """One event written anew (an event the splice changed)."""
    head = f"event: {name}\n" if name else ""
    try:
        return f"{head}data: {json.dumps(data, ensure_ascii=False)}\n\n".encode()
    except UnicodeEncodeError:  # a lone surrogate from upstream: escaped, as the upstream sent it
        return f"{head}data: {json.dumps(data)}\n\n".encode()


_FINAL_EVENTS = frozenset({"message_stop", "response.completed", "response.incomplete", "response.failed", "error"})
"""What ends an Anthropic or Responses stream properly (an upstream ``error`` event is relayed as is)."""


def ended_properly(events: Sequence[Event]) -> bool:
    """Whether a stream reached its final event (``_FINAL_EVENTS``)."""
    for ev in reversed(events):
        name = ev.name
        if name is None:
            data = parse_json(ev.data)
            name = data.get("type") if isinstance(data, dict) else None
        if name in _FINAL_EVENTS:
            return True
    return False


def is_sse(r: httpx.Response) -> bool:
    ctype = r.headers.get("content-type", "").split(";")[0].strip().lower()
    return ctype in ("text/event-stream", "")

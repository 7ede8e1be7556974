"""What the mini wrapper writes into a run: the ``extra.refold`` record of each call, and the
observation message that answers a context command (``refold.wire`` reads both back)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from ..history import History
from ..messages import clean
from ..types import Answer, Message, Rendered
from ..wire import answer_record
from .cache_control import breakpoints

FORMAT = "refold-mini-1"
"""Version of the ``extra.refold`` record added to each assistant message."""


def call_info(
    history: History, rendered: Rendered | None, sent: list[Message], chat: list[Message], tokenizer: Any, cache_control: bool
) -> dict[str, Any]:
    """The record of one model call: what was sent, how it was rendered, its wall time and token counts."""
    info: dict[str, Any] = {
        "format": FORMAT,
        "t": len(history),
        "messages": len(sent),
        "base_messages": len(chat),
        "time": round(time.time(), 3),  # when the call was made: idle gaps decide when the cache is cold
    }
    if rendered is not None:
        s = rendered.stats
        info |= {
            "boundary": s.boundary,
            "stubs": s.stubs,
            "trimmed": s.trimmed,
            "folded_steps": s.folded_steps,
            "notes": s.notes,
            "restores": s.restores,
            "render_ms": round(s.render_ms, 3),
        }
        if cache_control:
            info["cache_breakpoints"] = breakpoints(rendered)
    if tokenizer is not None:
        from ..chat_tokens import count_messages

        info["tokenizer"] = tokenizer.name
        info["prompt_tokens"] = count_messages([clean(m) for m in sent], tokenizer)
        info["base_prompt_tokens"] = count_messages([clean(m) for m in chat], tokenizer)
    return info


def answer_message(name: str, answer: Answer, tool_call_id: str | None) -> dict[str, Any]:
    """The observation that answers context command ``name`` (a tool message for a tool call)."""
    msg: dict[str, Any] = {
        "role": "user",
        "content": answer.text,
        "extra": {
            "raw_output": answer.text,
            "returncode": 0,
            "timestamp": time.time(),
            "exception_info": "",
            **answer_record(name, answer),
        },
    }
    if tool_call_id:
        msg["role"] = "tool"
        msg["tool_call_id"] = tool_call_id
    return msg


def usage(response: Any) -> dict[str, Any]:
    """The provider's own prompt/cached token counts, when the inner model recorded a response."""
    found = response.get("usage") if isinstance(response, dict) else None
    if not isinstance(found, dict):
        return {}
    out: dict[str, Any] = {}
    if isinstance(found.get("prompt_tokens"), int):
        out["provider_prompt_tokens"] = found["prompt_tokens"]
    details = found.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    if cached is None:
        cached = found.get("cache_read_input_tokens")  # Anthropic's name, when litellm passes it on
    if isinstance(cached, int):
        out["provider_cached_tokens"] = cached
    if isinstance(found.get("cache_creation_input_tokens"), int):
        out["provider_cache_write_tokens"] = found["cache_creation_input_tokens"]
    return out


def extends(history: History, chat: Sequence[Message]) -> bool:
    """Whether ``chat`` can be the same run as ``history`` (same prefix, not shorter)."""
    prefix = history.prefix
    known = len(prefix) + sum(1 + len(s.observations) for s in history.steps)
    return len(chat) >= known and all(a == b for a, b in zip(prefix, chat, strict=False))

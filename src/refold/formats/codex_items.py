"""Codex rollout items as chat messages, and the usage Codex reports, for ``refold.formats.codex``."""

from __future__ import annotations

import copy
import json
from datetime import datetime
from typing import Any

from ..history import KEPT, is_kept
from ..responses_items import CALLS, chat_call, item_kind, item_text
from ..types import Message

__all__ = [
    "KEY", "as_usage", "chat_parts", "difference", "input_message", "is_context", "kept_reply", "open_command",
    "output_message", "rollback_cut", "seconds",
]  # fmt: skip

KEY = "responses"
"""The key under a message's ``extra`` that holds its Responses items (as the proxy keeps them)."""
# how Codex opens the context it injects (rebuilt after an old-style compaction, kept first)
_CONTEXT_TAGS = ("<environment_context>", "<user_instructions>", "# AGENTS.md", "<permissions", "<INSTRUCTIONS>")


# ---- items ----------------------------------------------------------------------------------------


def chat_parts(content: Any) -> Any:
    """Responses content as chat content: one text part as a string, else chat parts."""
    if isinstance(content, str) or not isinstance(content, list):
        return content if isinstance(content, str) else ""
    parts: list[dict[str, Any]] = []
    for p in content:
        if not isinstance(p, dict):
            continue
        kind = p.get("type")
        if kind in ("input_text", "output_text", "text"):
            parts.append({"type": "text", "text": str(p.get("text", ""))})
        elif kind == "input_image":
            parts.append({"type": "image_url", "image_url": {"url": str(p.get("image_url", ""))}})
    if all(p["type"] == "text" for p in parts):
        return "".join(p["text"] for p in parts)
    return parts


def input_message(item: dict[str, Any], at: float | None) -> Message:
    msg: Message = {"role": item["role"], "content": chat_parts(item.get("content"))}
    if at is not None:
        msg["extra"] = {"timestamp": at}
    return msg


def kept_reply(item: dict[str, Any], at: float | None) -> Message:
    """An earlier answer a compaction kept (Codex 0.10x keeps the final answers verbatim): sent with
    every later call, as an assistant message, but written by no call of that context, so it is
    marked ``extra[KEPT]``: a prefix message, not a step (a step would be a model call)."""
    extra: dict[str, Any] = {KEPT: True, KEY: [copy.deepcopy(item)]}
    if at is not None:
        extra["timestamp"] = at
    return {"role": "assistant", "content": chat_parts(item.get("content")), "extra": extra}


def output_message(item: dict[str, Any], at: float | None) -> Message:
    output = item.get("output")
    if isinstance(output, dict):  # older Codex: {"content": ..., "success": bool}
        output = output.get("content")
    content = chat_parts(output) if isinstance(output, str | list) else json.dumps(output, default=str)
    extra: dict[str, Any] = {KEY: copy.deepcopy(item)}
    if at is not None:
        extra["timestamp"] = at
    return {"role": "tool", "tool_call_id": item["call_id"], "content": content, "extra": extra}


def open_command(group: list[dict[str, Any]], call_id: str) -> str | None:
    """The command line of a shell call in a response still open (older Codex wrote each output
    right after its call)."""
    for item in group:
        if item_kind(item) in CALLS and (item.get("call_id") or item.get("id")) == call_id:
            fn = chat_call(item)["function"]
            try:
                args = json.loads(fn["arguments"])
            except ValueError:
                return None
            command = args.get("command") if fn["name"] == "bash" and isinstance(args, dict) else None
            return command if isinstance(command, str) else None
    return None


def rollback_cut(messages: list[Message], turns: int) -> int | None:
    """Where Codex cuts its history to drop the last ``turns`` user turns (``thread_rolled_back``):
    at the ``turns``-th last user message (at most back to the first), then back over the context
    updates just before it (developer messages, injected context), never before the first turn."""
    users = [i for i, m in enumerate(messages) if m.get("role") == "user" and not is_context(m)]
    if turns <= 0 or not users:
        return None
    cut = users[0] if turns >= len(users) else users[-turns]
    while cut > users[0] and (messages[cut - 1].get("role") == "developer" or (messages[cut - 1].get("role") == "user" and is_context(messages[cut - 1]))):
        cut -= 1
    return cut


def rolled_back(
    messages: list[Message], unreplied: list[dict[str, Any]], cut: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The unreplied calls made before ``cut`` (they stay), and every call made from it on, in the
    order made: a dropped reply's as ``{"usage": ...}`` (its recorded usage), an unreplied one as is."""
    replies = [i for i, m in enumerate(messages) if m.get("role") == "assistant" and not is_kept(m)]
    made: list[tuple[int, int, dict[str, Any]]] = []  # (messages seen, order, entry)
    stay: list[dict[str, Any]] = []
    for u in unreplied:
        seen = replies[u["step"] - 1] + 1 + u["observations"] if u["step"] else u["observations"]
        if seen <= cut:
            stay.append(u)
        else:
            made.append((seen, 0, u))
    for i in replies:
        if i >= cut:
            response = (messages[i].get("extra") or {}).get("response")
            made.append((i, 1, {"usage": response.get("usage") if isinstance(response, dict) else None}))
    return stay, [u for _, _, u in sorted(made, key=lambda e: e[:2])]


def is_context(m: Message) -> bool:
    content = m.get("content")
    text = content if isinstance(content, str) else item_text({"content": content})
    return text.lstrip().startswith(_CONTEXT_TAGS)


# ---- usage ----------------------------------------------------------------------------------------


def as_usage(u: Any) -> dict[str, Any] | None:
    """Codex's token usage as the chat-completions usage refold reads (``extra.response.usage``):
    ``output_tokens`` includes the reasoning tokens, as ``completion_tokens`` does."""
    if not isinstance(u, dict):
        return None
    return {
        "prompt_tokens": u.get("input_tokens"),
        "prompt_tokens_details": {"cached_tokens": u.get("cached_input_tokens")},
        "completion_tokens": u.get("output_tokens"),
        "completion_tokens_details": {"reasoning_tokens": u.get("reasoning_output_tokens")},
    }


def difference(total: Any, before: Any) -> dict[str, Any] | None:
    """One response's usage from two running totals (a record without ``last_token_usage``)."""
    if not isinstance(total, dict):
        return None
    prior = before if isinstance(before, dict) else {}
    out: dict[str, Any] = {}
    for k, v in total.items():
        p = prior.get(k, 0)
        if isinstance(v, int) and isinstance(p, int):
            out[k] = v - p
    return out


def seconds(stamp: Any) -> float | None:
    if not isinstance(stamp, str) or not stamp:
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None

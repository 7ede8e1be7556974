"""mini-swe-agent's Responses-API model classes (``litellm_response``, ``openrouter_response``,
``portkey_response``) seen as chat messages, and the rendered prompt turned back into their items.

Such a model keeps a run as Responses items: each reply is the whole response object
(``{"object": "response", "output": [reasoning, message, function_call, ...]}``), each output a
``function_call_output`` item, a format error a ``message`` item with ``input_text`` parts.
``to_chat`` gives the chat message each one stands for (a reply keeps its output items under
``extra["responses"]``, an output its item), so the History and the renderer work as for a chat
model; ``to_items`` turns the rendered prompt back into input items: a reply's items as received
(reasoning with its ``encrypted_content``, calls), its text replaced only where the render
changed it, each output item with the rendered text.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from ..history import History
from ..responses_items import CALLS, OUTPUTS, assistant_items, item_text
from ..types import Message, Origin, content_text

NATIVE = "responses"
"""The key under a converted message's ``extra`` that holds its Responses items."""

RESPONSES_CLASSES = frozenset({
    ("minisweagent.models.litellm_response_model", "LitellmResponseModel"),
    ("minisweagent.models.openrouter_response_model", "OpenRouterResponseModel"),
    ("minisweagent.models.portkey_response_model", "PortkeyResponseAPIModel"),
})


def is_responses_class(cls: Any) -> bool:
    """Whether mini model class ``cls`` (or a class it derives from) speaks the Responses API."""
    return any((c.__module__, c.__qualname__) in RESPONSES_CLASSES for c in getattr(cls, "__mro__", ()))


def is_responses_run(messages: Iterable[Any]) -> bool:
    """Whether a saved mini message list holds Responses items (a reply kept as a response object)."""
    return any(isinstance(m, dict) and (m.get("object") == "response" or m.get("type") in OUTPUTS) for m in messages)


def _without_extra(item: Any) -> Any:
    return {k: v for k, v in item.items() if k != "extra"} if isinstance(item, dict) else item


def _call(item: dict[str, Any]) -> dict[str, Any]:
    raw = item.get("arguments") if item.get("type") == "function_call" else item.get("input", item.get("action"))
    args = raw if isinstance(raw, str) else json.dumps(raw or {}, ensure_ascii=False)
    return {
        "id": item.get("call_id") or item.get("id"),
        "type": "function",
        "function": {"name": str(item.get("name") or "shell"), "arguments": args},
    }


def _chat_content(content: Any) -> Any:
    """Input parts as chat parts (``input_text`` -> ``text``), so the renderer sees their text."""
    if not isinstance(content, list):
        return content
    return [
        {"type": "text", "text": p.get("text", "")} if isinstance(p, dict) and p.get("type") == "input_text" else p
        for p in content
    ]


def _input_content(content: Any) -> Any:
    if not isinstance(content, list):
        return content if isinstance(content, str) else content_text(content)
    return [
        {"type": "input_text", "text": p.get("text", "")} if isinstance(p, dict) and p.get("type") == "text" else p
        for p in content
    ]


def to_chat(messages: Iterable[Any]) -> list[Any]:
    """mini's message list with its Responses items as the chat messages they stand for."""
    out: list[Any] = []
    for m in messages:
        if not isinstance(m, dict):
            out.append(m)  # History names it
            continue
        raw = m.get("extra")
        extra: dict[str, Any] = raw if isinstance(raw, dict) else {}
        kind = m.get("type")
        if m.get("object") == "response":
            items = [i for i in m.get("output") or [] if isinstance(i, dict)]
            reply: Message = {
                "role": "assistant",
                "content": "".join(item_text(i) for i in items if i.get("type") == "message"),
                "extra": {**extra, NATIVE: [_without_extra(i) for i in items]},
            }
            calls = [_call(i) for i in items if i.get("type") in CALLS]
            if calls:
                reply["tool_calls"] = calls
            out.append(reply)
        elif kind in OUTPUTS:
            output = m.get("output")
            out.append({
                "role": "tool",
                "tool_call_id": m.get("call_id"),
                "content": _chat_content(output) if isinstance(output, str | list) else content_text(output),
                "extra": {**extra, NATIVE: _without_extra(m)},
            })
        elif kind == "message" and "role" in m:
            out.append({**{k: v for k, v in m.items() if k != "type"}, "content": _chat_content(m.get("content"))})
        else:
            out.append(m)
    return out


def to_items(messages: Sequence[Message], origins: Sequence[Origin], history: History) -> list[dict[str, Any]]:
    """A rendered prompt as the Responses input items the inner model sends."""
    items: list[dict[str, Any]] = []
    for m, o in zip(messages, origins, strict=True):
        role = m.get("role")
        if role == "assistant":
            native = None
            if o.part == "reply" and o.step is not None and 1 <= o.step <= len(history):
                native = (history.step(o.step).reply.get("extra") or {}).get(NATIVE)
            items += assistant_items(m, native)
        elif role == "tool":
            items.append({"type": "function_call_output", "call_id": m.get("tool_call_id"), "output": _input_content(m.get("content"))})
        elif isinstance(m.get("content"), list):
            items.append({"type": "message", "role": role, "content": _input_content(m["content"])})
        else:
            items.append({"role": role, "content": m.get("content") if isinstance(m.get("content"), str) else content_text(m.get("content"))})
    return items


def answer_item(message: Message) -> dict[str, Any]:
    """A context command's answer (``mini_record.answer_message``) as the item a Responses run keeps."""
    extra, text = message.get("extra") or {}, content_text(message.get("content"))
    if message.get("tool_call_id"):
        return {"type": "function_call_output", "call_id": message["tool_call_id"], "output": text, "extra": extra}
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}], "extra": extra}

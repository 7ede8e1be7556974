"""Replies as the client holds them, and what the session records when the client sends them back.

A reply the client was shown differs from what the model wrote when the proxy stripped its head or
relayed an internal round's text with it; ``ShownReplies`` maps the client's form back to the
model's. A client's assistant message is recorded with no context command answered
(``unanswered``): the proxy did not answer it, the client's own shell ran it or refused it.
"""

from __future__ import annotations

import copy
import dataclasses
from collections import OrderedDict
from typing import Any

from ..context.recognize import ANY
from ..types import Message
from ..wire import actions_record, issued_commands, read_actions
from .mapping import normalize
from .stream import strip_head

_PENDING = 16  # replies per session remembered in the form the client was shown
_SESSIONS = 4096


def unanswered(message: Message) -> Message:
    """A client's assistant message recorded so that no context command in it is applied: the
    proxy did not answer it (the client's own shell ran it, or refused it)."""
    if not _has_context_command(message):
        return message  # the common case, without analyzing every command
    actions = read_actions(message)
    out = dict(message)
    extra = dict(out["extra"]) if isinstance(out.get("extra"), dict) else {}
    extra["refold"] = actions_record([dataclasses.replace(a, context=None) for a in actions])
    out["extra"] = extra
    return out


_SEEN: OrderedDict[Any, bool] = OrderedDict()  # clients resend every reply each turn: read each once


def _has_context_command(message: Message) -> bool:
    calls = message.get("tool_calls")
    key = (
        str(message.get("content")),
        tuple(
            (str(fn.get("name")), str(fn.get("arguments")))
            for c in (calls if isinstance(calls, list) else [])
            if isinstance(c, dict) and isinstance(fn := c.get("function"), dict)
        ),
    )
    found = _SEEN.get(key)
    if found is None:
        found = _SEEN[key] = any(ANY.command(tool, cmd) is not None for cmd, tool, _ in issued_commands(message))
        while len(_SEEN) > 65536:
            _SEEN.popitem(last=False)
    return found


class ShownReplies:
    """Per session, the latest replies whose client form differs from what the model wrote."""

    def __init__(self) -> None:
        self._pending: OrderedDict[str, OrderedDict[Any, Message]] = OrderedDict()

    def remember(self, sid: str, shown: Message, real: Message) -> None:
        """A final reply whose client form differs from what the model wrote: when the client
        sends it back, the session records what the model wrote (memory only; after a restart
        the client's form is recorded, which costs that step its PROGRESS/STALE head)."""
        if normalize(shown) == normalize(real):
            return
        book = self._pending.setdefault(sid, OrderedDict())
        self._pending.move_to_end(sid)
        book[normalize(shown)] = copy.deepcopy(real)
        while len(book) > _PENDING:
            book.popitem(last=False)
        while len(self._pending) > _SESSIONS:
            self._pending.popitem(last=False)

    def as_sent(self, sid: str, messages: list[Message]) -> list[Message]:
        """``messages`` with the latest reply the client was shown in another form replaced by
        what the model wrote. Only the latest: a model may repeat itself, and an earlier reply
        that reads the same is already stored as written."""
        book = self._pending.get(sid)
        if not book:
            return messages
        for i in range(len(messages) - 1, -1, -1):
            m = messages[i]
            if m.get("role") != "assistant":
                continue
            real = book.get(normalize(m))
            if real is not None:
                return [*messages[:i], {**m, **real}, *messages[i + 1 :]]
        return messages

    def body(self, sid: str, body: dict[str, Any], strip: bool) -> dict[str, Any]:
        """A non-streamed response as the client is shown it (heads stripped when ``strip``)."""
        if not strip:
            return body
        out = copy.deepcopy(body)
        for choice in out.get("choices") or []:
            msg = choice.get("message")
            if isinstance(msg, dict) and isinstance(msg.get("content"), str):
                real = dict(msg)
                msg["content"] = strip_head(msg["content"])
                self.remember(sid, {"role": "assistant", **msg}, {"role": "assistant", **real})
        return out

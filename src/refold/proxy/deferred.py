"""Context commands of a round the client was already streamed, answered before the next call.

Once part of a streamed round has gone to the client (its first call could not be a context
command, or no round is left to answer one in), a later call that is a context command is
held back: the client never receives it, and the proxy cannot answer it in the same response
(the model's next round needs the outputs of the calls the client runs). It is kept with the
session and answered when the client sends those outputs: that request records the client's
step, then the kept calls as an internal step with the proxy's answers (forgetting them in the
same write), and renders the prompt after both. The kept calls are stored before the client
receives the end of the answer, so a restart between the two requests loses nothing.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

from ..history import History
from ..types import Message
from .commands import call_action
from .early import CallGate, call_verdict
from .mapping import normalize
from .spliced import unsent, visible_text
from .stream import strip_head

if TYPE_CHECKING:
    from .sessions import Session, SessionManager

_SESSIONS = 4096


class Deferred:
    """The context calls held back from the latest reply a client was streamed: ``put`` while the
    answer is relayed, ``save`` (with the session) before its last bytes go out, ``take`` when the
    client's next request ends with that reply."""

    def __init__(self) -> None:
        self._pending: dict[str, tuple[Message, Message]] = {}

    def put(self, sid: str, shown: Message, calls: Message) -> None:
        """``calls`` (a reply of the held-back calls) follow ``shown``, the reply as the session
        records it when the client sends it back."""
        self._pending[sid] = (copy.deepcopy(shown), copy.deepcopy(calls))
        while len(self._pending) > _SESSIONS:  # answers never saved (their stream broke)
            self._pending.pop(next(iter(self._pending)))

    async def save(self, manager: SessionManager, s: Session, client: Message | None = None) -> None:
        """Store what ``put`` kept for ``s`` with the session; ``client``: the reply in the form
        the client holds when it differs from ``shown`` (mapped back on the next request)."""
        pending = self._pending.pop(s.sid, None)
        if pending is None:
            return
        record: dict[str, Any] = {"after": pending[0], "calls": pending[1]}
        if client is not None and normalize(client) != normalize(pending[0]):
            record["client"] = client
        async with s.lock:
            await manager.hold(s, record)

    def as_sent(self, s: Session, messages: list[Message]) -> list[Message]:
        """``messages`` with the held reply, when the client holds it in another form, as the
        session records it (the latest assistant message only)."""
        held = s.held
        client = held.get("client") if held else None
        if not isinstance(client, dict) or held is None:
            return messages
        want = normalize(client)
        for i in range(len(messages) - 1, -1, -1):
            if messages[i].get("role") == "assistant":
                if normalize(messages[i]) == want:
                    return [*messages[:i], {**messages[i], **held["after"]}, *messages[i + 1 :]]
                break
        return messages

    def take(self, s: Session, history: History) -> Message | None:
        """The held-back calls when ``history`` ends with the step of the reply they followed."""
        held = s.held
        if held is None or len(history) == 0 or not isinstance(held.get("after"), dict):
            return None
        if normalize(history.step(len(history)).reply) != normalize(held["after"]):
            return None
        calls = held.get("calls")
        return copy.deepcopy(calls) if isinstance(calls, dict) else None


class LaterCalls:
    """Chat completions: a released round's later calls that may be context commands held (with
    every chunk after them) until their name and command's first word decide them; at the round's
    end those that are context commands are ``withheld`` by the ``CallGate`` (left out, the calls
    after them renumbered) and kept for the next request."""

    def __init__(self, gate: CallGate) -> None:
        self.gate = gate
        self.held: list[dict[str, Any]] = []
        self._index: int | None = None

    def _verdict(self, i: int) -> bool | None:
        g = self.gate
        if not g.args[i] and g.order[-1] == i:
            return None  # its name may still come in pieces
        return call_verdict(g.names[i], g.args[i], g.rec)

    def relay(self, chunk: dict[str, Any]) -> list[dict[str, Any]]:
        """What of a released round's chunk goes to the client now (through ``CallGate.relayed``)."""
        if self._index is not None:
            self.held.append(chunk)
            return self._decide()
        g = self.gate
        for i in _indices(chunk):
            first = g.order[0] if g.order else None
            if i != first and not g.relayed_call(i) and i not in g.withheld and self._verdict(i) is not False:
                self._index, self.held = i, [chunk]
                return self._decide()
        out = g.relayed(chunk)
        return [] if out is None else [out]

    def _decide(self) -> list[dict[str, Any]]:
        assert self._index is not None
        if self._verdict(self._index) is not False:
            return []
        held, self.held, self._index = self.held, [], None
        out = [c for c in [self.gate.relayed(held[0])] if c is not None]
        for chunk in held[1:]:
            out += self.relay(chunk)
        return out

    def settle(
        self, message: Message, deferred: Deferred, sid: str, split: dict[str, Any] | None = None
    ) -> list[dict[str, Any]]:
        """The round ended, not internal: the held chunks to send, its context calls left out and
        kept in ``deferred`` (answered before the session's next upstream call); ``split``: the
        part of the first call from its ``restore`` on (``relay.ArgsGuard``), kept first."""
        g = self.gate
        calls = [c for c in message.get("tool_calls") or [] if isinstance(c, dict)]
        left: list[dict[str, Any]] = [split] if split is not None else []
        for i, c in zip(sorted(g.names), calls, strict=False):
            if not g.relayed_call(i) and (i in g.withheld or call_action(c, g.rec).context is not None):
                g.withheld.add(i)
                left.append(c)
        held, self.held, self._index = self.held, [], None
        if left:
            deferred.put(sid, g.shown(message), {"role": "assistant", "content": "", "tool_calls": left})
        return [c for c in (g.relayed(h) for h in held) if c is not None]


def _indices(chunk: dict[str, Any]) -> list[int]:
    out = []
    for choice in chunk.get("choices") or []:
        if (choice.get("index") or 0) == 0:
            out += [int(tc.get("index") or 0) for tc in (choice.get("delta") or {}).get("tool_calls") or []]
    return out


def unsent_text(message: Message, sent: str, strip: bool) -> str:
    """An internal chat round's text not streamed yet (all but its command block); ``strip``: the
    client is sent replies without their PROGRESS/STALE head."""
    visible = visible_text(str(message.get("content") or ""), not message.get("tool_calls"))
    return unsent(strip_head(visible) if strip else visible, sent)

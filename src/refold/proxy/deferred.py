"""Context commands of a round the client was already streamed, answered before the next call.

Once part of a streamed round has gone to the client (its first call could not be a context
command, or no round is left to answer one in), a later call that is a context command is
held back: the client never receives it, and the proxy cannot answer it in the same response
(the model's next round needs the outputs of the calls the client runs). It is kept here and
answered when the client sends those outputs: that request records the client's step, then the
kept calls as an internal step with the proxy's answers, and renders the prompt after both.
Memory only: after a restart the kept calls are dropped (the step records what the client held).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from ..history import History
from ..types import Message
from .commands import _call
from .early import CallGate, call_verdict
from .mapping import Norm, normalize
from .spliced import unsent, visible_text
from .stream import strip_head

_SESSIONS = 4096


class Deferred:
    """Per session, the context calls held back from the latest reply the client was streamed."""

    def __init__(self) -> None:
        self._pending: OrderedDict[str, tuple[Norm, Message]] = OrderedDict()

    def put(self, sid: str, shown: Message, calls: Message) -> None:
        """``calls`` (a reply of the held-back calls) follow ``shown``, the reply the client holds."""
        self._pending[sid] = (normalize(shown), calls)
        self._pending.move_to_end(sid)
        while len(self._pending) > _SESSIONS:
            self._pending.popitem(last=False)

    def take(self, sid: str, history: History) -> Message | None:
        """The held-back calls when ``history`` ends with the step of the reply they followed."""
        pending = self._pending.get(sid)
        if pending is None or len(history) == 0:
            return None
        if normalize(history.step(len(history)).reply) != pending[0]:
            return None
        del self._pending[sid]
        return pending[1]


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
            if i != first and i not in g._client_index and i not in g.withheld and self._verdict(i) is not False:
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

    def settle(self, message: Message, deferred: Deferred, sid: str) -> list[dict[str, Any]]:
        """The round ended, not internal: the held chunks to send, its context calls left out and
        kept in ``deferred`` (answered before the session's next upstream call)."""
        g = self.gate
        calls = [c for c in message.get("tool_calls") or [] if isinstance(c, dict)]
        left: list[dict[str, Any]] = []
        for i, c in zip(sorted(g.names), calls, strict=False):
            if i not in g._client_index and (i in g.withheld or _call(c, g.rec).context is not None):
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

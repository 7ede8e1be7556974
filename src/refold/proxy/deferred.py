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

from ..history import History
from ..types import Message
from .mapping import Norm, normalize

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

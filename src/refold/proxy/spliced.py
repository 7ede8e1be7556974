"""What the two surfaces' splicers add to ``HeldRound`` (held.py): a released round's later calls
held until decided, and an internal round's text that was not relayed yet.

* Once a round is released (its first call cannot be a context command, or no round is left to
  answer one in), a later call that may still be one is held, and all that follows it, until its
  name and command's first word decide it; at the round's end the calls that are context commands
  are left out for the client (the blocks or items after them numbered on) and answered before
  the next upstream call (``deferred.Deferred``).
* An internal round's text the client has not been sent (the part of the event that held the
  command block's fence, the text after the block, text after a context call) is sent before the
  round's open block or item is closed: the client loses nothing the model wrote but the command.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Collection
from typing import Any

from ..context.recognize import Recognizer
from ..protocol import SHELL_LANGS, fenced_blocks
from .held import HeldRound, decide
from .sse import Event, parse_json

_XML_OPEN, _XML_CLOSE = "<mswea_bash_command>", "</mswea_bash_command>"


def command_span(text: str) -> tuple[int, int] | None:
    """Where the command block ``protocol.bash_block`` takes its command from sits in ``text``."""
    xml_at = text.find(_XML_OPEN)
    xml_end = text.find(_XML_CLOSE, xml_at + len(_XML_OPEN)) if xml_at >= 0 else -1
    xml = (xml_at, xml_end + len(_XML_CLOSE)) if xml_end >= 0 else None
    unlabeled: tuple[int, int] | None = None
    for at, end, info, body in fenced_blocks(text):
        if xml is not None and xml[0] < at:
            break
        lang = info.strip()
        if lang in SHELL_LANGS and body.strip():
            return at, end
        if not lang and unlabeled is None and body.strip():
            unlabeled = at, end
    return xml if xml is not None else unlabeled


def visible_text(text: str, command_in_text: bool) -> str:
    """A reply's text as the client may see it: without its command block when that block is the
    context command the proxy answers."""
    span = command_span(text) if command_in_text else None
    return text if span is None else text[: span[0]] + text[span[1] :]


def unsent(visible: str, sent: str) -> str:
    """What of ``visible`` follows the ``sent`` prefix (nothing when the two disagree)."""
    return visible[len(sent) :] if visible.startswith(sent) else ""


class SplicedRound(HeldRound):
    """``HeldRound`` with a released round's later calls held until decided. Each surface says
    which events open a call and add to its arguments (``call_start``, ``call_delta``)."""

    def __init__(self, rec: Recognizer) -> None:
        super().__init__(rec)
        self._map: dict[int, int | None] = {}  # the round's index -> the client's (None: left out)
        self.later: list[tuple[Event, dict[str, Any]]] = []
        self._later: int | None = None  # the later call being decided
        self._later_name = self._later_args = ""
        self.left_out: list[str] = []  # ids of the round's calls left out (context commands)

    def begin(self, final: bool) -> None:
        super().begin(final)
        self.later, self._later, self.left_out = [], None, []

    @property
    def holding_later(self) -> bool:
        return self._later is not None

    @abstractmethod
    def call_start(self, data: dict[str, Any]) -> tuple[int, str, str] | None:
        """(index, name, call id) when the event opens a tool call."""

    @abstractmethod
    def call_delta(self, data: dict[str, Any]) -> tuple[int, str] | None:
        """(index, arguments piece) when the event adds to a call's arguments."""

    def feed(self, ev: Event) -> list[bytes]:
        if not self.released:
            return super().feed(ev)
        data = parse_json(ev.data)
        return self._released(ev, data if isinstance(data, dict) else {})

    def _released(self, ev: Event, data: dict[str, Any]) -> list[bytes]:
        if self._later is not None:
            self.later.append((ev, data))
            piece = self.call_delta(data)
            if piece is not None and piece[0] == self._later:
                self._later_args += piece[1]
                return self._decide_later()
            return []
        start = self.call_start(data)
        if start is None or start[0] == self.call:
            return self.emit(ev, data)
        self._later, self._later_name, self._later_args = start[0], start[1], ""
        self.later = [(ev, data)]
        return self._decide_later()

    def _decide_later(self) -> list[bytes]:
        if decide(self._later_name, self._later_args, self.rec) is not False:
            return []
        held, self.later, self._later = self.later, [], None
        out = self.emit(*held[0])
        for ev, data in held[1:]:  # another later call among them is held in turn
            out += self._released(ev, data)
        return out

    def settle(self, context_ids: Collection[str]) -> list[bytes]:
        """The round ended and was not internal: the later calls still held go to the client but
        those that are context commands (``context_ids``), which are left out."""
        held, self.later, self._later = self.later, [], None
        for _, data in held:
            start = self.call_start(data)
            if start is not None and start[2] in context_ids and start[0] not in self._map:
                self._map[start[0]] = None
                self.left_out.append(start[2])
        out: list[bytes] = []
        for ev, data in held:
            out += self.emit(ev, data)
        return out

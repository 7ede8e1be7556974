"""Holding a streamed round of a non-chat surface until it is known not to be internal.

A round that may end in a context command is relayed as it arrives up to its first tool call (or,
for an agent without tools, up to where a ```bash block may begin); the held part goes out as soon
as the call's name and its command's first word show it is no context command, else the round's
end decides. ``HeldRound`` keeps that state; ``AnthropicSplicer`` and ``ResponsesSplicer`` say how
their events are written and read.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from ..context.recognize import Recognizer
from ..shell import SHELL_TOOLS
from ..shell_tools import SHELL_NAMES
from .early import ARGV_SHELL, CommandGate, call_verdict
from .sse import Event, parse_json


def decide(name: str, arguments: str, rec: Recognizer) -> bool | None:
    """``early.call_verdict`` for a surface's call: a harness's shell tool read as ``bash``, an
    argv list as ``surface.canonical_call`` reads it (Codex's ``["bash", "-lc", cmd]`` is ``cmd``)."""
    n = name.lower()
    return call_verdict("bash" if n in SHELL_NAMES or n in SHELL_TOOLS else name, arguments, rec, argv=ARGV_SHELL)


class HeldRound(ABC):
    """What the two surfaces' splicers share: the round's held events, the early decision on its
    first tool call, and, for an agent without tools, its text relayed event by event up to where
    a command block may begin (``CommandGate``; an event is sent once all its text is released).
    Each surface says how its events are written, read and ended (the abstract methods)."""

    def __init__(self, rec: Recognizer) -> None:
        self.rec = rec
        self.released = False
        self.early = False  # released by the first call's verdict (not because the round is final)
        self.final = False
        self.held: list[tuple[Event, dict[str, Any], int | None]] = []  # (event, data, end of its text)
        self.holding = False
        self.call: int | None = None
        self.call_name = ""
        self.call_args = ""
        self.gate: CommandGate | None = None
        self._fed = self._out = 0  # text fed to the gate, and released by it

    def begin(self, final: bool) -> None:
        self.released = self.final = final
        self.early = False
        self.held = []
        self.holding = False
        self.call, self.call_name, self.call_args = None, "", ""
        self.gate = CommandGate(self.rec.shell) if self.rec.text and not final else None
        self._fed = self._out = 0

    def feed(self, ev: Event) -> list[bytes]:
        """What to send the client now that ``ev`` arrived."""
        data = parse_json(ev.data)
        if not isinstance(data, dict):
            data = {}
        if self.released:
            return self.emit(ev, data)
        if self.gate is not None:
            return self.text_step(ev, data)
        return self.step(ev, data)

    @abstractmethod
    def step(self, ev: Event, data: dict[str, Any]) -> list[bytes]:
        """An event of a round not yet released, with tools: hold it, or decide the first call."""

    @abstractmethod
    def emit(self, ev: Event, data: dict[str, Any]) -> list[bytes]:
        """The bytes that relay an event to the client (rewritten where the splice changed it)."""

    @abstractmethod
    def text_of(self, data: dict[str, Any]) -> str | None:
        """The reply text an event adds, if it is a text delta."""

    @abstractmethod
    def ends_round(self, data: dict[str, Any]) -> bool:
        """Whether the event closes the round (held until the round's end decides)."""

    def hold(self, ev: Event, data: dict[str, Any]) -> None:
        self.held.append((ev, data, None))

    def hold_call(self, index: int, name: str) -> None:
        self.holding = True
        self.call, self.call_name, self.call_args = index, name, ""

    def verdict(self) -> list[bytes]:
        """Release everything held when the first call cannot be a context command."""
        if decide(self.call_name, self.call_args, self.rec) is not False:
            return []
        self.released = self.early = True
        self.decided_early()
        return self.flush()

    @abstractmethod
    def decided_early(self) -> None:
        """The first call was decided from its command's first word (``call_args`` so far)."""

    def send(self, ev: Event, data: dict[str, Any]) -> list[bytes]:
        """``emit`` for an event of a released round (a surface may hold part of its first call)."""
        return self.emit(ev, data)

    def text_step(self, ev: Event, data: dict[str, Any]) -> list[bytes]:
        """An agent without tools: queue the event; send what the gate has released."""
        assert self.gate is not None
        text = self.text_of(data)
        end = None
        if text is not None:
            self._fed += len(text)
            self._out += len(self.gate.feed(text))
            end = self._fed
        self.held.append((ev, data, end))
        if self.gate.released:  # the block's command is no context command
            self.released = self.early = True
            return self.flush()
        out: list[bytes] = []
        while self.held:
            ev0, d0, end0 = self.held[0]
            if (end0 is not None and end0 > self._out) or self.ends_round(d0):
                break
            self.held.pop(0)
            out += self.send(ev0, d0)
        return out

    def flush(self) -> list[bytes]:
        out: list[bytes] = []
        held, self.held = self.held, []
        for ev, data, _ in held:
            out += self.send(ev, data)
        return out

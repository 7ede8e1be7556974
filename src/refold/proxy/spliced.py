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

import json
from abc import abstractmethod
from collections.abc import Collection
from dataclasses import replace
from typing import Any

from ..context.recognize import Recognizer
from ..reply_command import SHELL_LANGS, fenced_blocks
from ..shell_tools import canonical_call
from .commands import context_calls
from .compound import CompoundHold, derived_id
from .early import ARGV_SHELL, CommandEnd, command_value
from .held import HeldRound, decide
from .sse import Event, parse_json, sse
from .surface_calls import recognizable

_XML_OPEN, _XML_CLOSE = "<mswea_bash_command>", "</mswea_bash_command>"


def command_span(text: str) -> tuple[int, int] | None:
    """Where the command block ``reply_command.bash_block`` takes its command from sits in ``text``."""
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


class CallGuard:
    """The first call of a round relayed early, decided from its command's first word: its
    argument events go on while all they hold may go out: up to the closing quote of the
    command's JSON string, and of that command not from a separator that may lead to a
    ``restore`` (``compound.CompoundHold``); from there they wait until the call's arguments
    end, then go on unchanged when the whole call is no context command (read as the session
    reads it: ``canonical_call``), else the arguments are closed right after the part the client
    was sent, and that is the call it runs; ``ls; restore 3`` is closed after ``ls`` and refold
    answers ``split`` (the same rules as the chat surface's ``relay.ArgsGuard``)."""

    def __init__(self, start: int, listed: bool, hold: bool) -> None:
        self.cmd = CommandEnd(start, listed)
        self.hold = CompoundHold(start) if hold else None
        self.held: list[tuple[Event, dict[str, Any], int | None]] = []  # (event, data, where its piece begins)
        self.done = False
        self.shown: str | None = None  # the closed arguments the client got in place of the real ones
        self.split: str | None = None  # the command from its restore on, answered by refold

    def add(self, piece: str) -> int:
        """Add a piece; where it begins in the arguments."""
        at = len(self.cmd.args)
        self.cmd.add(piece)
        return at

    def allowed(self) -> int:
        """How many characters of the arguments may go out now."""
        end = self.cmd.end
        upto = len(self.cmd.args) if end is None else end
        return min(upto, self.hold.allowed(self.cmd.args)) if self.hold is not None else upto

    def cut(self, command: str, rec: Recognizer, sent: int) -> int | None:
        """Where the arguments are closed for ``ls; restore 3`` (``command`` as the session reads
        the whole call; ``sent``: characters the client has), setting ``split``; None: no cut."""
        if self.hold is None:
            return None
        cut, self.split = self.hold.split(command, rec, sent)
        return cut


def split_call(item: dict[str, Any], rest: str, taken: frozenset[str] = frozenset()) -> tuple[dict[str, Any], str] | None:
    """A copy of a native shell call (a ``tool_use`` block or a ``function_call`` item) running
    ``rest`` instead, under a new id: what refold answers of a split call; and that id."""
    def swap(args: Any) -> dict[str, Any] | None:
        if not isinstance(args, dict):
            return None
        key = "command" if "command" in args else "cmd"
        cmd = args.get(key)
        return {**args, key: [*cmd[:2], rest] if isinstance(cmd, list) else rest}

    if item.get("type") == "tool_use" and isinstance(item.get("id"), str):
        args = swap(item.get("input"))
        cid = derived_id(item["id"], taken)
        return ({**item, "id": cid, "input": args}, cid) if args is not None else None
    if item.get("type") == "function_call" and isinstance(item.get("call_id"), str):
        try:
            args = swap(json.loads(str(item.get("arguments"))))
        except ValueError:
            return None
        if args is None:
            return None
        cid = derived_id(item["call_id"], taken)
        # no ``id``: the upstream never made this item, and one it cannot find is a 404 ("Item with
        # id ... not found") where it looks input items up; ``id`` is optional on an input item
        out = {k: v for k, v in item.items() if k != "id"}
        return {**out, "call_id": cid, "arguments": json.dumps(args, ensure_ascii=False)}, cid
    return None


class SplicedRound(HeldRound):
    """``HeldRound`` with a released round's later calls held until decided, and its first call
    guarded (``CallGuard``). Each surface says which events open a call, add to its arguments and
    end them (``call_start``, ``call_delta``, ``call_end``) and how an event carries changed
    arguments (``with_piece``, ``with_args``)."""

    def __init__(self, rec: Recognizer) -> None:
        super().__init__(rec)
        self._map: dict[int, int | None] = {}  # the round's index -> the client's (None: left out)
        self.later: list[tuple[Event, dict[str, Any]]] = []
        self._later: int | None = None  # the later call being decided
        self._later_name = self._later_args = ""
        self.left_out: list[str] = []  # ids of the round's calls left out (context commands)
        self.guard: CallGuard | None = None
        self.prior_usage: dict[str, Any] | None = None
        """The usage of the answer's earlier (internal) rounds: the final round reports the sum."""

    def begin(self, final: bool) -> None:
        super().begin(final)
        self.later, self._later, self.left_out = [], None, []
        self.guard = None

    @abstractmethod
    def call_end(self, data: dict[str, Any]) -> int | None:
        """The index of the call whose arguments the event ends (they are whole)."""

    @abstractmethod
    def with_piece(self, data: dict[str, Any], piece: str) -> dict[str, Any]:
        """An arguments-delta event carrying ``piece`` instead."""

    @abstractmethod
    def with_args(self, data: dict[str, Any], index: int, args: str) -> dict[str, Any] | None:
        """The event with call ``index``'s whole arguments replaced, if it carries them."""

    items_key = "content"
    """Where an answer lists its blocks or items (``content``, ``output``)."""

    @abstractmethod
    def fixed(self, data: Any) -> Any:
        """An aggregated answer with the guarded call as the client was sent it."""

    def decided_early(self) -> None:
        if decide(self.call_name, "", self.rec) is False or self.call is None:
            return  # decided by its name alone: no command to guard
        found = command_value(self.call_args, argv=ARGV_SHELL)
        if found is not None:  # the call's events so far are held: ``flush`` sends them through ``send``
            self.guard = CallGuard(found.start, found.listed, "restore" in self.rec.shell)

    def send(self, ev: Event, data: dict[str, Any]) -> list[bytes]:
        g = self.guard
        if g is None or (g.done and g.shown is None):
            return self.emit(ev, data)
        piece = self.call_delta(data)
        mine = piece is not None and piece[0] == self.call
        if g.done:  # the arguments were closed for the client: the rest of them is not sent
            if mine:
                return []
            changed = self.with_args(data, self.call, g.shown) if self.call is not None and g.shown else None
            return self.emit(*_rewritten(ev, changed)) if changed is not None else self.emit(ev, data)
        if mine and piece is not None:
            g.held.append((ev, data, g.add(piece[1])))
            return self._release()
        if g.held and self.call_end(data) != self.call:
            g.held.append((ev, data, None))  # kept in order behind the held part of the call
            return []
        if self.call_end(data) == self.call:
            return self.settle_call() + self.send(ev, data)
        return self.emit(ev, data)

    def _release(self) -> list[bytes]:
        """The guarded call's held events, from the first, whose pieces may all go out now."""
        g = self.guard
        assert g is not None
        allowed, out = g.allowed(), []
        while g.held:
            ev, data, at = g.held[0]
            piece = self.call_delta(data) if at is not None else None
            if at is not None and piece is not None and at + len(piece[1]) > allowed:
                break
            g.held.pop(0)
            out += self.emit(ev, data)
        return out

    def settle_call(self) -> list[bytes]:
        """The guarded call's arguments are whole: its held events, as they came or closed."""
        g = self.guard
        if g is None or g.done:
            return []
        g.done = True
        held, g.held = g.held, []
        name, args = canonical_call(self.call_name, g.cmd.args)
        whole = {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": name, "arguments": args}}]}
        sent = next((at for _, _, at in held if at is not None), len(g.cmd.args))
        cut: int | None = None
        if g.cmd.end is not None and context_calls(recognizable(whole), replace(self.rec, compound=False)) is not None:
            cut = g.cmd.end  # a later key made it one: the client runs what it was sent
        elif name == "bash" and isinstance(command := _command(args), str):
            cut = g.cut(command, self.rec, sent)
        out: list[bytes] = []
        if cut is None:
            for ev, data, _ in held:
                out += self.emit(ev, data)
            return out
        g.shown = g.cmd.args[:cut] + g.cmd.closing()
        first = True
        for ev, data, at in held:
            if at is None:
                out += self.send(ev, data)
            elif first:  # the first piece not sent: what the client lacks up to the cut, then the closing
                first = False
                out += self.emit(*_rewritten(ev, self.with_piece(data, g.shown[at:])))
        return out

    def split_answer(self, data: Any) -> tuple[Any, str] | None:
        """The answer with the call refold answers in place of the guarded call's rest added
        after it (for the session, never the client), and that call's id."""
        g, i = self.guard, self.call
        key = self.items_key
        items = data.get(key) if isinstance(data, dict) else None
        if g is None or g.split is None or i is None or not isinstance(items, list) or not 0 <= i < len(items):
            return None
        taken = frozenset(str(it.get(k)) for it in items if isinstance(it, dict) for k in ("id", "call_id") if it.get(k))
        made = split_call(items[i], g.split, taken) if isinstance(items[i], dict) else None
        if made is None:
            return None
        return {**data, key: [*items[: i + 1], made[0], *items[i + 1 :]]}, made[1]

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
        if self.final:  # a round the proxy does not answer: relayed as the model wrote it
            return self.emit(ev, data)
        if self._later is not None:
            self.later.append((ev, data))
            piece = self.call_delta(data)
            if piece is not None and piece[0] == self._later:
                self._later_args += piece[1]
                return self._decide_later()
            return []
        start = self.call_start(data)
        if start is None or start[0] == self.call:
            return self.send(ev, data)
        self._later, self._later_name, self._later_args = start[0], start[1], ""
        self.later = [(ev, data)]
        return self._decide_later()

    def _decide_later(self) -> list[bytes]:
        if decide(self._later_name, self._later_args, self.rec) is not False:
            return []
        held, self.later, self._later = self.later, [], None
        out = self.send(*held[0])
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
        out: list[bytes] = self.settle_call()
        for ev, data in held:
            out += self.send(ev, data)
        return out


def _command(args: str) -> Any:
    try:
        read = json.loads(args)
    except ValueError:
        return None
    return read.get("command") if isinstance(read, dict) else None


def _rewritten(ev: Event, data: dict[str, Any]) -> tuple[Event, dict[str, Any]]:
    """An event written anew with ``data`` (``emit`` relays an event's own bytes when it can)."""
    raw = sse(ev.name, data)
    return Event(raw, ev.name, raw.decode().split("data: ", 1)[1].rstrip("\n")), data

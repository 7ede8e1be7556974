"""What the client of a streamed chat completion is sent of each round, chunk by chunk.

A round that may be internal holds its tool calls (and finish reason) until ``CallGate`` decides
that the first call cannot be a context command, and, for agents without tools, its text from
where a command block may begin (``early.CommandGate``). Once the first call is decided from its
command's first word, its arguments go out as they arrive up to the end of that command's JSON
string; the rest (``"}`` and any further keys) waits until the arguments are whole and the
recognizer has read them as ``commands.call_action`` will, so that no later key (a second
``"command"``) can turn a relayed call into a context command the client would run. If one does,
the call the client gets is closed after the part it was sent, and that is what it ran.
"""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from typing import Any

from ..context.recognize import Recognizer
from ..shell import SHELL_TOOLS
from ..types import Action, Message
from .commands import call_action, context_calls
from .compound import CompoundHold, derived_id
from .deferred import Deferred, LaterCalls, unsent_text
from .early import CallGate, CommandEnd, CommandGate, command_value
from .stream import HeadStripper, call_deltas, event, set_calls, split_chunk, text_chunk, usage_only, with_id
from .upstream import Result
from .usage import add

_HEAD = ("id", "object", "created", "model", "system_fingerprint")

SEPARATOR = "\n\n"
"""Streamed between an internal round's relayed text and the next round's (so one blank line)."""


class ArgsGuard:
    """The first call of a round relayed early, as the client is sent it: its arguments go on up to
    the closing quote of its command's JSON string (``start``: where that string begins), and of
    that command not from a separator on that may lead to a ``restore`` (``compound``); the rest
    waits until they are whole, then goes on unchanged when the whole call is no context command
    (read as ``commands.call_action`` reads it), else a closing of what was sent goes in its place: after
    the part before ``; restore 3``, which refold answers itself (``split``)."""

    def __init__(self, rec: Recognizer, name: str, start: int, listed: bool = False) -> None:
        self.rec, self.name = rec, name
        self.cmd = CommandEnd(start, listed)  # the first call's arguments so far
        self.hold = CompoundHold(start) if "restore" in rec.shell and not listed else None
        self.sent = 0  # how many characters of the arguments the client has
        self.closed = False
        self.closing: str | None = None  # sent in place of the rest
        self.split: str | None = None  # the command from its restore on, answered by refold

    @property
    def args(self) -> str:
        return self.cmd.args

    def _upto(self) -> int:
        end = self.cmd.end
        upto = len(self.args) if end is None else end
        return min(upto, self.hold.allowed(self.args)) if self.hold is not None else upto

    def feed(self, chunk: dict[str, Any]) -> list[dict[str, Any]]:
        """What goes to the client of a relayed chunk (the first call's pieces up to what may go
        out, the rest of it before what follows once it is whole)."""
        if self.closed and self.closing is None:
            return [chunk]
        out = copy.deepcopy(chunk)
        first: list[dict[str, Any]] = []
        changed = False
        for _, delta in call_deltas(out):
            kept = []
            for tc in delta["tool_calls"]:
                if int(tc.get("index") or 0) != 0:
                    kept.append(tc)
                    continue
                changed = True
                fn = tc.get("function") or {}
                if self.closed:  # a closing went in its place: what follows it is not sent
                    rest = {k: v for k, v in tc.items() if k not in ("function", "index")}
                    if rest:
                        first.append({**rest, "index": 0})
                    continue
                piece = fn.get("arguments") or ""
                self.cmd.add(piece)
                upto = self._upto()
                send = self.args[self.sent : upto] if upto > self.sent else ""
                self.sent += len(send)
                if send == piece:
                    first.append(tc)
                elif send or fn.get("name") or any(k not in ("index", "function") for k in tc):
                    first.append({**tc, "function": {**fn, "arguments": send}})
            set_calls(delta, kept)
        whole = not self.closed and self.sent < len(self.args) and self._whole(chunk)
        if not changed and not whole:
            return [chunk]
        head = [_calls_chunk(out, first)] if first else []
        if whole:
            head += self.finish(out)
        return head + _nonempty([out])

    def _whole(self, chunk: dict[str, Any]) -> bool:
        """Whether the call's arguments are whole: they parse, or the reply went on."""
        try:
            if self.cmd.end is not None and isinstance(json.loads(self.args), dict):
                return True
        except ValueError:
            pass
        for choice in chunk.get("choices") or []:
            if (choice.get("index") or 0) != 0:
                continue
            calls = (choice.get("delta") or {}).get("tool_calls") or []
            if choice.get("finish_reason") or any(int(tc.get("index") or 0) != 0 for tc in calls):
                return True
        return False

    def finish(self, template: dict[str, Any]) -> list[dict[str, Any]]:
        """What is held, the call read whole: unchanged, or the closing in its place."""
        if self.closed:
            return []
        self.closed = True
        whole = {"id": "c", "type": "function", "function": {"name": self.name, "arguments": self.args}}
        plain = replace(self.rec, compound=False)
        rest = self.args[self.sent :]
        if context_calls({"role": "assistant", "content": "", "tool_calls": [whole]}, plain) is not None:
            rest = self.closing = self.cmd.closing()  # a later key made it one: it never ran
        elif (cut := self._split(whole)) is not None:
            rest = self.args[self.sent : cut] + self.cmd.closing()
            self.sent, self.closing = cut, self.cmd.closing()
        return [_calls_chunk(template, [{"index": 0, "function": {"arguments": rest}}])] if rest else []

    def _split(self, whole: dict[str, Any]) -> int | None:
        """Where the arguments are cut when the command has a restore after another command the
        client has not been sent (``split``: what refold answers, ``CompoundHold.split``)."""
        if self.hold is None:
            return None
        command = call_action(whole, self.rec).command
        cut, self.split = self.hold.split(command, self.rec, self.sent)
        return cut

    def shown(self, message: Message) -> Message:
        """``message`` with its first call as the client was sent it."""
        calls = message.get("tool_calls")
        if self.closing is None or not isinstance(calls, list) or not calls:
            return message
        c0 = calls[0]
        fixed = {**c0, "function": {**c0["function"], "arguments": self.args[: self.sent] + self.closing}}
        return {**message, "tool_calls": [fixed, *calls[1:]]}

    def answered(self, message: Message) -> dict[str, Any] | None:
        """The call refold answers in place of the part of the first call the client never got."""
        calls = message.get("tool_calls")
        if self.split is None or not isinstance(calls, list) or not calls or not isinstance(calls[0], dict):
            return None
        cid = calls[0].get("id")
        taken = frozenset(str(c.get("id")) for c in calls if isinstance(c, dict) and c.get("id"))
        return {
            "id": derived_id(cid, taken) if isinstance(cid, str) else "refold_restore",
            "type": "function",
            "function": {"name": self.name, "arguments": json.dumps({"command": self.split}, ensure_ascii=False)},
        }


def _calls_chunk(template: dict[str, Any], calls: list[dict[str, Any]]) -> dict[str, Any]:
    """A chunk of ``template``'s stream carrying only the tool-call pieces ``calls``."""
    head: dict[str, Any] = {k: template[k] for k in _HEAD if k in template}
    return {**head, "choices": [{"index": 0, "delta": {"tool_calls": calls}, "finish_reason": None}]}


def _nonempty(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The chunks that still carry something (a delta, a finish reason, logprobs or usage)."""
    out = []
    for c in chunks:
        choices = c.get("choices") or []
        if c.get("usage") or any(ch.get("delta") or ch.get("finish_reason") or ch.get("logprobs") for ch in choices):
            out.append(c)
    return out


class ChatRelay:
    """The rounds of one streamed chat completion as the client is sent them: ``begin`` each
    round, ``feed`` it every chunk as it arrives, ``end`` it with the whole reply. Every round
    after the first is sent under the first round's id, as one completion."""

    def __init__(
        self, rec: Recognizer, *, strip: bool, include_usage: bool, deferred: Deferred | None = None, sid: str = ""
    ) -> None:
        self.rec = rec
        self.deferred = deferred or Deferred()
        self.sid = sid
        self.strip = strip
        self.include_usage = include_usage
        self.prior: dict[str, Any] | None = None
        """The usage of the request's earlier (internal) rounds: added to the usage this round reports."""
        self.ids: dict[str, Any] = {}
        self.role_sent = False
        self.begin(final=True, spliced=False)

    def begin(self, *, final: bool, spliced: bool) -> None:
        """A new round; ``final``: it cannot be internal (relayed as it comes); ``spliced``: an
        internal round came before it (its chunks are rewritten under the first id)."""
        self.gate = CommandGate(self.rec.shell) if not final and self.rec.text else None
        self.calls = CallGate(self.rec) if not final else None
        self.later = LaterCalls(self.calls) if self.calls else None
        self.guard: ArgsGuard | None = None
        self.stripper = HeadStripper() if self.strip else None
        self.raw = final and self.stripper is None and not spliced
        self.spliced = spliced
        self.released = final  # the round's tool calls and finish go out as they come
        self.early = False  # released before the round's end
        self.held: list[dict[str, Any]] = []
        self.emitted: list[str] = []
        self.shown: Message = {}
        self.text = ""

    def _send(self, chunk: dict[str, Any]) -> list[bytes]:
        if self.prior is not None and isinstance(chunk.get("usage"), dict):
            chunk = {**chunk, "usage": add(self.prior, chunk["usage"])}
        return [event(with_id(chunk, self.ids))] if self.include_usage or not usage_only(chunk) else []

    def feed(self, raw: str, chunk: dict[str, Any]) -> list[bytes]:
        if not self.ids:
            self.ids = {k: chunk[k] for k in ("id", "created") if k in chunk}
        if self.raw:
            self.role_sent = True
            return [event(raw)] if self.include_usage or not usage_only(chunk) else []
        out: list[bytes] = []
        texts, rest = split_chunk(chunk)
        text = texts.pop("content", None)
        if text is not None:
            text = self.stripper.feed(text) if self.stripper else text
            text = self.gate.feed(text) if self.gate else text
        send = {k: v for k, v in texts.items() if v}
        if text:
            send["content"] = text
            self.emitted.append(text)
        if send or not self.role_sent:
            out.append(event(text_chunk({**chunk, **self.ids}, send, role=not self.role_sent)))
            self.role_sent = True
        calls = self.calls
        if rest is not None and calls is not None:
            calls.add(rest)
        if self.gate is not None and self.gate.released:
            self.early = True
        if not self.released and rest is not None and calls is not None and calls.verdict() is False:
            self.released = self.early = True  # decided: what was held goes now, the rest as it comes
            first = calls.order[0]
            if calls.names[first] in SHELL_TOOLS and self.rec.shell:
                found = command_value(calls.args[first])
                assert found is not None  # a shell call is decided only from its command
                self.guard = ArgsGuard(self.rec, calls.names[first], found.start, found.listed)
            held, self.held = self.held, []
            for r in held:
                out += self._relay(r)
        if rest is not None:
            if not self.released:
                self.held.append(rest)
            else:
                out += self._relay(rest)
        return out

    def _relay(self, rest: dict[str, Any]) -> list[bytes]:
        """A released round's chunk: later calls held until decided, the first call guarded."""
        chunks = self.later.relay(rest) if self.later else [rest]
        out: list[bytes] = []
        for c in chunks:
            for g in self.guard.feed(c) if self.guard else [c]:
                out += self._send(g)
        return out

    def end(self, result: Result) -> tuple[list[bytes], tuple[Action, ...] | None]:
        """The round's last events, and the context commands it issued (None: it was the client's
        reply; ``shown`` is then the reply as the client has it). After an internal round,
        ``text`` is what the client was shown of it (with the separator before the next)."""
        out: list[bytes] = []
        tail = self.stripper.end() if self.stripper else ""
        tail = self.gate.feed(tail) if self.gate else tail
        template = {**result.body, **self.ids}
        decided = self.released or (self.gate is not None and self.gate.released and not (self.calls and self.calls.order))
        found = None if decided else context_calls(result.message, self.rec)
        if found is None:
            tail += self.gate.end(drop=False) if self.gate else ""
            if tail:
                self.emitted.append(tail)
                out.append(event(text_chunk(template, {"content": tail})))
            for c in self.guard.finish(template) if self.guard else []:
                out += self._send(c)
            message = self.guard.shown(result.message) if self.guard else result.message
            split = self.guard.answered(result.message) if self.guard else None
            for c in self.later.settle(message, self.deferred, self.sid, split) if self.later else []:
                for g in self.guard.feed(c) if self.guard else [c]:
                    out += self._send(g)
            for rest in self.held:
                out += self._send(rest)
            self.held = []
            self.shown = self.calls.shown(message) if self.calls else message
            self.text = "".join(self.emitted)
            return out, None
        # an internal round: its held part is dropped, the client sees the next round
        if self.gate:
            self.gate.end(drop=True)
        tail += unsent_text(result.message, "".join(self.emitted) + tail, self.strip)  # the text around the command
        shown = "".join(self.emitted) + tail
        if tail:
            out.append(event(text_chunk(template, {"content": tail})))
        sep = SEPARATOR[min(len(SEPARATOR), len(shown) - len(shown.rstrip("\n"))) :] if shown else ""
        if sep:
            shown += sep
            out.append(event(text_chunk(template, {"content": sep})))
        self.held = []
        self.text = shown
        return out, found

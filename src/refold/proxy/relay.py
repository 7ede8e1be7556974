"""What the client of a streamed chat completion is sent of each round, chunk by chunk.

A round that may be internal holds its tool calls (and finish reason) until ``CallGate`` decides
that the first call cannot be a context command, and, for agents without tools, its text from
where a command block may begin (``early.CommandGate``). Once the first call is decided from its
command's first word, its arguments go out as they arrive up to the end of that command's JSON
string; the rest (``"}`` and any further keys) waits until the arguments are whole and the
recognizer has read them as ``commands._call`` will, so that no later key (a second
``"command"``) can turn a relayed call into a context command the client would run. If one does,
the call the client gets is closed after the part it was sent, and that is what it ran.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

from ..context.recognize import SHELL_TOOLS, Recognizer
from ..types import Action, Message
from .commands import context_calls
from .early import CommandGate, call_verdict, command_value
from .stream import HeadStripper, event, split_chunk, text_chunk, usage_only, with_id
from .upstream import Result

_IN_STRING = re.compile(r'(?:[^"\\]|\\.)*', re.DOTALL)
"""A JSON string's body up to its closing quote (or up to a lone backslash at the end)."""

_HEAD = ("id", "object", "created", "model", "system_fingerprint")

SEPARATOR = "\n\n"
"""Streamed between an internal round's relayed text and the next round's (so one blank line)."""


class CallGate:
    """Follows the tool calls of a streamed reply (choice 0) and decides as early as it can whether
    the round may still be an internal context-command round: ``verdict`` is False as soon as the
    reply's first call cannot be a context command (its name is no context tool and, for a shell
    tool, its command's first word is no context command), True when it is or begins like one,
    None before that. A later call of an offered context tool in a round already relayed is
    ``withheld``: the client cannot run a tool it never declared."""

    def __init__(self, rec: Recognizer) -> None:
        self.rec = rec
        self.names: dict[int, str] = {}
        self.args: dict[int, str] = {}
        self.order: list[int] = []
        self.withheld: set[int] = set()
        self._client_index: dict[int, int] = {}
        self._guard: int | None = None  # where the first call's deciding string begins
        self._passed = 0  # bytes of the first call's arguments gone through ``relayed``
        self._tail = ""  # held: from that string's closing quote on
        self._closed = False  # the first call's arguments are whole and were checked
        self.closing: str | None = None  # sent in place of the tail: the call was a context command
        self._maybe = 0  # the verdict was True with arguments this long (0: not)
        self._scan = 0  # the deciding string is scanned up to here for its closing quote
        self._end: int | None = None  # where that quote is

    def add(self, chunk: dict[str, Any]) -> None:
        for choice in chunk.get("choices") or []:
            if (choice.get("index") or 0) != 0:
                continue
            for tc in (choice.get("delta") or {}).get("tool_calls") or []:
                i = int(tc.get("index") or 0)
                if i not in self.names:
                    self.order.append(i)
                    self.names[i], self.args[i] = "", ""
                fn = tc.get("function") or {}
                self.names[i] += fn.get("name") or ""
                self.args[i] += fn.get("arguments") or ""

    def verdict(self) -> bool | None:
        if not self.order:
            return None
        first = self.order[0]
        # a name may come in pieces: it is whole once its arguments or another call have begun
        if not self.args[first] and len(self.order) == 1:
            return None
        name, args = self.names[first], self.args[first]
        if self._maybe and '"' not in args[self._maybe :]:
            return True  # begins like a context command; its string is open: the rest says no more
        v = call_verdict(name, args, self.rec)
        self._maybe = len(args) if v is True else 0
        if v is False and self._guard is None and name in SHELL_TOOLS and self.rec.shell:
            found = command_value(args)
            assert found is not None  # a shell call is decided only from its command
            self._guard = found.start
        return v

    def relayed(self, chunk: dict[str, Any]) -> list[dict[str, Any]]:
        """What a round already relayed sends of ``chunk``: calls of an offered context tool other
        than the first taken out and the rest renumbered, the first call's tail held until its
        arguments are whole (then sent before what follows them)."""
        out = copy.deepcopy(chunk)
        guarding = self._guard is not None and not self._closed
        first: list[dict[str, Any]] = []  # the first call's pieces, sent before its tail
        changed = False
        for choice in out.get("choices") or []:
            delta = choice.get("delta")
            if (choice.get("index") or 0) != 0 or not isinstance(delta, dict) or not delta.get("tool_calls"):
                continue
            kept = []
            for tc in delta["tool_calls"]:
                i = int(tc.get("index") or 0)
                if i not in self._client_index and i not in self.withheld:
                    if i != self.order[0] and self.names.get(i) in self.rec.functions:
                        self.withheld.add(i)
                    else:
                        self._client_index[i] = len(self._client_index)
                if i in self.withheld:
                    changed = True
                    continue
                if self._client_index[i] != i:
                    tc = {**tc, "index": self._client_index[i]}
                    changed = True
                if i == self.order[0] and guarding:
                    changed = True
                    piece = self._guarded(tc)
                    if piece is not None:
                        first.append(piece)
                    continue
                if i == self.order[0] and self.closing is not None:  # after the closing sent in its place
                    changed = True
                    tc = {k: v for k, v in tc.items() if k != "function"}
                    if len(tc) == 1:
                        continue
                kept.append(tc)
            delta["tool_calls"] = kept
            if not kept:
                del delta["tool_calls"]
        if not changed:
            return [chunk]
        head = [_calls_chunk(out, first)] if first else []
        if guarding and self._whole(chunk):
            head += self._close(out)
        return head + _nonempty([out])

    def _guarded(self, tc: dict[str, Any]) -> dict[str, Any] | None:
        """A piece of the first call: the part before its command's closing quote goes on."""
        fn = tc.get("function") or {}
        piece = fn.get("arguments") or ""
        start, self._passed = self._passed, self._passed + len(piece)
        end = self._quote()
        if end is None or start + len(piece) <= end:
            return tc
        keep = max(0, end - start)
        self._tail += piece[keep:]
        if keep == 0 and not {k for k in tc if k not in ("index", "function")} and not fn.get("name"):
            return None
        return {**tc, "function": {**fn, "arguments": piece[:keep]}}

    def _quote(self) -> int | None:
        """The closing quote of the first call's deciding string, once it has arrived."""
        if self._end is None:
            assert self._guard is not None
            args = self.args[self.order[0]]
            self._scan = max(self._scan, self._guard)
            m = _IN_STRING.match(args, self._scan)
            assert m is not None  # the pattern matches the empty string
            self._scan = m.end()
            if self._scan < len(args) and args[self._scan] == '"':
                self._end = self._scan
        return self._end

    def _whole(self, chunk: dict[str, Any]) -> bool:
        """Whether the first call's arguments are whole: all received went through here (a held
        chunk is passed on before later ones) and they parse, or the reply went on."""
        args = self.args[self.order[0]]
        try:
            if self._passed >= len(args) and isinstance(json.loads(args), dict):
                return True
        except ValueError:
            pass
        for choice in chunk.get("choices") or []:
            if (choice.get("index") or 0) != 0:
                continue
            if choice.get("finish_reason"):
                return True
            calls = (choice.get("delta") or {}).get("tool_calls") or []
            if any(int(tc.get("index") or 0) != self.order[0] for tc in calls):
                return True
        return False

    def _close(self, template: dict[str, Any]) -> list[dict[str, Any]]:
        """The first call's held tail, once its whole arguments were read: unchanged when the call
        is no context command, else a closing of the string and object the client was sent."""
        if self._guard is None or self._closed:
            return []
        self._closed = True
        first = self.order[0]
        whole = {"id": "c", "type": "function", "function": {"name": self.names[first], "arguments": self.args[first]}}
        tail, self._tail = self._tail, ""
        if context_calls({"role": "assistant", "content": "", "tool_calls": [whole]}, self.rec) is not None:
            found = command_value(self.args[first])
            tail = self.closing = '"' + ("]" if found is not None and found.listed else "") + "}"
        if not tail:
            return []
        piece = {"index": self._client_index.get(first, first), "function": {"arguments": tail}}
        return [_calls_chunk(template, [piece])]

    def finish(self, template: dict[str, Any]) -> list[dict[str, Any]]:
        """At the round's end: the first call's tail if nothing after it came to release it."""
        return self._close(template)

    def shown(self, message: dict[str, Any]) -> dict[str, Any]:
        """``message`` (the whole reply) as the client was sent it: without the withheld calls,
        the first call closed where it was when it turned out to be a context command."""
        calls = message.get("tool_calls")
        if not isinstance(calls, list):
            return message
        if self.closing is not None and self._guard is not None and calls:
            sent = self.args[self.order[0]]
            end = self._quote()
            end = len(sent) if end is None else end
            c0 = calls[0]
            calls = [{**c0, "function": {**c0["function"], "arguments": sent[:end] + self.closing}}, *calls[1:]]
            message = {**message, "tool_calls": calls}
        if not self.withheld:
            return message
        keep = [c for i, c in zip(sorted(self.names), calls, strict=False) if i not in self.withheld]
        return {**message, "tool_calls": keep} if keep else {k: v for k, v in message.items() if k != "tool_calls"}


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

    def __init__(self, rec: Recognizer, *, strip: bool, include_usage: bool) -> None:
        self.rec = rec
        self.strip = strip
        self.include_usage = include_usage
        self.ids: dict[str, Any] = {}
        self.role_sent = False
        self.begin(final=True, spliced=False)

    def begin(self, *, final: bool, spliced: bool) -> None:
        """A new round; ``final``: it cannot be internal (relayed as it comes); ``spliced``: an
        internal round came before it (its chunks are rewritten under the first id)."""
        self.gate = CommandGate(self.rec.shell) if not final and self.rec.text else None
        self.calls = CallGate(self.rec) if not final else None
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
            held, self.held = self.held, []
            for r in held:
                for c in calls.relayed(r):
                    out += self._send(c)
        if rest is not None:
            if not self.released:
                self.held.append(rest)
            else:
                for c in calls.relayed(rest) if calls is not None else [rest]:
                    out += self._send(c)
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
            for c in self.calls.finish(template) if self.calls is not None else []:
                out += self._send(c)
            for rest in self.held:
                out += self._send(rest)
            self.held = []
            self.shown = self.calls.shown(result.message) if self.calls else result.message
            self.text = "".join(self.emitted)
            return out, None
        # an internal round: its held part is dropped, the client sees the next round
        if self.gate:
            self.gate.end(drop=True)
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

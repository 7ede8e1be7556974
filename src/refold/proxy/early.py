"""Deciding from a partial reply whether it can still be a context command, so a streamed round
is relayed as soon as it cannot be internal.

``call_verdict`` reads a tool call's name and the first word of its command from the arguments
streamed so far; ``CallGate`` holds a chat stream's tool calls until that verdict; ``CommandGate``
releases a text reply up to where a ```bash block may begin, and all of it once the block's first
word is no context command. What ``CommandGate`` releases before the end is a prefix of the text
that holds no command block.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Collection
from typing import Any

from ..context.recognize import SHELL_TOOLS, Recognizer
from ..protocol import SHELL_LANGS

_MARKERS = ("```", "<mswea_bash_command>")
"""Where a command block of a reply may begin (``protocol.bash_block`` reads only these)."""

_WORD = re.compile(r"\w")


def may_be_command(prefix: str, names: Collection[str]) -> bool | None:
    """Whether a shell command that begins with ``prefix`` may be one of the context commands
    ``names`` (``protocol.parse_command``'s rule: a name, then a word boundary): False when it
    cannot be whatever follows, True when it begins like one (only the whole command decides),
    None while too little has arrived to tell."""
    p = prefix.lstrip()
    if not p:
        return None
    maybe = False
    for name in names:
        if p.startswith(name):
            rest = p[len(name) :]
            if not rest:
                maybe = True
            elif not _WORD.match(rest[0]):
                return True
        elif name.startswith(p):
            maybe = True
    return None if maybe else False


_ARGS_HEAD = re.compile(r'\s*\{\s*"(?:command|cmd)"\s*:\s*(\[\s*)?"')
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", '"': '"', "\\": "\\", "/": "/"}


def command_prefix(arguments: str, *, argv: bool = True) -> str | None:
    found = command_value(arguments, argv=argv)
    return None if found is None else found[0]


def command_value(arguments: str, *, argv: bool = True) -> tuple[str, bool] | None:
    """The start of the shell command a tool call's JSON arguments hold so far (``{"command":
    "ls -l`` gives ``ls -l``; an argv list gives its first word, what the command's joined form
    begins with); None when they do not open with the command, or not yet. ``argv=False``: a list
    tells nothing yet (a surface reads ``["bash", "-lc", cmd]`` as ``cmd``). With it, whether the
    command string is closed (then it is the whole command)."""
    m = _ARGS_HEAD.match(arguments)
    if not m or (m.group(1) and not argv):
        return None
    out: list[str] = []
    i, text = m.end(), arguments
    closed = False
    while i < len(text):
        ch = text[i]
        if ch == '"':
            closed = not m.group(1)  # an argv list's first word is not the whole command
            break
        if ch != "\\":
            out.append(ch)
            i += 1
            continue
        if i + 1 >= len(text):
            break
        esc = text[i + 1]
        if esc == "u":
            code = text[i + 2 : i + 6]
            if len(code) < 4:
                break
            try:
                out.append(chr(int(code, 16)))
            except ValueError:
                return None
            i += 6
            continue
        if esc not in _ESCAPES:
            return None
        out.append(_ESCAPES[esc])
        i += 2
    return "".join(out), closed


def call_verdict(name: str, arguments: str, rec: Recognizer, *, argv: bool = True) -> bool | None:
    """Whether a tool call (its whole name, its arguments so far) may be a context command
    ``rec`` answers: False when it cannot be, True when it is or begins like one, None while
    undecided. ``commands._call`` makes the final decision on the whole call."""
    if name in rec.functions:
        return True
    if name not in SHELL_TOOLS or not rec.shell:
        return False
    found = command_value(arguments, argv=argv)
    if found is None:
        return None
    if found[1]:  # the whole command: decided as ``commands._call`` will
        return rec.command("bash", found[0]) is not None
    return may_be_command(found[0], rec.shell)


class CommandGate:
    """Relays a reply's text as it arrives up to where a command block may begin; holds the rest
    until it is clear the block is not a context command (its command's first word says so: then
    everything held and all that follows is relayed, ``released``), or until the round's end says
    whether it was an internal context command.

    Released early only for a first fence that begins a line and is labeled as a shell
    (```bash): ``protocol.bash_block`` takes that block's command, whatever follows."""

    def __init__(self, names: Collection[str] = ()) -> None:
        self._pending = ""  # a tail that may be the start of a marker
        self._held: list[str] = []
        self._line = ""  # the text relayed since the last newline
        self._names = names
        self.holding = False
        self.released = False

    def feed(self, piece: str) -> str:
        if self.released:
            return piece
        if self.holding:
            self._held.append(piece)
            return self._try_release()
        buf = self._pending + piece
        self._pending = ""
        found = [i for i in (buf.find(m) for m in _MARKERS) if i >= 0]
        if found:
            cut = min(found)
            self.holding = True
            self._held.append(buf[cut:])
            self._note(buf[:cut])
            return buf[:cut] + self._try_release()
        for k in range(min(len(buf), max(map(len, _MARKERS)) - 1), 0, -1):
            tail = buf[-k:]
            if any(m.startswith(tail) for m in _MARKERS):
                self._pending = tail
                self._note(buf[:-k])
                return buf[:-k]
        self._note(buf)
        return buf

    def _note(self, relayed: str) -> None:
        nl = relayed.rfind("\n")
        self._line = relayed[nl + 1 :] if nl >= 0 else self._line + relayed

    def _try_release(self) -> str:
        if not self._names or self._line.strip(" \t"):
            return ""
        held = "".join(self._held)
        self._held = [held]
        if not held.startswith("```"):
            return ""
        nl = held.find("\n")
        if nl < 0:
            return ""
        info = held[3:nl]
        if "`" in info or info.strip() not in SHELL_LANGS:
            return ""
        if may_be_command(held[nl + 1 :], self._names) is not False:
            return ""
        self.released = True
        self._held = []
        return held

    def end(self, drop: bool) -> str:
        """What is still held: nothing when the round is dropped."""
        rest = self._pending + "".join(self._held)
        self._pending, self._held = "", []
        return "" if drop else rest


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
        return call_verdict(self.names[first], self.args[first], self.rec)

    def relayed(self, chunk: dict[str, Any]) -> dict[str, Any] | None:
        """``chunk`` as a round already relayed sends it: calls of an offered context tool other
        than the first taken out and the rest renumbered; None when nothing is left of it."""
        out = copy.deepcopy(chunk)
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
                kept.append(tc)
            delta["tool_calls"] = kept
            if not kept:
                del delta["tool_calls"]
                if not delta and not choice.get("finish_reason") and not choice.get("logprobs") and not out.get("usage"):
                    return None
        return out if changed else chunk

    def shown(self, message: dict[str, Any]) -> dict[str, Any]:
        """``message`` (the whole reply) without the withheld calls."""
        calls = message.get("tool_calls")
        if not self.withheld or not isinstance(calls, list):
            return message
        keep = [c for i, c in zip(sorted(self.names), calls, strict=False) if i not in self.withheld]
        return {**message, "tool_calls": keep} if keep else {k: v for k, v in message.items() if k != "tool_calls"}

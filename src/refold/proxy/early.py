"""Deciding from a partial reply whether it can still be a context command, so a streamed round
is relayed as soon as it cannot be internal.

``call_verdict`` reads a tool call's name and the first word of its command from the arguments
streamed so far, an argv list as the surface's reader joins it (``CallGate`` holds a chat
stream's tool calls until it says no, ``held.HeldRound`` a surface's); ``CommandGate`` releases a
text reply up to where a ```bash block may begin, and all of it once the block's first word is no
context command. What ``CommandGate`` releases before the end is a prefix of the text that holds
no command block.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from ..context.recognize import Recognizer
from ..protocol import CD_OPEN, without_cd
from ..reply_command import SHELL_LANGS
from ..shell import SHELL_TOOLS
from .json_string import JsonString
from .stream import call_deltas, set_calls

_MARKERS = ("```", "<mswea_bash_command>")
"""Where a command block of a reply may begin (``reply_command.bash_block`` reads only these)."""

_WORD = re.compile(r"\w")


def may_be_command(prefix: str, names: Collection[str]) -> bool | None:
    """Whether a shell command that begins with ``prefix`` may be one of the context commands
    ``names`` (``protocol.parse_command``'s rule: a name, then a word boundary): False when it
    cannot be whatever follows, True when it begins like one (only the whole command decides),
    None while too little has arrived to tell."""
    p = without_cd(prefix).lstrip()
    if not p or CD_OPEN.fullmatch(p):  # ``cd /testbed &&`` may still lead to one
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
_NEXT = re.compile(r"\s*(,\s*\"|,|\])")  # after an argv word: the next word, or the list's end
_SHELLS = ("bash", "sh", "zsh")
_FLAGS = ("-c", "-lc")

ARGV_JOIN = "join"
"""An argv list read as its words joined by spaces (``commands.call_action``: the chat surface)."""
ARGV_SHELL = "shell"
"""An argv list read as ``surface.canonical_call`` does: ``["bash", "-lc", cmd]`` is ``cmd``,
any other list its ``shlex.join``."""


@dataclass(frozen=True, slots=True)
class Command:
    """The start of the shell command a tool call's JSON arguments hold so far."""

    prefix: str
    """What the command, as the recognizer reads it, begins with."""
    closed: bool
    """The prefix is the whole command."""
    start: int
    """Where the JSON string holding ``prefix`` begins in the arguments (after its quote)."""
    listed: bool = False
    """The command is an argv list."""


def _string(text: str, i: int) -> tuple[str, int | None] | None:
    """A JSON string's value from ``i`` (just after its opening quote): (its text so far, the
    index of its closing quote or None while it is open); None for a bad escape."""
    s = JsonString(i)
    s.add(text)
    if s.bad:
        return None
    return s.value, (s.end if s.closed else None)


def _words(text: str, i: int) -> tuple[list[tuple[str, int, bool]], bool | None] | None:
    """The words of an argv list from ``i`` (just after a word's opening quote): each (text so
    far, where it begins, whether it is closed), and whether the list has ended (True), goes on
    with something that is not a string (None: the readers differ there), or is still open."""
    words: list[tuple[str, int, bool]] = []
    while True:
        read = _string(text, i)
        if read is None:
            return None
        value, close = read
        words.append((value, i, close is not None))
        if close is None:
            return words, False
        m = _NEXT.match(text, close + 1)
        if m is None:
            rest = text[close + 1 :].strip()
            return words, (None if rest and not rest.startswith(",") else False)
        if m.group(1) == "]":
            return words, True
        if m.group(1) == ",":  # a word that is not a string
            return words, (None if text[m.end() :].strip() else False)
        i = m.end()


def command_prefix(arguments: str, *, argv: str | None = ARGV_JOIN) -> str | None:
    found = command_value(arguments, argv=argv)
    return None if found is None else found.prefix


def command_value(arguments: str, *, argv: str | None = ARGV_JOIN) -> Command | None:
    """The start of the shell command a tool call's JSON arguments hold so far (``{"command":
    "ls -l`` gives ``ls -l``), as the surface's reader will take it from the whole arguments;
    None when they do not open with the command, or not yet. An argv list: ``ARGV_JOIN`` gives
    its first word (what the joined form begins with), ``ARGV_SHELL`` the command of ``["bash",
    "-lc", cmd]`` or the first word of any other list, ``None`` nothing."""
    m = _ARGS_HEAD.match(arguments)
    if not m:
        return None
    if not m.group(1):
        read = _string(arguments, m.end())
        if read is None:
            return None
        return Command(read[0], read[1] is not None, m.end())
    if argv is None:
        return None
    found = _words(arguments, m.end())
    if found is None:
        return None
    words, ended = found
    first, start, closed = words[0]
    more = len(words) > 1 or ended is not False
    if argv == ARGV_JOIN or ended is None:
        # joined by spaces (also ``canonical_call``'s fallback for a list with a non-string word)
        return Command(first + " " if closed and more else first, False, start, True)
    if not closed and any(s.startswith(first) for s in _SHELLS):
        return None  # may be ``bash -lc cmd``
    if first not in _SHELLS or not closed:
        # ``shlex.join``: the first word, quoted when it has to be (then it is no command)
        return Command(first + " " if closed and more else first, False, start, True)
    if len(words) < 2:
        return None if ended is False else Command(first + " ", False, start, True)
    flag, _, flag_closed = words[1]
    if not flag_closed:
        return None if any(f.startswith(flag) for f in _FLAGS) else Command(first + " ", False, start, True)
    if flag not in _FLAGS or len(words) > 3 or ended is True and len(words) < 3:
        return Command(first + " ", False, start, True)  # ``shlex.join``: begins with the shell
    if len(words) < 3:
        return None
    cmd, cmd_start, cmd_closed = words[2]
    return Command(cmd, cmd_closed and ended is True, cmd_start, True)


_IN_STRING = re.compile(r'(?:[^"\\]|\\.)*', re.DOTALL)
"""A JSON string's body up to its closing quote (or up to a lone backslash at the end)."""


class CommandEnd:
    """Where the JSON string of a call's command ends in its arguments, read as they stream in
    (``start``: where that string begins, ``Command.start``): the duplicate-key guard of every
    surface sends the arguments up to there as they come and holds the rest until the arguments
    are whole, so that no later key (a second ``"command"``) can make the call the client runs
    differ from the one refold reads."""

    def __init__(self, start: int, listed: bool = False) -> None:
        self.args = ""
        self.start = start
        self.listed = listed
        self.end: int | None = None
        self._scan = start

    def add(self, piece: str) -> int | None:
        """Add an arguments piece; where the command's string closes, once it has."""
        self.args += piece
        if self.end is None and len(self.args) > self.start:
            m = _IN_STRING.match(self.args, self._scan)
            assert m is not None  # the pattern matches the empty string
            self._scan = m.end()
            if self._scan < len(self.args) and self.args[self._scan] == '"':
                self.end = self._scan
        return self.end

    def closing(self) -> str:
        """What closes the arguments right after the command's string (its argv list too)."""
        return '"' + ("]" if self.listed else "") + "}"

    def closed(self) -> str:
        """The arguments as the client runs them when the rest was withheld."""
        assert self.end is not None
        return self.args[: self.end] + self.closing()


def call_verdict(name: str, arguments: str, rec: Recognizer, *, argv: str | None = ARGV_JOIN) -> bool | None:
    """Whether a tool call (its whole name, its arguments so far) may be a context command
    ``rec`` answers: False when it cannot be, True when it is or begins like one, None while
    undecided. ``commands.call_action`` makes the final decision on the whole call."""
    if name in rec.functions:
        return True
    if name not in SHELL_TOOLS or not rec.shell:
        return False
    found = command_value(arguments, argv=argv)
    if found is None:
        return None
    if found.closed:  # the whole command: decided as ``commands.call_action`` will
        return rec.command("bash", found.prefix) is not None
    return may_be_command(found.prefix, rec.shell)


class CommandGate:
    """Relays a reply's text as it arrives up to where a command block may begin; holds the rest
    until it is clear the block is not a context command (its command's first word says so: then
    everything held and all that follows is relayed, ``released``), or until the round's end says
    whether it was an internal context command.

    Released early only for a first fence that begins a line and is labeled as a shell
    (```bash): ``reply_command.bash_block`` takes that block's command, whatever follows."""

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

    def relayed_call(self, i: int) -> bool:
        """Whether the call at upstream index ``i`` goes to the client (``relayed`` numbered it)."""
        return i in self._client_index

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
        for choice, delta in call_deltas(out):
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
            set_calls(delta, kept)
            if not delta and not choice.get("finish_reason") and not choice.get("logprobs") and not out.get("usage"):
                return None  # no calls left (set_calls dropped the key), nor anything else
        return out if changed else chunk

    def shown(self, message: dict[str, Any]) -> dict[str, Any]:
        """``message`` (the whole reply) without the withheld calls."""
        calls = message.get("tool_calls")
        if not self.withheld or not isinstance(calls, list):
            return message
        keep = [c for i, c in zip(sorted(self.names), calls, strict=False) if i not in self.withheld]
        return {**message, "tool_calls": keep} if keep else {k: v for k, v in message.items() if k != "tool_calls"}

"""Holding a streamed shell call's command from a separator that may lead to ``restore``.

A shell call is relayed once its command's first word shows it is no context command (``early``),
but ``ls; restore 3`` is answered by refold too (``Recognizer.compound``): the restore must never
reach the client's shell. ``CompoundHold`` reads the command's JSON string as it streams and says
how much of it may go out: all of it, except from a top-level separator (``;``, ``&&``, ``||``,
``&``, ``|``, a line break) on while the command after it may still be ``restore``. For a common
``cd DIR && python x.py`` that holds only the few characters until ``python`` shows it is none.
When the whole command has a restore after another command, the client gets the call closed
after the part before that separator (which it already has the start of and runs), and refold
answers the rest (``split_restore``) before the next upstream call (``deferred``).
"""

from __future__ import annotations

import re

from ..shell_lex import lex_open
from .early import _ESCAPES

_NAME = "restore"
_WORD = re.compile(r"\w")
_ENDS_WORD = frozenset(" \t\n;&|()<>")
_OPERATORS = frozenset(";&|\n(){}")
"""Characters that may end a simple command (``shell_lex``); text without them starts none."""


class CommandText:
    """A JSON string decoded as its text arrives, with where each character begins in it."""

    def __init__(self, start: int) -> None:
        self.value = ""
        self.closed = False
        self._offsets: list[int] = []
        self._pos = start  # the next character of the JSON text to read

    def add(self, text: str) -> str:
        """Read ``text`` (all of the JSON text so far) on from where the last call stopped; the
        characters decoded by this call (an escape cut in two waits for its end)."""
        i, out = self._pos, []
        while i < len(text) and not self.closed:
            ch = text[i]
            if ch == '"':
                self.closed = True
                break
            if ch != "\\":
                out.append(ch)
                self._offsets.append(i)
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
                except ValueError:  # bad JSON: the arguments are read whole at the end
                    self.closed = True
                    break
                self._offsets.append(i)
                i += 6
                continue
            if esc not in _ESCAPES:
                self.closed = True
                break
            out.append(_ESCAPES[esc])
            self._offsets.append(i)
            i += 2
        self._pos = i
        new = "".join(out)
        self.value += new
        return new

    def offset(self, k: int) -> int:
        """Where the ``k``-th decoded character begins in the JSON text (``k`` = all: the end read)."""
        return self._offsets[k] if k < len(self._offsets) else self._pos


def _may_restore(t: str) -> bool | None:
    """Whether a simple command whose text begins ``t`` (its first word on) may be ``restore``:
    True when its first word is ``restore`` for good, None while it may still be."""
    if not t.startswith(_NAME):
        return None if _NAME.startswith(t) else False
    if len(t) == len(_NAME):
        return None
    c = t[len(_NAME)]
    if c in _ENDS_WORD:
        return True
    return False if _WORD.match(c) else None  # ``restore"x"``, ``restore-1``: the whole decides


def release_limit(text: str) -> tuple[int, bool | None]:
    """How many characters of a command that begins with ``text`` may go to the client: up to
    the first top-level separator after which a restore may follow (``Simple.cut``); and whether
    a restore follows it for sure (True), may (False), or none can (None: all may go out)."""
    simples, tail = lex_open(text)
    seen = False  # a command with words came first: ``_after_another`` reads restores after one
    for n, s in enumerate(simples):
        if not s.words:
            if seen and n == len(simples) - 1:  # ``ls; >f`` may still get its first word
                return s.cut, False
            continue
        if not seen:
            seen = True
            continue
        v = _may_restore(text[s.start :])
        if v is not False:
            return s.cut, v is True
    if tail is not None and seen:
        return tail.cut, False
    return len(text), None


class CompoundHold:
    """How much of a streamed call's command may go out: fed its JSON arguments as they arrive
    (``start``: where the command's string begins in them), ``allowed`` gives how many of their
    characters the client may have."""

    def __init__(self, start: int) -> None:
        self.cmd = CommandText(start)
        self.limit = 0  # characters of the command that may go out
        self.held: bool | None = None  # ``release_limit``'s verdict at ``limit`` (True: final till the end)

    def allowed(self, args: str) -> int:
        new = self.cmd.add(args)
        text = self.cmd.value
        if self.held is not True:
            if self.held is False or not _OPERATORS.isdisjoint(new):
                self.limit, self.held = release_limit(text)
            else:  # no new command began: what went out before still goes on
                self.limit = len(text)
        return self.cmd.offset(self.limit)

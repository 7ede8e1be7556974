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

import hashlib
import re
from typing import NamedTuple

from ..context.recognize import Recognizer, split_restore
from ..shell_lex import lex_open
from .json_string import JsonString

_NAME = "restore"
_WORD = re.compile(r"\w")
_ENDS_WORD = frozenset(" \t\n;&|()<>")
_OPERATORS = re.compile(r"[;&|\n(){}#]|[^\S \t]")
"""Characters that may end a simple command (``shell_lex``: also ``\r``, any space but a blank
and a tab, and a ``#`` inside a word); text without them starts none."""
_COMMENT = re.compile(r"\s#\s+\D[^\n]*$")  # ``protocol.parse_restore_args`` drops it
_SHELL = re.compile(r"[;&|\n]")  # what makes ``parse_restore_args`` answer "Not run"
_BUDGET = 120_000
"""Characters one call's command may be re-read for (~20-150 ms): a command that never becomes whole
(``\\``-continued lines, nested groups, a heredoc body) is re-read from its start at every line
break, quadratic in its length; past this the rest is held to the call's end and the whole
call decides (``split``), which is always safe."""


def _may_restore(text: str, at: int) -> bool | None:
    """Whether a simple command whose first word begins at ``at`` may be ``restore``: True when
    its first word is ``restore`` for good, None while it may still be."""
    if not text.startswith(_NAME, at):
        return None if _NAME.startswith(text[at : at + len(_NAME)]) and len(text) - at < len(_NAME) else False
    if len(text) - at == len(_NAME):
        return None
    c = text[at + len(_NAME)]
    if c in _ENDS_WORD:
        return True
    return False if _WORD.match(c) else None  # ``restore"x"``, ``restore-1``: the whole decides


class Limit(NamedTuple):
    """``release_limit``'s answer."""

    limit: int
    """How many characters of the command may go out."""
    held: bool | None
    """A restore follows ``limit`` for sure (True), may (False), or none can (None: all may go out)."""
    resume: tuple[int, int, bool]
    """Where a longer text may be read on from (``lex_open``'s ``start`` and ``cut``; and
    whether a command came before it): all before it is decided for good."""
    until: str
    """The text ends inside a quote, a substitution or a heredoc body: only one of these
    characters may end it (``lex_open``)."""
    delims: tuple[str, ...] = ()
    """The delimiters of the heredoc bodies the text ends inside."""


def release_limit(text: str, resume: tuple[int, int, bool] = (0, 0, False)) -> Limit:
    """How many characters of a command that begins with ``text`` may go to the client: up to
    the first top-level separator after which a restore may follow (``Simple.cut``)."""
    start, cut, seen = resume
    delims: list[str] = []
    simples, tail, until = lex_open(text, start, cut, partial=True, delims=delims)
    ends = tuple(delims)
    for n, s in enumerate(simples):
        if s.whole and s.clean and s.begin <= len(text):
            resume = s.begin, s.cut, seen
        if not s.words:
            if seen and n == len(simples) - 1:  # ``ls; >f`` may still get its first word
                return Limit(s.cut, False, resume, until, ends)
            continue
        if not seen:  # ``_after_another`` reads restores after a command
            seen = True
            continue
        v = _may_restore(text, s.start)
        if v is not False:
            return Limit(s.cut, v is True, resume, until, ends)
    if tail is not None and seen:
        if tail.whole and tail.clean:
            resume = tail.begin, tail.cut, seen
        return Limit(tail.cut, False, resume, until, ends)
    return Limit(len(text), None, resume, until, ends)


class CompoundHold:
    """How much of a streamed call's command may go out: fed its JSON arguments as they arrive
    (``start``: where the command's string begins in them), ``allowed`` gives how many of their
    characters the client may have. Each piece is read from the last point all before which is
    decided, and only when the piece may change what is read: a long script or quoted program costs
    time about linear in its length."""

    def __init__(self, start: int) -> None:
        self.cmd = JsonString(start)
        self.limit = 0  # characters of the command that may go out
        self.held: bool | None = None  # ``release_limit``'s verdict at ``limit`` (True: final till the end)
        self._resume: tuple[int, int, bool] = (0, 0, False)
        self._until = ""
        self._work = 0  # characters re-read so far (``_BUDGET``)
        self.frozen = False  # the budget ran out: nothing more goes out before the call is whole
        self._ends: list[re.Pattern[str]] = []  # lines that end the heredoc bodies the text is in

    def allowed(self, args: str) -> int:
        new = self.cmd.add(args)
        text = self.cmd.value
        if self.held is not True and not self.frozen:
            # what may start a command, or end the quote, substitution or heredoc body the text is in
            changes = not frozenset(self._until).isdisjoint(new) if self._until else bool(_OPERATORS.search(new))
            if self.held is False or changes and self._may_end_body(text, len(new)):
                self._work += len(text) - self._resume[0]
                if self._work > _BUDGET:  # ``limit`` stays: the client may have had that much already
                    self.frozen = True
                else:
                    self.limit, self.held, self._resume, self._until, delims = release_limit(text, self._resume)
                    self._ends = [re.compile(r"[ \t]*" + re.escape(d) + r"[ \t\r]*") for d in delims if d]
            else:  # no new command began: what went out before still goes on
                self.limit = len(text)
        return self.cmd.offset(self.limit)

    def _may_end_body(self, text: str, added: int) -> bool:
        """Whether the last ``added`` characters may end the heredoc body the text is in (always
        outside one): only a line that is one of its delimiters does (``shell_lex._heredoc``'s
        rule). Without this a heredoc body was re-read from its start at every line (60 KB: 2 s
        of CPU)."""
        if self._until != "\n":
            return True
        at = len(text) - added
        begin = text.rfind("\n", 0, at) + 1
        end = text.find("\n", at)
        while end >= 0:
            line = text[begin:end]
            if any(e.fullmatch(line) for e in self._ends):
                return True
            begin, end = end + 1, text.find("\n", end + 1)
        return False

    def split(self, command: str, rec: Recognizer, sent: int) -> tuple[int | None, str | None]:
        """For the whole call's command (as the session reads it; ``sent``: characters of the
        arguments the client has): where the arguments are closed for the client, and the command
        refold answers in a call of its own. ``ls; restore 3``: after ``ls``, and ``restore 3``.
        A restore the client's shell runs anyway (inside a loop, an ``if`` or a group; one sent
        already): no cut, and a ``restore`` whose answer says it was not run and how to issue it."""
        found = rec.command("bash", command) if command == self.cmd.value else None
        if found is None or found.name != "restore":
            return None, None
        parts = split_restore(command)
        if parts is not None and self.cmd.offset(len(parts[0])) >= sent:
            return self.cmd.offset(len(parts[0])), parts[1]
        arg = _COMMENT.sub("", found.argument)
        # ``time restore 3``: its shell ran it, so the answer must say "Not run" even with no other
        # command to name (a restore answered here would contradict what the client saw)
        return None, f"restore {arg}" if _SHELL.search(arg) else f"restore {arg.strip()};"


_RUN = re.compile(r"[A-Za-z0-9]+")
_HEX = frozenset("0123456789abcdef")
_CLASSES = ("0123456789", "abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ")


def derived_id(cid: str, taken: frozenset[str] = frozenset()) -> str:
    """The id of the call refold answers of a split call ``cid``, in ``cid``'s format: its last
    run of letters and digits replaced by one of the same length (at least 8 after a prefix such as
    ``call_``) from the same alphabet (hex, or the classes it uses), drawn from a hash of ``cid``.
    Mistral accepts only 9 characters of ``[a-zA-Z0-9]``: a suffix (``c1_restore``) was refused
    when the history went back upstream. Deterministic, so a retry sends the same id."""
    runs = list(_RUN.finditer(cid))
    if not runs:
        return cid + "_restore"
    run = runs[-1]
    word = run.group(0)
    alphabet = "".join(sorted(_HEX)) if set(word) <= _HEX and not word.isdigit() else "".join(
        c for c in _CLASSES if not set(word).isdisjoint(c)
    )
    size = len(word) if run.start() == 0 and run.end() == len(cid) else max(len(word), 8)
    for salt in range(1000):
        digest = int.from_bytes(hashlib.shake_256(f"{cid}\0restore\0{salt}".encode()).digest(size + 8), "big")
        out = []
        for _ in range(size):
            digest, k = divmod(digest, len(alphabet))
            out.append(alphabet[k])
        made = cid[: run.start()] + "".join(out) + cid[run.end() :]
        if made != cid and made not in taken:
            return made
    return cid + "_restore"  # a one-character id whose every other value is taken

"""How a shell splits a command line: simple commands, their words, redirections and heredocs.

One linear pass over the text (quotes, escapes, operators, ``$(...)``, backticks, heredocs), so
``refold.shell`` can tell data (``a > b`` inside ``python -c "..."`` or a heredoc body) from a
redirect. It never raises: unbalanced quotes run to the end of the text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["Simple", "lex", "lex_open"]


@dataclass(slots=True)
class Simple:
    """One simple command: its words (quotes removed), redirections and heredoc bodies."""

    words: list[str] = field(default_factory=list)
    raw: list[str] = field(default_factory=list)  # the words as written (quotes kept)
    out: list[str] = field(default_factory=list)  # > >> &> >| targets
    inp: list[str] = field(default_factory=list)  # < targets
    bodies: list[str] = field(default_factory=list)  # heredoc and here-string data
    subs: list[str] = field(default_factory=list)  # $(...) and `...` command substitutions
    piped: bool = False  # its stdin is the previous command's output (after ``|`` or ``|&``)
    start: int = -1  # where its first word begins in the text
    cut: int = 0  # where the text before it is whole: the operator (or line break) that ended the one before
    clean: bool = True  # at ``cut`` no group is open and no heredoc body of an earlier command is still to come
    whole: bool = False  # opened by ``;``, ``&``, a line break or a group's end: the text is whole before it
    begin: int = 0  # where the lexer stood when it opened (after the operator; after heredoc bodies)

    def __init__(self, piped: bool = False, cut: int = 0, clean: bool = True, whole: bool = False, begin: int = 0) -> None:
        self.words, self.raw, self.out, self.inp, self.bodies, self.subs = [], [], [], [], [], []  # no factory calls
        self.piped, self.start, self.cut, self.clean, self.whole, self.begin = piped, -1, cut, clean, whole, begin


_PLAIN = re.compile(r"[^\s'\"\\$`;&|()<>{}#]++")
_DQ_BODY = re.compile(r'(?:[^"\\]++|\\.)*+', re.DOTALL)
_REDIR = re.compile(r"(\d*)(>>|>\||>&|&>>|&>|<<<|<<-|<<|<>|<&|>|<)")
_SPACES = re.compile(r"[ \t]++")
_ENDS = frozenset({";", ";;", "&", "\n", ")", "}"})
"""Operators after which the text before is a whole command line (not ``&&``, ``|``, ``(``)."""


def lex(text: str) -> list[Simple]:
    """Simple commands of a command line, in linear time (never raises; unbalanced quotes run to the end)."""
    return lex_open(text)[0]


def lex_open(
    text: str, start: int = 0, cut: int = 0, *, partial: bool = False, delims: list[str] | None = None
) -> tuple[list[Simple], Simple | None, str]:
    """``lex``, the command the text ends in when nothing of it has come yet (``ls;``, ``ls && ``,
    or no command at all), else None;
    and, when the text ends inside a quote, a substitution or a heredoc body, the characters of
    which only one may end it (``'``, ``"``, ``)``, a backtick, a line break), else "".
    ``start``: lex from there, the ``begin`` of a command that is ``whole`` and ``clean`` (the
    lexer's state there is a fresh one), with that command's ``cut``. ``partial``: more text
    may follow (a heredoc delimiter that ends the text may be the start of a longer line).
    ``delims``: gets the delimiters of the heredoc bodies the text ends inside."""
    out: list[Simple] = []
    cur = Simple(cut=cut, whole=start > 0, begin=start)
    word: list[str] = []
    raw_start = -1
    pending: list[tuple[Simple, str, bool]] = []  # heredocs whose bodies start at the next line
    expect: tuple[str, bool] | None = None  # the next word is a redirect target / heredoc delimiter
    n = len(text)
    until = ""
    i = start

    def end_word(at: int) -> None:
        nonlocal word, raw_start, expect
        if raw_start < 0:
            return
        value, raw = "".join(word), text[raw_start:at]
        word, raw_start = [], -1
        if expect is not None:
            op, _ = expect
            expect = None
            if op in ("<<", "<<-"):
                pending.append((cur, value, op == "<<-"))
            elif op == "<<<":
                cur.bodies.append(value)
            elif op in (">&", "<&") and (value.isdigit() or value == "-"):
                pass  # fd duplication, no file
            elif op.startswith("<") and op != "<>":
                cur.inp.append(value)
            else:
                cur.out.append(value)
            return
        if not cur.words:
            cur.start = at - len(raw)
        cur.words.append(value)
        cur.raw.append(raw)

    depth = 0  # ( and { groups open

    def end_command(at: int, op: str = "") -> None:
        nonlocal cur, depth
        piped = op in ("|", "|&")
        if op in (")", "}"):
            depth, at = max(0, depth - 1), at + 1  # whole only after the group's end
        whole = op in _ENDS and not (op in ("&", ";") and at + 1 >= n)  # a last '&' or ';' may be half of '&&' or ';;'
        if cur.words or cur.out or cur.inp or cur.bodies or cur.subs:
            out.append(cur)
            cut, clean = at, not pending and depth == 0
        elif cur.whole and whole:  # ``ls;`` then a comment line: whole here too
            cut, clean = at, not pending and depth == 0
        else:  # nothing ended here: the text is whole where the command before ended
            cut, clean, whole = cur.cut, cur.clean and not pending, False
            if cur.piped:  # 'a | (b)', 'a |<newline>b': the pipe feeds the next command
                piped = True
        if op in ("(", "{"):
            depth += 1
        cur = Simple(piped, cut, clean, whole, at + len(op) if op not in (")", "}") else at)

    while i < n:
        c = text[i]
        m = _PLAIN.match(text, i)
        if m:
            if raw_start < 0:
                raw_start = i
            chunk = m.group(0)
            r = _REDIR.match(text, m.end()) if chunk.isdigit() and raw_start == i else None
            if r and r.group(1) == "" and r.start() == m.end():  # '2>' : the digits are an fd
                i = m.end()
                raw_start = -1
                continue
            word.append(chunk)
            i = m.end()
            continue
        if c in " \t":
            end_word(i)
            i = _SPACES.match(text, i).end()  # type: ignore[union-attr]
            continue
        if c == "\n":
            end_word(i)
            bodies = bool(pending)
            ended = bodies and bool(cur.words or cur.out or cur.inp or cur.bodies or cur.subs)
            end_command(i, "\n")
            i += 1
            for owner, delim, strip_tabs in pending:  # heredoc bodies follow, in order
                i = _heredoc(text, i, delim, strip_tabs, owner, partial)
                if i > n + 1:  # (n + 1: a delimiter that ends the text)
                    until = "\n"
                    if delims is not None:
                        delims.append(delim)
            pending.clear()
            if bodies:  # the next command opens after them, whole only when a command ended here
                cur.begin = i
                if ended:
                    cur.cut, cur.clean = min(i, n), depth == 0
            continue
        if c == "'":
            if raw_start < 0:
                raw_start = i
            j = text.find("'", i + 1)
            j, until = (n, "'") if j < 0 else (j, until)
            word.append(text[i + 1 : j])
            i = j + 1
            continue
        if c == '"':
            if raw_start < 0:
                raw_start = i
            m = _DQ_BODY.match(text, i + 1)
            j = m.end() if m else i + 1
            until = '"' if j >= n else until
            word.append(re.sub(r"\\([\"\\$`])", r"\1", text[i + 1 : j]))
            i = j + 1
            continue
        if c == "\\":
            if raw_start < 0:
                raw_start = i
            if text.startswith("\n", i + 1):
                i += 2  # line continuation
                continue
            word.append(text[i + 1 : i + 2])
            i += 2
            continue
        if c == "`" or text.startswith("$(", i):
            if raw_start < 0:
                raw_start = i
            j = _substitution_end(text, i)
            if j >= n and (j - 1 <= i or text[j - 1] != ("`" if c == "`" else ")")):
                until = "`" if c == "`" else ")"
            word.append(text[i:j])
            cur.subs.append(text[i + 1 : j - 1] if c == "`" else text[i + 2 : j - 1])
            i = j
            continue
        if c == "$":
            if raw_start < 0:
                raw_start = i
            if text.startswith("$'", i):
                m = re.compile(r"(?:[^'\\]++|\\.)*+", re.DOTALL).match(text, i + 2)
                j = m.end() if m else i + 2
                until = "'" if j >= n else until
                word.append(text[i + 2 : j])
                i = j + 1
                continue
            word.append("$")
            i += 1
            continue
        if c == "#" and raw_start < 0:
            j = text.find("\n", i)
            if j < 0 and cur.whole and not (cur.words or cur.out or cur.inp or cur.bodies or cur.subs):
                cur.cut = n  # a comment line that has not ended: whole with all of it
            i = n if j < 0 else j
            continue
        r = _REDIR.match(text, i)
        if r:
            end_word(i)
            op = r.group(2)
            if op == "&>>":
                op = ">>"
            expect = (op, True)
            i = r.end()
            continue
        # operators and grouping: ; & | && || |& ( ) { }
        end_word(i)
        op = text[i : i + 2] if text.startswith(("&&", "||", "|&", ";;"), i) else c
        end_command(i, op)
        i += len(op)
    end_word(n)
    empty = not (cur.words or cur.out or cur.inp or cur.bodies or cur.subs)
    tail = cur if empty and until != "\n" else None
    end_command(n)
    for owner, _delim, _ in pending:  # a heredoc without its body line: nothing more to read
        owner.bodies.append("")
    return out, tail, until


def _heredoc(text: str, i: int, delim: str, strip_tabs: bool, owner: Simple, partial: bool = False) -> int:
    """Read a heredoc body starting at ``i``; returns the position after its delimiter line."""
    end_re = re.compile(r"^" + (r"\t*" if strip_tabs else r"[ \t]*") + re.escape(delim) + r"[ \t\r]*$", re.MULTILINE)
    m = end_re.search(text, i) if delim else None
    if m is None or partial and m.end() >= len(text):  # bash reads to the end and warns
        owner.bodies.append(text[i:])
        return len(text) + 2  # past the end: no delimiter yet
    owner.bodies.append(text[i : m.start()])
    return m.end() + 1


def _substitution_end(text: str, i: int) -> int:
    """End of a ``$(...)`` or backtick substitution starting at ``i`` (quotes inside respected)."""
    if text[i] == "`":
        j = text.find("`", i + 1)
        return len(text) if j < 0 else j + 1
    depth, j, n = 0, i + 1, len(text)
    while j < n:
        c = text[j]
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return j + 1
        elif c == "'":
            k = text.find("'", j + 1)
            j = n if k < 0 else k
        elif c == '"':
            m = _DQ_BODY.match(text, j + 1)
            j = m.end() if m else j
        elif c == "\\":
            j += 1
        j += 1
    return n

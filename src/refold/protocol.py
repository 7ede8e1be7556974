"""The PROGRESS/STALE protocol and the context commands the agent can issue: reading them, in
linear time. The protocol tokens (``PROGRESS:``, ``STALE:``, ``[step N]``, ``[context-manager]``,
``restore <step>``) are the interface; the prompt texts that teach them are in ``refold.prompts``,
and where a text reply's shell command sits is ``refold.reply_command``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

CM = "[context-manager]"

# Every parser here runs in time linear in its input (a reply may be megabytes of model output):
# patterns have no two adjacent quantifiers that can share characters, and anything that
# would need backtracking is a small hand-written scan instead.
_HEAD_LINES = 4  # the two lines must open the reply; we allow a little slack before them
_MAX_TOKENS = 512  # numbers and separators of a step list read: a real one has a few, a runaway one is cut
_MARKUP = re.compile(r"^[\s>#*_`\-+]*(?:\d{1,2}[.)]\s+)?[\s>#*_`\-+]*")  # bullets, headings, "1. "
_KEY = re.compile(r"(PROGRESS|STALE)\s*+[*_`]*+\s*+[:：\-–](?:\s*+[*_`]++(?=\s|$))?\s*+", re.IGNORECASE)
_CLOSE = re.compile(r"\s*([*_`]+)$")  # _KEY takes '**PROGRESS:** x' markup, not a value's own backtick
_DASHES = "-\u2010\u2011\u2012\u2013\u2014\u2015\u2212"  # hyphen, en/em dashes, minus sign
_DASH_CLASS = "\\" + _DASHES  # inside [...]: the ASCII hyphen escaped, so it is no range
# '4, but not 2'. Searched in lowercased text, each branch opening with a literal, so the regex
# engine skips ahead by first character (a leading \b or IGNORECASE makes it ~50x slower).
_NEGATION = re.compile(
    "|".join(rf"{w}(?<!\w{w})\b" for w in ("except", "but", "not", "keeping", "keep", "excluding", "still"))
)
_THINK_OPEN = re.compile(r"\s*+<(think|thinking|reasoning)>", re.IGNORECASE)
_MAX_DIGITS = 9  # longer numbers are no step (and int() of thousands of digits raises)
_NONE_WORDS = {"", "-", "none", "n/a", "na", "nothing", "no", "nil", "[]", "—", "–"}
_MAX_RANGE = 64
# The tokens of a step list, each possessive: a number with its decimal parts and any letters
# glued to it (2.1, a ledger id 7.2 and 1e3 are no steps), or a range separator. What lies
# between tokens only matters as "blank or not". The pattern opens with one character class so
# the engine skips to candidates in C; the word-boundary checks happen in parse_step_list.
_TOKEN = re.compile(
    r"[0-9.tT" + _DASH_CLASS + r"](?:"
    r"(?<=[0-9])(?P<num>[0-9]*+(?:\.[0-9]++)*+)(?P<glued>[eE][+\-][0-9]++|\w++)?"
    r"|(?<=\.)\.|(?<=[" + _DASH_CLASS + r"])"
    r"|(?<=[tT])(?:[oO]|[hH][rR](?:[oO][uU][gG][hH]|[uU]))(?!\w))"
)


@dataclass(frozen=True, slots=True)
class Head:
    progress: str | None
    stale: tuple[int, ...]
    has_protocol: bool  # both lines present at the head of the reply


def _head_lines(reply: str) -> Iterator[str]:
    """The reply's lines from the top, lazily (the head is a few lines of a long reply)."""
    pos, n = 0, len(reply)
    while pos < n:
        end = reply.find("\n", pos)
        if end < 0:
            end = n
        yield reply[pos:end].rstrip("\r")
        pos = end + 1


def _skip_think(reply: str) -> str:
    """Drop one opening ``<think>...</think>`` block (reasoning models open with one)."""
    m = _THINK_OPEN.match(reply)
    if not m:
        return reply
    close = reply.lower().find(f"</{m.group(1).lower()}>", m.end())
    return reply if close < 0 else reply[close + len(m.group(1)) + 3 :]


def _unwrapped(value: str) -> str:
    """``value`` without the markup of a wrapped line ('**PROGRESS: x**', '`run tests`'): an unpaired
    trailing run of ``*_``` or one pair around it all; '`Foo` has `x.py`' keeps its backticks."""
    if (m := _CLOSE.search(value)) is None or (n := value.count(run := m.group(1))) % 2:
        return value if m is None else value[: m.start()]
    return value[len(run) : m.start()].strip() if n == 2 and value.startswith(run) else value


def head_line(line: str) -> tuple[str, str] | None:
    """``("PROGRESS" | "STALE", value)`` when ``line`` reads as a head line (after any bullet,
    heading or list-number markup), else None; the value is stripped but keeps its own markup."""
    text = _MARKUP.sub("", line.strip(), count=1)
    m = _KEY.match(text)
    return (m.group(1).upper(), text[m.end() :].strip()) if m else None


def parse_head(reply: str) -> Head:
    """Read PROGRESS and STALE from the first lines of a reply, and only from there."""
    progress: str | None = None
    stale: tuple[int, ...] | None = None
    seen = 0
    for raw in _head_lines(_skip_think(reply)):
        if not raw.strip():
            continue
        if raw.lstrip().startswith("```"):
            break  # a code block ends the head: numbers inside commands are not marks
        seen += 1
        if seen > _HEAD_LINES:
            break
        if (found := head_line(raw)) is None:
            continue
        key, value = found[0], _unwrapped(found[1])
        if key == "PROGRESS" and progress is None:
            progress = value
        elif key == "STALE" and stale is None:
            stale = parse_step_list(value)
    return Head(progress, stale or (), progress is not None and stale is not None)


def _drop_asides(text: str) -> str:
    """Remove '(...)' asides like '(lines 1-100)': each '(' up to the first ')' after it."""
    out: list[str] = []
    pos = 0
    close = -1  # position of the next ')' at or after pos, -1 when there is none
    while True:
        open_ = text.find("(", pos)
        if open_ < 0:
            break
        if close < open_ and close != -2:
            close = text.find(")", open_)
            if close < 0:
                close = -2  # no ')' anywhere after: no later '(' closes either
        if close == -2:
            break
        out.append(text[pos:open_])
        out.append(" ")
        pos = close + 1
    out.append(text[pos:])
    return "".join(out)


def parse_step_list(text: str) -> tuple[int, ...]:
    """'3, 4' / '3-5' / '[step 3] and 7' / '-' / 'none (all needed)' -> sorted step numbers.

    Only whole, non-negative integers are steps: '2.1', a ledger id '7.2', '-1' and '1e3' name none.
    Linear time; only the first ``_MAX_TOKENS`` numbers and separators are read.
    """
    text = _drop_asides(text)
    m = _NEGATION.search(text.lower())  # str.lower keeps offsets for the ASCII words searched
    if m:  # '4, but not 2': only what comes before is stale
        text = text[: m.start()]
    if text.strip().lower().rstrip(".") in _NONE_WORDS:
        return ()
    # (kind, value, blank before, touching): kind "n" a step number, "x" a number that is no
    # step, "-" a range separator; "blank before" says only whitespace separates it from the
    # previous token, "touching" that nothing does.
    tokens: list[tuple[str, str, bool, bool]] = []
    end = 0
    for tok in _TOKEN.finditer(text):
        if len(tokens) >= _MAX_TOKENS:
            break
        start = tok.start()
        before = text[start - 1] if start else " "
        glued_left = before.isalnum() or before == "_"
        if tok.group(0)[0] in "tT" and glued_left:
            continue  # 'into', 'auto': not the word 'to'
        touching = start == end
        blank = touching or text[end:start].isspace()
        end = tok.end()
        if tok.group("num") is None:
            # a dash right after a word is a hyphen ('step-3'), not a minus sign
            hyphen = before.isalpha() or before == "_"
            tokens.append(("-", ".." if hyphen else tok.group(0), blank, touching))
        else:
            value = tok.group(0)
            bad = (
                tok.group("glued") is not None
                or "." in value
                or len(value) > _MAX_DIGITS
                or glued_left  # py3, v2
                or (before == "." and not text.startswith("..", start - 2))  # .5
            )
            tokens.append(("x" if bad else "n", value, blank, touching))
    found: set[int] = set()
    i, n = 0, len(tokens)
    while i < n:
        kind, value, _, touching = tokens[i]
        is_range = i + 2 < n and kind in "nx" and tokens[i + 1][0] == "-" and tokens[i + 2][0] in "nx"
        if is_range and tokens[i + 1][2] and tokens[i + 2][2]:
            if kind == "n" and tokens[i + 2][0] == "n":
                lo, hi = int(value), int(tokens[i + 2][1])
                if lo <= hi and hi - lo <= _MAX_RANGE:
                    found.update(range(lo, hi + 1))
            i += 3  # a silly or non-integer range names no step at all
            continue
        if kind == "n" and not (touching and i > 0 and tokens[i - 1][0] == "-" and tokens[i - 1][1] != ".."):
            found.add(int(value))  # '-1' is a negative number, no step
        i += 1
    return tuple(sorted(found))


# ---- context commands -------------------------------------------------------------------

COMMAND_NAMES = ("restore", "begin_span", "fold_span", "fold_steps", "fold", "drop", "expand", "search_ledger", "pin", "unpin")
_COMMAND_RE = re.compile(r"^\s*(" + "|".join(COMMAND_NAMES) + r")\b(.*)$", re.DOTALL)


@dataclass(frozen=True, slots=True)
class ContextCommand:
    name: str
    argument: str


# ``cd /testbed && restore 3``: agents that run each command in a fresh shell open most of them
# with a cd, which changes nothing for a context command
_CD_WORD = r"(?:'[^'\n]{0,4096}'|\"[^\"\n]{0,4096}\"|[^\s;&|'\"`$()<>]{1,4096})"  # no longer than PATH_MAX
CD_PREFIX = re.compile(r"\s*cd(?:[ \t]+" + _CD_WORD + r")?[ \t]*(?:&&|;)[ \t]*")
CD_OPEN = re.compile(r"\s*c(?:d(?:[ \t]+(?:" + _CD_WORD + r"|'[^'\n]{0,4096}|\"[^\"\n]{0,4096})?)?[ \t]*&?)?")
"""What may still become a ``CD_PREFIX`` as more of the command arrives (``proxy.early``)."""


MAX_CDS = 8
"""Leading ``cd DIR &&`` prefixes read past at most: a reply streaming a long run of them (a model
repeating itself) was re-read at every chunk while the proxy's early relay waited for its end."""


def without_cd(command: str) -> str:
    """``command`` after its leading ``cd DIR &&`` (or ``;``) prefixes, ``MAX_CDS`` at most."""
    at = 0
    for _ in range(MAX_CDS):
        if not (m := CD_PREFIX.match(command, at)):
            break
        at = m.end()
    return command[at:]


def parse_command(command: str) -> ContextCommand | None:
    """A context command when the whole action is one (``restore 3``, also after ``cd DIR &&``),
    else None."""
    m = _COMMAND_RE.match(without_cd(command).strip())
    if not m:
        return None
    arg = m.group(2).strip()
    if arg.startswith("(") and arg.endswith(")"):
        arg = arg[1:-1].strip()  # fold_span("...") written as a call
    if len(arg) >= 2 and arg[0] == arg[-1] and arg[0] in "'\"":
        arg = arg[1:-1]
    return ContextCommand(m.group(1), arg)


_RESTORE_NOISE = re.compile(r"(?i)\[?\bsteps?\b\]?|\[|\]|(?<!\S)#")  # '[step 3]', '[3]', '#3'
_RESTORE_PART = re.compile(r"r?(\d{1,9})(?:\.\d{1,4})?")  # an output (7.2) or a reply (r7): of step 7
_RESTORE_DASH = re.compile(r"(?<=\d)\s*+(?:[" + _DASHES + r"]|\.\.)\s*+(?=\d)")  # '3–5', '3 - 5', '3..5'
_RESTORE_COMMENT = re.compile(r"\s#\s+\D[^\n]*$")
_RESTORE_REDIRECT = re.compile(r"(?:\s+\d*(?:>>?|<)&?[^\s;&|<>`]*)+\s*$")
_RESTORE_SHELL = re.compile(r"\s\d+[<>]|[;&|<>`\n]|\$\(")  # what would make the line more than one command
_RESTORE_WORD = re.compile(r"(\d{1,9})(?:-(\d{1,9}))?")  # _MAX_DIGITS
_MAX_RESTORE_WORDS = 100  # steps or ranges in one restore: more is no real request
_MAX_RESTORE_CHARS = 2000  # and no real request is longer (the regexes cost ~0.3 us a character)


def parse_restore_args(argument: str, latest: int) -> tuple[list[int], str | None]:
    """Steps named by ``restore`` arguments, or an error sentence for the agent."""
    if len(argument) > _MAX_RESTORE_CHARS:  # the cut word gets a '…', so it is reported, never misread
        argument = argument[:_MAX_RESTORE_CHARS] + "…"
    argument = _RESTORE_COMMENT.sub("", argument)  # `restore 2  # the config` is `restore 2`
    argument = _RESTORE_REDIRECT.sub("", argument)  # and so is `restore 2 2>&1`
    shell = _RESTORE_SHELL.search(argument)
    if shell:  # `restore 2; ls`: refold answers restore, and no shell sees the rest
        rest = " ".join(argument[shell.start() :].split())
        rest = rest if len(rest) <= 60 else rest[:59] + "…"
        named = argument[: shell.start()].strip() or "<step>"  # `ls; restore` named no step
        then = rest.lstrip(";&| ")  # `restore 2;`: nothing else to name
        return [], (
            f"{CM} Not run: `restore` is answered by refold, not by your shell, so it must be the whole "
            f"command. Run `restore {named}` alone"
            + (f", then `{then}` in a command of its own." if then else ", as a command of its own.")
        )
    text = _RESTORE_NOISE.sub(" ", argument).replace(",", " ")
    text = _RESTORE_DASH.sub("-", text)
    words = text.split(None, _MAX_RESTORE_WORDS)
    if not words:
        return [], f"{CM} restore needs a step number, e.g. `restore 3`, `restore 3 5` or `restore 3-5`."
    if len(words) > _MAX_RESTORE_WORDS:
        return [], f"{CM} restore: name at most {_MAX_RESTORE_WORDS} steps or ranges at once, e.g. `restore 3-5`."
    steps: list[int] = []
    for word in words:
        m = _RESTORE_WORD.fullmatch(word)
        if not m:
            shown = word if len(word) <= 40 else word[:39] + "…"
            part = _RESTORE_PART.fullmatch(word)
            if part and 1 <= int(part.group(1)) <= latest:  # a ledger id: restore brings back its whole step
                return [], f"{CM} restore: '{shown}' is not a step number; restore takes whole steps: `restore {part.group(1)}`."
            return [], f"{CM} restore: '{shown}' is not a step number; use e.g. `restore 3` or `restore 3-5`."
        lo = int(m.group(1))
        hi = int(m.group(2) or lo)
        if hi < lo or hi - lo > _MAX_RANGE:
            shown = word if len(word) <= 40 else word[:39] + "…"
            return [], f"{CM} restore: '{shown}' is not a valid range."
        steps.extend(range(lo, hi + 1))
    bad = [s for s in steps if s < 1 or s > latest]
    if bad:
        return [], (
            f"{CM} restore: there is no step {bad[0]} yet; steps 1-{latest} can be restored."
            if latest
            else f"{CM} restore: there are no earlier steps to restore yet."
        )
    return list(dict.fromkeys(steps)), None

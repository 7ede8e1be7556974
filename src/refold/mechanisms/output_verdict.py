"""Which lines of a command's output say how it ended: mini's ``<returncode>``, exit-status lines,
error and traceback heads, a test runner's summary (and a test run's last lines).

Deduplication never cuts these lines and never stubs an output as "the same as" one whose
verdict differs, so a condensed output still tells the agent whether its command worked.
"""

from __future__ import annotations

import re
from itertools import compress, count, islice

from ..shell_info import CommandInfo

_TEST_TAIL = 3  # last non-blank lines of a test run that are never cut
# Lines that say how a command ended. Case-sensitive ones are test runners' summaries.
_VERDICT_I_TEXT = (
    r"^\s*(?:<returncode>\s*-?\d+\s*</returncode>|(?:exit(?:ed)? (?:status|code|with(?: code| status)?)"
    r"|return ?code|command exited)\b.{0,40}$|error: .{0,200}$|traceback \(most recent call last\):)"
)
_VERDICT_TEXT = (
    r"^\s*(?:=+ .{0,200}\b(?:passed|failed|errors?|skipped|xfailed|xpassed|deselected)\b.{0,80} =+\s*$"
    r"|(?:FAILED|ERROR|PASSED|OK|FAIL)\b.{0,200}$|Ran \d+ tests? in |\d+ (?:passed|failed)\b"
    r"|Tests? (?:passed|failed)|(?:[A-Z]\w*(?:Error|Exception)): .{0,200}$)"
)
_VERDICT_I = re.compile(_VERDICT_I_TEXT, re.IGNORECASE)
_VERDICT = re.compile(_VERDICT_TEXT)

# How every line matching _VERDICT_I or _VERDICT begins (both match at the line's start): a test of
# a line's first characters, so the costly patterns run only on such lines. Searching the whole
# output for their words instead took ~2.4 ms per 20 KB (sre tries each alternative at each char).
_OPENING_TEXT = r"\s*[<=\dA-Zcert]"
_OPENING = re.compile(_OPENING_TEXT)
# ``_OPENING.match(ln) and (_VERDICT_I.match(ln) or _VERDICT.match(ln))`` as one pattern, so that
# the rows of a 200,000-line output are found by ``map`` in C, not by a Python loop per line
_RUN_VERDICT = re.compile(rf"(?={_OPENING_TEXT})(?:(?i:{_VERDICT_I_TEXT})|{_VERDICT_TEXT})")
_READ_VERDICT = re.compile(rf"(?={_OPENING_TEXT})(?i:{_VERDICT_I_TEXT})")  # a file read's: its exit status only


def verdict_rows(lines: list[str], info: CommandInfo | None) -> set[int]:
    """Indices of the lines that say how the command ended (plus a test run's last lines)."""
    rows = _rows(lines, info)
    if info is not None and info.kind == "test":
        rows.update(_tail(lines))
    return rows


def verdict_lines(lines: list[str], info: CommandInfo | None) -> tuple[str, ...]:
    """How an output ended, as its verdict lines (no test tail: that is only kept, not compared)."""
    return tuple(lines[i].strip() for i in sorted(_rows(lines, info)))


def verdict_of(lines: list[str], info: CommandInfo | None) -> tuple[tuple[str, ...], set[int]]:
    """``verdict_lines`` and ``verdict_rows`` of one output, its lines scanned once."""
    rows = _rows(lines, info)
    verdict = tuple(lines[i].strip() for i in sorted(rows))
    if info is not None and info.kind == "test":
        rows.update(_tail(lines))
    return verdict, rows


def _rows(lines: list[str], info: CommandInfo | None) -> set[int]:
    # a file read carries only its wrapper's exit status; code lines like 'OK = 1' are no verdict
    runs_something = info is None or info.kind not in ("read", "search")
    pattern = _RUN_VERDICT if runs_something else _READ_VERDICT
    return set(compress(count(), map(pattern.match, lines)))


def _tail(lines: list[str]) -> list[int]:
    tail = (i for i in range(len(lines) - 1, -1, -1) if lines[i].strip() and lines[i].strip() != "</output>")
    return list(islice(tail, _TEST_TAIL))

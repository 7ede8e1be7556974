"""Which lines of a command's output say how it ended: mini's ``<returncode>``, exit-status lines,
error and traceback heads, a test runner's summary (and a test run's last lines).

Deduplication never cuts these lines and never stubs an output as "the same as" one whose
verdict differs, so a condensed output still tells the agent whether its command worked.
"""

from __future__ import annotations

import re
from itertools import islice

from ..shell_info import CommandInfo

_TEST_TAIL = 3  # last non-blank lines of a test run that are never cut
# Lines that say how a command ended. Case-sensitive ones are test runners' summaries.
_VERDICT_I = re.compile(
    r"^\s*(?:<returncode>\s*-?\d+\s*</returncode>|(?:exit(?:ed)? (?:status|code|with(?: code| status)?)"
    r"|return ?code|command exited)\b.{0,40}$|error: .{0,200}$|traceback \(most recent call last\):)",
    re.IGNORECASE,
)
_VERDICT = re.compile(
    r"^\s*(?:=+ .{0,200}\b(?:passed|failed|errors?|skipped|xfailed|xpassed|deselected)\b.{0,80} =+\s*$"
    r"|(?:FAILED|ERROR|PASSED|OK|FAIL)\b.{0,200}$|Ran \d+ tests? in |\d+ (?:passed|failed)\b"
    r"|Tests? (?:passed|failed)|(?:[A-Z]\w*(?:Error|Exception)): .{0,200}$)"
)

# How every line matching _VERDICT_I or _VERDICT begins (both match at the line's start): a test of
# a line's first characters, so the costly patterns run only on such lines. Searching the whole
# output for their words instead took ~2.4 ms per 20 KB (sre tries each alternative at each char).
_OPENING = re.compile(r"\s*[<=\dA-Zcert]")


def verdict_rows(lines: list[str], info: CommandInfo | None) -> set[int]:
    """Indices of the lines that say how the command ended (plus a test run's last lines)."""
    # a file read carries only its wrapper's exit status; code lines like 'OK = 1' are no verdict
    runs_something = info is None or info.kind not in ("read", "search")
    opening = _OPENING.match
    rows = {
        i
        for i, ln in enumerate(lines)
        if opening(ln) and (_VERDICT_I.match(ln) or (runs_something and _VERDICT.match(ln)))
    }
    if info is not None and info.kind == "test":
        tail = (i for i in range(len(lines) - 1, -1, -1) if lines[i].strip() and lines[i].strip() != "</output>")
        rows.update(islice(tail, _TEST_TAIL))
    return rows


def verdict_lines(lines: list[str], info: CommandInfo | None) -> tuple[str, ...]:
    """How an output ended, as its verdict lines (no test tail: that is only kept, not compared)."""
    kind = None if info is None or info.kind == "test" else info
    return tuple(lines[i].strip() for i in sorted(verdict_rows(lines, kind)))

"""Where a tool's output carries a file's lines: printed line numbers (``cat -n``, ``nl``,
SWE-agent windows, Read-style ``N→``) and the frame lines tools wrap around them."""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Iterator, Sequence
from itertools import accumulate

__all__ = ["SCAN", "file_lines", "head_rows", "is_frame", "rows_matching", "strip_line_numbers"]

SCAN = 400_000
"""Characters of one output that its summary and its outlines read: past them a huge output (a
whole log, a generated file) costs time, not information, and both stay linear and cheap."""


def head_rows(lines: Sequence[str], limit: int = SCAN) -> int:
    """How many of the first ``lines`` fit in ``limit`` characters joined by newlines (all if they do)."""
    ends = list(accumulate(map((1).__add__, map(len, lines[: limit + 1]))))  # chars of k lines, +1 each
    return bisect_right(ends, limit + 1)


def rows_matching(text: str, pattern: re.Pattern[str]) -> Iterator[int]:
    """Rows of ``text`` (split at newlines) holding a match of ``pattern``, ascending, each once:
    one search per such row, so a cheap superset pattern spares the other rows a costlier test."""
    row = at = 0  # ``at``: where row ``row`` starts
    search = pattern.search
    while (m := search(text, at)) is not None:
        start = m.start()
        row += text.count("\n", at, start)
        yield row
        end = text.find("\n", start)
        if end < 0:
            return
        at, row = end + 1, row + 1


# ---- line numbers ---------------------------------------------------------------------------

_NUMBERED = (
    re.compile(r"^ *(\d+)\t(.*)$"),  # cat -n / nl -ba
    re.compile(r"^(\d+):(.*)$"),  # SWE-agent window (and single-file grep -n)
    re.compile(r"^ *(\d+)\u2192(.*)$"),  # "    40→code" (Read-style tools)
)
_MARKER = re.compile(
    r"^\s*(\[File: .*\]|\(\d+ more lines? (above|below)\)|\[\d+ lines? (above|below) omitted\]"
    r"|\(this is the (beginning|end) of the file\))\s*$"
)
# Lines a tool wraps a file span in: mini's <returncode>/<output>, SWE-agent's footer, Codex's header
_WRAPPER = re.compile(
    r"^\s*(<returncode>-?\d+</returncode>|</?output>|<output>.*|</?warning>|\(Open file: .*\)"
    r"|\(Current directory: .*\)|bash-\$\s*|\[context-manager\].*"
    r"|Exit code: -?\d+|Wall time: [\d.]+ seconds|Output:|Chunk ID: \S+|Process exited with code -?\d+"
    r"|Process running with session ID \S+|Total output lines: \d+|Original token count: \d+)\s*$"
)


def is_frame(line: str) -> bool:
    """A line a tool wraps around file content (header, footer, mini's wrapper, a refold marker)."""
    return bool(_MARKER.match(line) or _WRAPPER.match(line))


def _content_span(lines: Sequence[str]) -> tuple[int, int]:
    """Where a file's consecutive lines can be: after mini's too-long ``<warning>`` block, and
    up to its ``</output_head>`` (what follows the elided characters has unknown line numbers)."""
    start, stop = 0, len(lines)
    for i, line in enumerate(lines[:4]):
        if line.lstrip().startswith("<warning>"):
            end = next((j for j in range(i, min(len(lines), i + 40)) if "</warning>" in lines[j]), -1)
            if end >= 0:
                start = end + 1
            break
    if start:
        stop = next((j for j in range(start, len(lines)) if lines[j].strip() in ("</output_head>", "<elided_chars>")), stop)
    return start, stop


_TAB_NUMBERED = re.compile(r"^ *(\d{1,9})\t")


def strip_line_numbers(text: str) -> tuple[str, list[int] | None]:
    """Remove per-line numbers from a numbered file span.

    Returns ``(code, numbers)`` where ``numbers[i]`` is the original line number of code line i,
    or ``(text, None)`` when ``text`` is not a numbered span. Printed numbers must be consecutive,
    so multi-file grep output (``path:40:code``) and sparse matches are rejected. Plain ``nl``
    leaves blank lines unnumbered and uncounted; those spans are renumbered from the first line.
    Frame lines around the span (SWE-agent's ``[File: ...]`` header and footer, mini's
    ``<returncode>``/``<output>`` wrapper) are dropped.
    """
    lines = text.split("\n")
    code, numbers = file_lines(lines)
    kept = [(c, n) for c, n in zip(code, numbers, strict=True) if n is not None]
    body = text.rstrip("\n")
    one = _TAB_NUMBERED.match(body) if "\n" not in body else None
    if one:  # a single line: only nl's / cat -n's tab form is surely a number
        return body[one.end() :], [int(one.group(1))]
    if len(kept) < 2:
        return text, None
    return "\n".join(c for c, _ in kept), [n for _, n in kept]


def file_lines(lines: Sequence[str], first_line: int | None = None) -> tuple[list[str], list[int | None]]:
    """Per output line: the line without its printed number, and its line number in the file.

    Numbers come from the output itself (``cat -n``, ``nl``, SWE-agent's ``N:`` windows, mini's
    wrapper around them), else from ``first_line``, the file line of the first line of content
    when the command says it (``sed -n '40,80p' f``, ``cat f``). Frame lines and lines whose
    number is unknown get None.
    """
    lines = list(lines)
    none: list[int | None] = [None] * len(lines)
    start, stop = _content_span(lines)
    lo, hi = start, stop
    while lo < hi and (not lines[lo].strip() or is_frame(lines[lo])):
        lo += 1
    while hi > lo and (not lines[hi - 1].strip() or is_frame(lines[hi - 1])):
        hi -= 1
    for pattern in _NUMBERED:
        code: list[str] = []
        first = last = -1
        for line in lines[lo:hi]:
            m = pattern.match(line)
            if m:
                n = int(m.group(1))
                if first < 0:
                    first = n
                elif n != last + 1:
                    break
                last = n
                code.append(m.group(2))
            elif not line.strip() and code:
                code.append("")
            elif pattern is _NUMBERED[0] and code and line.strip() == str(last + 1):
                # an empty file line's number whose tab was stripped with the output's trailing
                # whitespace ('nl -ba f | sed -n 240,520p' ending at a blank line)
                last += 1
                code.append("")
            else:
                break
        else:
            if last > first >= 0:
                numbers = none[:]
                numbers[lo:hi] = range(first, first + len(code))
                return lines[:lo] + code + lines[hi:], numbers
    if first_line is None:
        return lines, none
    # unnumbered content: only frame lines (never blank ones, which are file lines) lead it
    lo, hi = start, stop
    while lo < hi and is_frame(lines[lo]):
        lo += 1
    while hi > lo and is_frame(lines[hi - 1]):
        hi -= 1
    numbers = none[:]
    numbers[lo:hi] = range(first_line, first_line + hi - lo)
    return lines, numbers

"""The report's string table: every distinct text once, rendered texts as references into it.

A text reference (``Ref``) is a string id, or a list of segments whose concatenation is the text:

* a string id;
* ``["L", sid, a, b]``: lines ``a`` to ``b - 1`` of string ``sid`` (lines keep their ``\\n``);
* ``["R", sid, n]``: string ``sid`` repeated ``n`` times.

So a labeled output (``[step N]`` + recorded text), a trimmed output (most lines of the recorded
one) or a simulated summary (a filler word repeated) cost a few integers, not another copy.
``decode`` is the reference decoder; ``viewer.js`` has the same one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

Segment = int | list[Any]
Ref = int | list[Segment]

MIN_WRAP = 24  # shortest recorded text worth referencing inside a rendered one
MIN_LINES_TEXT = 200  # texts shorter than this are stored as they are
MIN_REPEAT = 1000  # a periodic tail at least this long is stored as a repeat
_MAX_PERIOD = 32
_MAX_POSITIONS = 8


def split_lines(text: str) -> list[str]:
    """Lines with their ``\\n`` (only ``\\n`` ends a line); no empty last line."""
    parts = text.split("\n")
    lines = [p + "\n" for p in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def decode(strings: Sequence[str], ref: Ref) -> str:
    if isinstance(ref, int):
        return strings[ref]
    out: list[str] = []
    for seg in ref:
        if isinstance(seg, int):
            out.append(strings[seg])
        elif seg[0] == "L":
            out.append("".join(split_lines(strings[seg[1]])[seg[2] : seg[3]]))
        elif seg[0] == "R":
            out.append(strings[seg[1]] * seg[2])
        else:
            raise ValueError(f"unknown segment {seg!r}")
    return "".join(out)


class TextTable:
    """Interns texts; ``ref`` finds the cheapest reference for a text given recorded texts."""

    def __init__(self) -> None:
        self.strings: list[str] = []
        self._ids: dict[str, int] = {}
        self._refs: dict[str, Ref] = {}
        self._index: dict[int, tuple[list[str], dict[str, list[int]]]] = {}

    def string(self, text: str) -> int:
        sid = self._ids.get(text)
        if sid is None:
            sid = self._ids[text] = len(self.strings)
            self.strings.append(text)
        return sid

    def ref(self, text: str, candidates: Sequence[str] = ()) -> Ref:
        """A reference for ``text``; ``candidates`` are recorded texts it may be built from."""
        hit = self._refs.get(text)
        if hit is not None:
            return hit
        ref: Ref
        if text in self._ids or len(text) < MIN_LINES_TEXT:
            ref = self.string(text)
        else:
            ref = (
                self._wrap(text, candidates)
                or self._repeat(text)
                or self._lines(text, candidates)
                or self.string(text)
            )
        self._refs[text] = ref
        return ref

    def _wrap(self, text: str, candidates: Sequence[str]) -> list[Segment] | None:
        best = ""
        for cand in candidates:
            if MIN_WRAP <= len(cand) < len(text) and len(cand) > len(best) and cand in text:
                best = cand
        if not best:
            return None
        pre, _, post = text.partition(best)
        return [self.string(s) for s in (pre, best, post) if s]

    def _repeat(self, text: str) -> list[Segment] | None:
        n = len(text)
        for p in range(1, _MAX_PERIOD + 1):
            unit = text[n - p :]
            i = n - p
            while i - p >= 0 and text[i - p : i] == unit:
                i -= p
            if n - i >= MIN_REPEAT:
                head: list[Segment] = [self.string(text[:i])] if i else []
                return [*head, ["R", self.string(unit), (n - i) // p]]
        return None

    def _lines_of(self, sid: int) -> tuple[list[str], dict[str, list[int]]]:
        hit = self._index.get(sid)
        if hit is None:
            lines = split_lines(self.strings[sid])
            pos: dict[str, list[int]] = {}
            for j, line in enumerate(lines):
                at = pos.setdefault(line, [])
                if len(at) < _MAX_POSITIONS:
                    at.append(j)
            hit = self._index[sid] = (lines, pos)
        return hit

    def _lines(self, text: str, candidates: Sequence[str]) -> list[Segment] | None:
        """Runs of lines shared with a recorded text (a trimmed output keeps most of its lines)."""
        sources = [
            (self.string(c), *self._lines_of(self.string(c)))
            for c in candidates
            if len(c) >= MIN_LINES_TEXT and c != text
        ]
        if not sources:
            return None
        lines = split_lines(text)
        out: list[Segment] = []
        literal: list[str] = []
        matched = i = 0
        while i < len(lines):
            best_n, best_sid, best_j = 0, 0, 0
            for sid, clines, pos in sources:
                for j in pos.get(lines[i], ()):
                    n = 1
                    while i + n < len(lines) and j + n < len(clines) and lines[i + n] == clines[j + n]:
                        n += 1
                    if n > best_n:
                        best_n, best_sid, best_j = n, sid, j
            if best_n >= 2:
                if literal:
                    out.append(self.string("".join(literal)))
                    literal = []
                out.append(["L", best_sid, best_j, best_j + best_n])
                matched += sum(len(s) for s in lines[i : i + best_n])
                i += best_n
            else:
                literal.append(lines[i])
                i += 1
        if literal:
            out.append(self.string("".join(literal)))
        return out if matched * 2 >= len(text) else None

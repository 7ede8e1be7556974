"""The last prompt rendered, what the provider's cache holds: its shared parts and what a change to it costs.

Every decision of the cost rule compares a prompt the call could send with the last one: how many
of its leading messages are certainly the same (``known_same``), and what folding a span in it
would recompute and remove (``fold_effect``). Both are answered from the parts the last prompt
shares with the memo (prefix, layout ropes, tail), never from a joined copy, so a decision costs
in proportion to what it changes, not to the history's length.
"""

from __future__ import annotations

import bisect
import itertools

from ..mechanisms.spans import Span, fold_effect
from ..types import Message, Origin
from .layout import Layout
from .prompt import Joined, OriginParts
from .received import message_chars
from .rope import Rope, empty

# per chunk of a layout's origins, over messages with a step: (max last step, max step, min last step)
Mark = tuple[int, int, int]
_NONE: Mark = (-1, -1, 1 << 62)


def last_step(o: Origin) -> int:
    """The latest step a message with a step shows (its own, or one its note covers), as ``fold_effect`` reads it."""
    step, covers = o.step, o.covers
    assert step is not None
    return step if not covers or (len(covers) == 1 and covers[0] <= step) else max(step, *covers)


def _mark(chunk: tuple[Origin, ...]) -> Mark:
    top = top_step = -1
    low = _NONE[2]
    for o in chunk:
        step, covers = o.step, o.covers
        if step is None:
            continue
        last = step if not covers or (len(covers) == 1 and covers[0] <= step) else max(step, *covers)  # last_step, inline
        if last > top:
            top = last
        if step > top_step:
            top_step = step
        if last < low:
            low = last
    return top, top_step, low


class LastPrompt:
    """The prompt of call ``t`` as three shared parts, its size, and per-chunk marks of its layout."""

    __slots__ = ("base", "chars", "layout", "msgs", "origins", "t")

    def __init__(self, msgs: Joined[Message], origins: OriginParts, layout: Layout | None, chars: int, t: int) -> None:
        self.msgs, self.origins, self.layout, self.chars, self.t = msgs, origins, layout, chars, t
        self.base = layout
        """The layout later layouts are built from, while they are (None once the memo lays out
        from scratch, ``Renderer._reset_behind``)."""

    def known_same(self, layout: Layout, t: int) -> int:
        """How many leading messages of a prompt with ``layout`` at call t are this prompt's, for certain."""
        last = self.base
        if last is None or self.t != t - 1 or not self.msgs:
            return 0
        if layout is last:
            same = len(layout.msgs)
        elif layout.base == last.serial:
            same = layout.reused
        else:
            return 0
        return min(len(self.msgs), self.msgs.n + same)


def nothing() -> LastPrompt:
    return LastPrompt(Joined([], empty(), []), ([], empty(), []), None, 0, -1)


class FoldSizer:
    """``fold_effect`` on the last prompt without joining it: the layout's origins are marked per
    rope chunk (a chunk shared with an earlier layout keeps its mark), so the first changed message
    is a bisection over the chunks and only chunks that may hold the span's steps are read."""

    __slots__ = ("_marks", "_rope", "_run", "_seq")

    def __init__(self) -> None:
        self._marks: dict[int, tuple[tuple[Origin, ...], Mark]] = {}  # id(chunk) -> (the chunk, held, its mark)
        self._rope: Rope[Origin] | None = None
        self._seq: list[Mark] = []  # the marks of self._rope's chunks, in order
        self._run: list[int] = []  # running max of their max last step (ascending: bisectable)

    def _index(self, rope: Rope[Origin]) -> None:
        if rope is self._rope:
            return
        old, new = self._marks, {}
        for chunk in rope.chunks:
            found = old.get(id(chunk))
            if found is None or found[0] is not chunk:
                found = (chunk, _mark(chunk))
            new[id(chunk)] = found
        self._marks, self._rope = new, rope
        self._seq = [new[id(c)][1] for c in rope.chunks]
        self._run = list(itertools.accumulate((m[0] for m in self._seq), max))

    def effect(self, last: LastPrompt, span: Span, block_chars: int) -> tuple[int, int, int]:
        """``fold_effect(last.msgs, last.origins, span, block_chars)``, the same three numbers."""
        layout = last.layout
        if layout is None or layout.msgs is not last.msgs.layout:  # no committed layout: a short prompt
            return fold_effect(list(last.msgs), list(Joined(*last.origins)), span, block_chars)
        lo, hi = span.begin, span.end or span.begin
        prefix, tail = last.msgs.prefix, last.msgs.tail
        tail_origins = last.origins[2]
        if any(o.step is not None for o in last.origins[0]):  # the prefix carries no step (prefix_messages)
            return fold_effect(list(last.msgs), list(Joined(*last.origins)), span, block_chars)
        prefix_chars = sum(message_chars(m) for m in prefix)
        lens = [message_chars(m) for m in tail]
        size = prefix_chars + layout.total_chars + sum(lens)
        rope = layout.origins
        self._index(rope)
        chunks, ends, seq = rope.chunks, rope.ends, self._seq
        inside = 0
        c = bisect.bisect_left(self._run, lo)  # the first chunk holding a message that shows step lo or later
        if c < len(chunks):
            base = ends[c - 1] if c else 0
            k = next(k for k, o in enumerate(chunks[c]) if o.step is not None and last_step(o) >= lo)
            recomputed = size - prefix_chars - layout.chars_before(base + k)
            for cc in range(c, len(chunks)):
                _, top_step, low = seq[cc]
                if top_step < lo or low > hi:  # no message of lo..hi in it
                    continue
                base = ends[cc - 1] if cc else 0
                for k, o in enumerate(chunks[cc]):
                    s = o.step
                    if s is not None and lo <= s and o.part != "pin" and last_step(o) <= hi:
                        inside += layout.lens[base + k]
        else:
            first = next((i for i, o in enumerate(tail_origins) if o.step is not None and last_step(o) >= lo), None)
            recomputed = 0 if first is None else sum(lens[first:])
        for i, o in enumerate(tail_origins):
            s = o.step
            if s is not None and lo <= s and o.part != "pin" and last_step(o) <= hi:
                inside += lens[i]
        return size, recomputed, inside - block_chars

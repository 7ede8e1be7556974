"""The last prompt rendered, what the provider's cache holds, and what the cost rule compares with it.

Every decision of the cost rule compares a prompt the call could send with the last one: its size
and how much of it the cache holds (``CacheView.candidate``), how many leading messages are
certainly the same (``LastPrompt.known_same``), and what folding a span in it would recompute and
remove (``FoldSizer.effect``). All are answered from the parts the last prompt shares with the
memo (prefix, layout ropes, tail) and running totals, never from a joined copy, so a decision
costs in proportion to what it changes, not to the history's length.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable

from ..history import History
from ..mechanisms.boundary import Candidate
from ..mechanisms.pins import Part
from ..mechanisms.spans import Span, fold_effect
from ..messages import clean
from ..types import Message, Origin
from .folds import ClosedSpans
from .layout import Layout
from .prompt import Joined, OriginParts
from .received import ReceivedLog, message_chars
from .rope import Rope, empty

TailOf = Callable[[History, int, int, list[Span], list[Message], list[Origin]], None]
"""Appends steps b+1..t as a prompt shows them after layout b (``Renderer._tail``)."""

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
    """The prompt of call ``t`` as three shared parts, its size in characters, and its layout (one
    object per renderer, updated in place by every call)."""

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
        self._marks: dict[int, tuple[tuple[Origin, ...], Mark]] = {}  # id(chunk) -> (the chunk, held so that its id stays its own, its mark)
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


class CacheView:
    """What the cost rule compares with the last prompt, for one renderer's history: the prefix and
    the received steps it shares, and the memos that outlive one call (fold sizes, ``extends``)."""

    __slots__ = ("extends", "last", "pinned", "prefix", "prefix_chars", "recv", "sizer", "tail_of")

    def __init__(
        self, prefix: list[Message], recv: ReceivedLog, last: LastPrompt,
        pinned: Callable[[int, int], frozenset[Part]], tail_of: TailOf,
    ) -> None:
        self.prefix, self.recv, self.last = prefix, recv, last
        self.pinned, self.tail_of = pinned, tail_of  # the renderer's pins as of a call, and its tail
        self.prefix_chars = sum(message_chars(m) for m in prefix)
        self.sizer = FoldSizer()
        self.extends: tuple[Layout, Layout, int, list[Message], int] | None = None
        """A moved layout that extends the kept one: (moved, kept, last-tail messages read, that tail, common chars)."""

    def candidate(self, history: History, layout: Layout, t: int, closed: ClosedSpans) -> Candidate:
        """The size of the prompt ``layout`` (with the ``closed`` spans) gives at call t and what of it
        the cache holds.

        From running totals when the previous call was t-1 and no span is closed in the tail (the
        usual case: the cost stays independent of the history's length); else from the messages."""
        prompt, pinned = self.last, self.pinned
        after = closed.after(layout.b)
        last = prompt.base
        if last is not None and prompt.t == t - 1 and not after:
            size = self.prefix_chars + layout.total_chars + self.recv.chars(layout.b, t)
            if layout is last:
                return Candidate(size, prompt.chars + self.recv.forms[t - 1].chars_of_reply)
            n = min(len(layout.msgs), len(last.msgs))
            d = layout.msgs.common(last.msgs, layout.reused, n) if layout.reused < n else layout.reused
            if d < n:
                return Candidate(size, self.prefix_chars + layout.chars_before(d))
            found = self.extends
            if found is not None and found[0] is layout and found[1] is last:
                k, tail_then, common = found[2], found[3], found[4]
                tail_now = prompt.msgs.tail
                # the answer read the last prompt's first k tail messages: the same, the same answer
                if (tail_now is tail_then or tail_now[:k] == tail_then[:k]) and not pinned(layout.b, t):
                    return Candidate(size, common)
            plain = not pinned(layout.b, t)
        else:
            plain = False
        tail: list[Message] = []
        self.tail_of(history, layout.b, t, after, tail, [])
        n_prefix, n_layout = len(self.prefix), len(layout.msgs)
        size = self.prefix_chars + layout.total_chars + sum(message_chars(m) for m in tail)
        new = Joined(self.prefix, layout.msgs, tail)
        before = prompt.msgs
        i = prompt.known_same(layout, t)  # compared from there on: work in proportion to the tail
        i = new.common(before, 0 if i < n_prefix else min(i, len(new), len(before)))
        if i == len(before) and t >= 1 and i < len(new):  # the cache also holds the reply it produced
            reply = clean(history.step(t).reply)
            if new[i] is reply or new[i] == reply:
                i += 1
        if i <= n_prefix:
            common = sum(message_chars(m) for m in self.prefix[:i])
        else:
            k = i - n_prefix - n_layout
            common = self.prefix_chars + layout.chars_before(i - n_prefix) + sum(message_chars(m) for m in tail[: max(0, k)])
            n_last = n_prefix + len(last.msgs) if last is not None else 0
            if plain and last is not None and n_last <= i < min(n_prefix + n_layout, len(before)):
                # the moved layout extends the kept one and differs from the last prompt inside its own
                # steps: while both layouts stay and the last tail keeps those messages, the same answer
                self.extends = (layout, last, i - n_last + 1, before.tail, common)
        return Candidate(size, common)

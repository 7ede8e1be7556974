"""The agent's span folds as the render path shows them (blocks, in the layout and in the tail), and when.

A closed span (``fold_span``, or ``fold_steps A-B`` after the fact) is shown as one block. Under
the boundary rule ``fixed`` it is shown from the call that closed it on. Under ``cost`` a fold
changes the prompt from its first step on, so the provider recomputes everything after it: the
fold is shown at once only when that pays for itself (``mechanisms.boundary.fold_pays``, judged
on the last prompt, as the answer to the fold judged it), else it waits for the next boundary
move (one the rule makes anyway, a cold cache, or one the fold makes pay), at the latest the
``boundary.fold_wait``-th move of the fixed rule (``fold_deadline``). Folds are applied in closing
order, all pending at once, so the spans shown are always the first ``applied`` of ``SpanBook.closed``.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable

from ..config import Config
from ..history import History
from ..mechanisms.boundary import fold_deadline, fold_pays
from ..mechanisms.pins import Part, pinned_note
from ..mechanisms.spans import FoldCost, Span, SpanBook, block_text, cover_map, fold_cost, fold_effect
from ..types import Message, Origin, Shown
from .received import Received


class ClosedSpans:
    """The outermost closed spans by first step, and what a call asks of them, per boundary."""

    __slots__ = ("_after", "_upto", "begins", "key", "spans")

    def __init__(self, key: tuple[int, int], spans: list[Span]) -> None:
        self.key, self.spans = key, spans
        self.begins = [s.begin for s in spans]
        self._upto: dict[int, tuple[list[Span], tuple[str, ...]]] = {}
        self._after: dict[int, list[Span]] = {}

    def upto(self, b: int) -> tuple[list[Span], tuple[str, ...]]:
        """The spans that begin at or before step b, and their ids."""
        found = self._upto.get(b)
        if found is None:
            if len(self._upto) >= 8:  # a call asks for the kept and the moved boundary
                self._upto.clear()
            head = self.spans[: bisect.bisect_right(self.begins, b)]
            found = self._upto[b] = (head, tuple(s.id for s in head))
        return found

    def after(self, b: int) -> list[Span]:
        """The spans that end after step b (shown as blocks in the tail)."""
        found = self._after.get(b)
        if found is None:
            if len(self._after) >= 8:
                self._after.clear()
            found = self._after[b] = [s for s in self.spans if (s.end or 0) > b]
        return found


def outermost(book: SpanBook, n: int) -> list[Span]:
    """The first ``n`` closed spans (closing order) not inside another of them, by first step."""
    if n == len(book.closed):
        return book.outermost_closed()
    shown = {s.id for s in book.closed[:n]}
    out = []
    for s in book.closed[:n]:
        parent = s.parent
        while parent is not None and parent not in shown:  # a pending outer fold does not hide it yet
            parent = book.spans[parent].parent
        if parent is None:
            out.append(s)
    return sorted(out, key=lambda s: s.begin)


def fold_timing(
    config: Config, history: History, t: int, span: Span, book: SpanBook, last: list[Message], last_origins: list[Origin]
) -> tuple[bool, int]:
    """Whether folding ``span`` at call t pays for itself on the last prompt (``last``, call t-1),
    and the tokens folding now recomputes. The answer to the fold asks it before step t exists,
    the render at call t after: the block is sized without step t, so both get the same numbers."""
    return fold_verdict(config, history, t, span, book, lambda s, chars: fold_effect(last, last_origins, s, chars))


Effect = Callable[[Span, int], tuple[int, int, int]]
"""``fold_effect`` on the last prompt: (span, the block's characters) -> (size, recomputed, saved)."""


def fold_verdict(config: Config, history: History, t: int, span: Span, book: SpanBook, effect: Effect) -> tuple[bool, int]:
    """``fold_timing`` with the last prompt sized by ``effect`` (the renderer's reads its shared parts)."""
    steps = history.steps_between(span.begin - 1, min(span.end or span.begin, t - 1))
    block = block_text(span, steps, book, reversible=config.policy.reversible)
    size, recomputed, saved = effect(span, len(block))
    return fold_pays(config, t, size, recomputed, saved), round(recomputed / config.spans.chars_per_token)


class AgentFolds:
    """Which closed spans a render shows, their blocks (cached), and what each fold cost."""

    def __init__(self, config: Config, book: SpanBook) -> None:
        self.config, self.book = config, book
        self.applied = 0  # closed spans shown, in closing order
        self.blocks: dict[str, str] = {}
        self.costs: dict[str, FoldCost] = {}
        self._closed: dict[tuple[int, int], ClosedSpans] = {}

    @property
    def pending(self) -> list[Span]:
        """Closed spans not shown yet."""
        return self.book.closed[self.applied :]

    def closed(self, n: int | None = None) -> ClosedSpans:
        """The outermost of the first ``n`` closed spans (default: all), rebuilt only when that changes."""
        n = len(self.book.closed) if n is None else n
        key = (n, len(self.book.spans))
        found = self._closed.get(key)
        if found is None:
            if len(self._closed) >= 4:
                self._closed.clear()
            found = self._closed[key] = ClosedSpans(key, outermost(self.book, n))
        return found

    def shown(self) -> ClosedSpans:
        return self.closed(self.applied)

    def apply_all(self) -> list[Span]:
        """Show every closed span from now on; the newly shown ones."""
        new = self.book.closed[self.applied :]
        self.applied = len(self.book.closed)
        return new

    def due(self, t: int) -> bool:
        """Whether a pending fold has waited as long as it may."""
        return any(fold_deadline(self.config, s.closed_at or t) <= t for s in self.pending)

    def fresh(self, t: int) -> list[Span]:
        """Pending folds closed by step t (their answers said whether they show at call t)."""
        return [s for s in self.pending if s.closed_at == t]

    def pays_now(self, history: History, t: int, effect: Effect) -> bool:
        """Whether a fold closed by step t pays for itself on the last prompt (as its answer said)."""
        return any(fold_verdict(self.config, history, t, s, self.book, effect)[0] for s in self.fresh(t))

    def block(self, history: History, span: Span) -> tuple[Message, Origin]:
        text = self.blocks.get(span.id)
        if text is None:
            steps = history.steps_between(span.begin - 1, span.end or span.begin)
            text = self.blocks[span.id] = block_text(span, steps, self.book, reversible=self.config.policy.reversible)
        return {"role": "user", "content": text}, Origin(span.begin, "span", Shown.NOTE, span.covers)

    def note_costs(self, spans: list[Span], t: int, kept: int, last: list[Message], now: list[Message]) -> None:
        """What the folds shown first at call t cost: the prompt after ``kept`` leading messages."""
        for span in spans:
            if span.id not in self.costs:
                c = fold_cost(span, t, last, now)
                self.costs[span.id] = c._replace(kept_messages=kept + c.kept_messages)

    def tail(
        self, h: History, b: int, t: int, spans: list[Span], received: list[Received], pins: frozenset[Part],
        msgs: list[Message], origins: list[Origin],
    ) -> None:
        """Steps b+1..t as ``received``, except closed ``spans``: one block at their first step, with
        the pinned parts of the steps it covers verbatim after it."""
        cover = cover_map(spans) if spans else {}
        pinned = {p[0] for p in pins if p[0] > b}
        for i in range(b + 1, t + 1):
            span = cover.get(i)
            if span is None:
                msgs += received[i - 1].msgs
                if i in pinned:  # as received anyway; marked so that a compaction keeps it
                    origins += [o if (i, k - 1) not in pins else Origin(i, o.part, Shown.PINNED, (i,))
                                for k, o in enumerate(received[i - 1].origins)]
                    continue
                origins += received[i - 1].origins
            elif i == span.begin:  # a span straddling the boundary has its block behind it
                msg, origin = self.block(h, span)
                msgs.append(msg)
                origins.append(origin)
                for ps, pj in sorted(p for p in pins if span.begin <= p[0] <= (span.end or 0)):
                    s = h.step(ps)
                    text = s.reply_text if pj == -1 else s.output_texts[pj]
                    note = pinned_note(ps, pj, len(s.observations), text, said=pj in s.user_messages)
                    msgs.append({"role": "user", "content": note})
                    origins.append(Origin(ps, "pin", Shown.PINNED, (ps,)))

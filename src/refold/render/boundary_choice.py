"""Where the boundary is: the layout of steps 1..b at a candidate boundary (memoized: the committed
one, the seed's candidate), and the cost rule choosing between keeping the committed layout and
moving to the seed's boundary, pending span folds included (``mechanisms.boundary.should_move``).

``BoundaryChoice`` is ``Renderer``'s part that decides this; it reads the renderer's state, declared
below, and writes only ``_layout``, ``_candidate`` and the layout memos.
"""

from __future__ import annotations

from ..config import Config
from ..history import History
from ..mechanisms.boundary import cold, should_move
from ..mechanisms.ledger import LedgerBook
from ..mechanisms.pins import Part, Pin, PinBook
from ..mechanisms.spans import Span
from ..types import Message
from .behind import Behind
from .folds import AgentFolds, ClosedSpans
from .last import CacheView, LastPrompt
from .layout import Layout, lay_out
from .mechanism import LayoutView, Mechanism
from .plain import PlainHistory
from .received import ReceivedLog

_NO_PINS: frozenset[Part] = frozenset()


class BoundaryChoice:
    """The boundary decision of a ``Renderer`` (its state is set by ``Renderer._reset``)."""

    config: Config
    _mechanisms: tuple[Mechanism, ...]
    _recv: ReceivedLog
    _last: LastPrompt
    _cache: CacheView
    _behind: Behind
    _folds: AgentFolds
    _ledger: LedgerBook
    _pins: PinBook
    _user_pins: tuple[Pin, ...]
    _plain: PlainHistory | None
    _peak_chars: int
    _layout: Layout | None
    _candidate: Layout | None
    _notes: dict[tuple[int, int], str]
    _note_lines: dict[int, str]
    _hidden_texts: dict[tuple[int, int, str], str]
    _reply_texts: dict[int, str | None]
    _mask_notes: dict[tuple[int, int], Message]
    _hidden_memo: dict[tuple[int, int], tuple[tuple[int, int, str], ...]]

    def _hidden(self, b: int, t: int) -> tuple[tuple[int, int, str], ...]:
        if not self._ledger.ops:  # asked a few times per call
            return ()
        p = self.config.policy
        limit = min(t, b + p.k) if p.chunk else t
        key = (b, limit)  # final: every op issued at a step <= limit <= t has been observed
        found = self._hidden_memo.get(key)
        if found is None:
            if len(self._hidden_memo) >= 8:  # asked for the kept and the moved boundary: a few keys live
                self._hidden_memo.clear()
            found = self._hidden_memo[key] = self._ledger.hidden(b, limit)
        return found

    def _pinned(self, b: int, t: int, upto: int | None = None) -> frozenset[Part]:
        """Pins as of call t; the latest plan as of the step a ledger op would count to; protected
        outputs and user messages up to ``upto`` (the boundary: after it they are shown as received)."""
        pins = self._pins
        if not pins.events and not pins.plan_steps and not self._user_pins and not pins.protected and not pins.said:  # asked a few times per call
            return _NO_PINS
        p = self.config.policy
        return pins.pinned(t, self._user_pins, plans_limit=min(t, b + p.k) if p.chunk else t, protect_limit=b if upto is None else upto)

    def _kept_key(self, kept: Layout, t: int, closed: ClosedSpans) -> tuple[int, object, tuple[str, ...], frozenset[Part]]:
        spans, ids = closed.upto(kept.b)
        return kept.b, self._hidden(kept.b, t), ids, self._pinned(kept.b, t, reach(kept.b, spans))

    def _boundary(self, history: History, seed: int, t: int, closed: ClosedSpans) -> None:
        """Commit the layout at the seed's boundary, or keep the committed one (the cost rule)."""
        moved = self._layout_at(history, seed, t, closed)
        kept = self._layout
        if kept is None or kept is moved or kept.b == seed or self._plain is not None:
            self._commit(moved)  # while the plain history is sent, the layout it would switch to is the seed's
        elif self._kept_key(kept, t, closed) != (kept.b, kept.hidden, kept.spans, kept.pinned):
            self._commit(moved)  # an agent's fold changes the prompt anyway: batch every pending edit
        elif should_move(
            self.config, t, self._cache.candidate(history, kept, t, closed), self._cache.candidate(history, moved, t, closed), self._recv.idle(t),
            self._peak_chars,
        ):
            self._commit(moved)

    def _defer(self, history: History, seed: int, t: int) -> tuple[ClosedSpans, list[Span]]:
        """The cost rule with pending span folds: shown with the next move that pays (or is due),
        else the committed layout stays and the tail shows their steps as received."""
        folds = self._folds
        every, shown = folds.closed(), folds.shown()
        moved = self._layout_at(history, seed, t, every)
        kept = self._layout
        idle = self._recv.idle(t)
        apply = (
            kept is None
            or cold(self.config, idle)  # nothing is cached: folding costs nothing extra
            or self._plain is not None  # the plain history was sent: a span ends it, all after the prefix is new
            or folds.due(t)
            or folds.pays_now(history, t, lambda span, chars: self._cache.sizer.effect(self._last, span, chars))
            or self._kept_key(kept, t, shown) != (kept.b, kept.hidden, kept.spans, kept.pinned)
        )
        if not apply and kept is not None:
            base = self._cache.candidate(history, kept, t, shown)
            if not folds.fresh(t):  # else the answer just said "not now": only a move made anyway shows it
                apply = should_move(self.config, t, base, self._cache.candidate(history, moved, t, every), idle, self._peak_chars)
            if not apply and kept.b != seed:  # a move the rule makes anyway takes the folds along
                plain = self._layout_at(history, seed, t, shown)
                apply = should_move(self.config, t, base, self._cache.candidate(history, plain, t, shown), idle, self._peak_chars)
        if apply:
            self._commit(moved)
            return every, folds.apply_all()
        return shown, []

    def _layout_at(self, history: History, b: int, t: int, closed: ClosedSpans) -> Layout:
        """The layout of steps 1..b, from the committed one (or the cached candidate) when unchanged."""
        spans, ids = closed.upto(b)
        hidden = self._hidden(b, t)
        pinned = self._pinned(b, t, reach(b, spans))
        masked = len(self._behind.mask_order)
        for known in (self._layout, self._candidate):
            if (
                known is not None and known.b == b and known.masked_upto == masked
                and known.hidden == hidden and known.spans == ids and known.pinned == pinned
            ):
                return known
        view = LayoutView(
            history, self.config, b, spans, hidden, self._behind, self._recv.forms, self._mechanisms, pinned,
            hidden_texts=self._hidden_texts, reply_texts=self._reply_texts, mask_notes=self._mask_notes,
        )
        layout = lay_out(view, lambda span: self._folds.block(history, span), self._notes, self._note_lines, self._layout)
        self._candidate = layout
        return layout

    def _commit(self, layout: Layout) -> None:
        self._layout = layout
        if self._candidate is layout:
            self._candidate = None


def reach(b: int, spans: list[Span]) -> int:
    """How far the layout of steps 1..b folds: to the end of a span that straddles b (its block is
    behind the boundary), whose protected outputs and user messages it must keep after the block."""
    return max([b, *(s.end for s in spans if s.end is not None and s.end > b)])

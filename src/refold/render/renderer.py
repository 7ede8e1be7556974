"""The render path, top to bottom, and its memo.

    history --received--> every step as first shown            (render.received)
            --behind----> final forms behind the boundary,      (render.behind: dedup, masking)
                          STALE folds, spans, ledger ops
            --boundary--> where the boundary is: the seed's b_t, (mechanisms.boundary, sized on
                          or only where moving it pays         the last prompt: render.last)
            --layout----> steps 1..b as shown, then the tail     (render.layout)
            -> Rendered(messages, origins, stats)

``render(history, config, t)`` is a pure function of the history's first t steps and the config.
A ``Renderer`` is its memo: it keeps what can no longer change, keyed by the content digests of
the steps it has seen (never by object identity), so it may be handed any history in any order
and returns exactly what ``render`` returns.
"""

from __future__ import annotations

import bisect
import time

from ..config import DEFAULT, Config, as_config
from ..history import History
from ..mechanisms.boundary import (
    Candidate,
    cold,
    defers_folds,
    plain_first,
    recorded_config,
    should_move,
    step_time,
    target,
    until_seed,
)
from ..mechanisms.fold import valid_marks
from ..mechanisms.ledger import LedgerBook, budget_lines
from ..mechanisms.ledger_view import LedgerView
from ..mechanisms.objects import ObjectIndex
from ..mechanisms.pins import Part, Pin, PinBook
from ..mechanisms.spans import FoldCost, Span, SpanBook
from ..types import Message, Origin, Rendered, Shown, Step
from .behind import Behind
from .folds import AgentFolds, ClosedSpans
from .last import CacheView, LastPrompt, nothing
from .layout import Layout, lay_out
from .mechanism import LayoutView, resolve
from .plain import PlainHistory
from .prompt import Joined, LazyRendered, OriginParts, StatsArgs
from .received import ReceivedLog, message_chars, prefix_messages, received_form

_NO_PINS: frozenset[Part] = frozenset()
_LEDGER_VIEW = Origin(None, "ledger", Shown.NOTE)  # frozen: one for every call


def render(history: History, config: Config = DEFAULT, t: int | None = None) -> Rendered:
    """The prompt after ``t`` steps (default: all), i.e. what model call t+1 is sent."""
    return Renderer(config).render(history, t)


class Renderer:
    """A memo of ``render`` for one config: one per session, any number of histories."""

    def __init__(self, config: Config = DEFAULT) -> None:
        self.config = config = as_config(config, "Renderer")
        self._mechanisms = resolve(config.mechanisms)
        self._budget = bool(config.ledger.budget_tokens)
        self._budget_line = budget_lines(config.ledger)
        self._defers = defers_folds(config)
        self._sequential = self._budget or config.boundary.rule == "cost"  # each call's choices depend on the last
        self._plain_config = recorded_config(config) if plain_first(config) else None
        self.fold_costs: dict[str, FoldCost] = {}
        """Per folded span, what its fold cost (filled when a render applies it)."""
        self._reset(None)

    def _reset(self, history: History | None) -> None:
        # what identifies the steps seen (see ``_same``): their count, the last one and its recorded
        # time (the Step object, its raw meta value, the time read from it), the history's pins
        self._seen: tuple[int, Step | str, object, float | None, tuple[Pin, ...]] | None = None
        self._prefix: list[Message] = []
        self._prefix_origins: list[Origin] = []
        self._user_pins = history.pins if history is not None else ()
        if history is not None:
            self._prefix, self._prefix_origins = prefix_messages(history, self.config)
            self._seen = (0, history.digest, None, None, self._user_pins)
        self._recv = ReceivedLog()
        self._last: LastPrompt = nothing()  # the last prompt rendered (updated in place)
        self._cache = CacheView(self._prefix, self._recv, self._last, self._pinned, self._tail)  # what the cost rule compares with it
        self._prefix_chars = self._cache.prefix_chars
        self._spans = SpanBook(self.config.spans)
        self._ledger = LedgerBook(self.config.ledger)
        self._pins = PinBook(plans=self.config.ledger.pin_plans, protect=self.config.policy.protect)
        self._objects = ObjectIndex() if self.config.ledger.view else None
        self._view = LedgerView(self._objects) if self._objects is not None else None
        self._folds = AgentFolds(self.config, self._spans)
        self._folded: set[int] = set()
        self._folded_order: list[int] = []  # the same steps, sorted (``_folded_changed`` counts them)
        self._marks_t = 0
        self._notes: dict[tuple[int, int], str] = {}
        self._note_lines: dict[int, str] = {}
        self._hidden_texts: dict[tuple[int, int, str], str] = {}
        self._reply_texts: dict[int, str | None] = {}
        self._mask_notes: dict[tuple[int, int], Message] = {}
        self._hidden_memo: dict[tuple[int, int], tuple[tuple[int, int, str], ...]] = {}
        self._t = -1  # the last call rendered
        self._budget_done = 0  # steps whose budget line is set
        self._peak_chars = 0  # of the largest prompt sent (the cost rule's peak KV term)
        # until the protocol's prompt pays (prompt.deferred): the plain history is sent instead
        self._plain = (
            PlainHistory(self._plain_config, history) if self._plain_config is not None and history is not None else None
        )
        self._plain_sent: Rendered | None = None  # the plain prompt sent at call self._t
        self._again: tuple[Joined[Message], OriginParts, StatsArgs] | None = None  # the last call's prompt
        self.fold_costs = self._folds.costs
        self._reset_behind()

    def _reset_behind(self) -> None:
        self._behind = Behind(self.config, self._mechanisms)
        self._last.base = None
        self._layout: Layout | None = None  # the committed layout: steps 1..b as the last call showed them
        self._candidate: Layout | None = None  # a layout at the seed's boundary, not (yet) committed
        self._cache.extends = None

    # ---- public -----------------------------------------------------------------------------

    def render(self, history: History, t: int | None = None) -> Rendered:
        """The prompt after ``t`` steps (default: all), i.e. what model call t+1 is sent."""
        start = time.perf_counter()
        n = len(history) if isinstance(history, History) else History.required(history)
        t = n if t is None else t
        if not 0 <= t <= n:
            raise ValueError(f"t={t} is outside 0..{n}")
        if t < self._t or not self._same(history):
            self._reset(history)
        if t == self._t:
            if self._again is not None:  # asked again: the same prompt, never decided twice
                return self._plain_sent or LazyRendered(*self._again)
            self._reset(history)  # a replay stopped at call t: its prompt was not kept
        if self._sequential and self._t < t - 1:
            for u in range(self._t + 1, t):  # each call's choices depend on the call before it
                self._render(history, u, start, replay=True)
        result = self._render(history, t, start)
        assert result is not None
        return result

    def received(self, history: History, index: int) -> list[Message]:
        """Step ``index`` as first shown to the model (reply, then labeled outputs; no budget line)."""
        step = history.step(index)
        if index <= len(self._recv) and self._same(history):
            note = self._recv.notes[index - 1]
        else:
            note = SpanBook.replay(history.steps_between(0, index), self.config.spans).reminder(index)
        return received_form(step, self.config, note).msgs

    @property
    def sent_plain(self) -> bool:
        """Whether the last prompt rendered was the plain history (``prompt.deferred``)."""
        return self._plain_sent is not None

    @property
    def span_book(self) -> SpanBook:
        """The spans of the history last rendered, as of its last rendered step (read-only)."""
        return self._spans

    # ---- the path -------------------------------------------------------------------------------

    def _render(self, history: History, t: int, start: float, *, replay: bool = False) -> Rendered | None:
        """Call t's prompt; ``replay``: only its decisions (what later calls read), no prompt kept."""
        self._receive(history, t)
        n = len(self._recv)
        if n:
            last = history.step(n)
            raw = last.meta.get("time")
            self._seen = (n, last, raw, self._recv.times[n - 1], self._user_pins)
        self._advance_marks(history, t)
        p = self.config.policy
        seed = target(self.config, t, plain=self._plain is not None)
        if seed < self._behind.frontier or (not p.chunk and self._folded_changed()):
            self._reset_behind()
        self._behind.advance(history, seed, self._recv.forms, self._folded, self._spans)
        folds = self._folds
        if folds.pending and self._defers:
            closed, shown_now = self._defer(history, seed, t)
        else:
            shown_now = folds.apply_all()
            closed = folds.shown()
            self._boundary(history, seed, t, closed)
        layout = self._layout
        assert layout is not None
        b = layout.b
        tail: list[Message] = []  # this call's own messages: the prefix and the layout are shared
        tail_origins: list[Origin] = []
        after = closed.after(b)
        self._tail(history, b, t, after, tail, tail_origins)
        if self._budget and t and self._budget_done < t:
            self._add_budget_line(history, t, tail, layout, plain=not after)
        if self._view is not None and t:  # the ledger view closes the prompt: it costs its own size
            pinned = self._pinned(t, t)
            tail.append({"role": "user", "content": self._view.text(t, self._spans, self._ledger, pinned)})
            tail_origins.append(_LEDGER_VIEW)
        messages = Joined(self._prefix, layout.msgs, tail)
        origins = (self._prefix_origins, layout.origins, tail_origins)
        stable = 0 if replay else self._stable(messages, layout, t)
        if after:
            chars = self._prefix_chars + layout.total_chars + sum(message_chars(m) for m in tail)
        else:
            chars = self._prefix_chars + layout.total_chars + self._recv.chars(b, t)
        if shown_now:  # what the folds shown first at this call cost the cache
            same = self._last.known_same(layout, t)
            self._folds.note_costs(shown_now, t, same, self._last.msgs.since(same), messages.since(same))
        sent = self._last  # updated in place: the cache view holds it, and no call is cheaper
        sent.msgs, sent.origins, sent.layout, sent.base, sent.chars, sent.t = messages, origins, layout, layout, chars, t
        restores = bisect.bisect_right(self._recv.restores, t) if self._recv.restores else 0
        stubs, trimmed, folded, notes = layout.counts
        self._t = t
        ms = (time.perf_counter() - start) * 1000
        self._again = (messages, origins, (t, b, stubs, trimmed, folded, notes, restores, ms, stable))
        self._plain_sent = None
        plain = self._plain
        if plain is not None and self._plain_or_switch(history, t):
            if replay:
                plain.advance(history, t)  # what the next plain prompt reads of this one, not the prompt
            else:
                self._plain_sent = LazyRendered(*plain.prompt(history, t))
        else:
            self._peak_chars = max(self._peak_chars, chars)
        if replay:
            self._again = None  # a replayed call's prompt is not kept (``render`` replays again if asked)
            return None
        return self._plain_sent or LazyRendered(*self._again)

    def _plain_or_switch(self, history: History, t: int) -> bool:
        """Whether the plain history is sent again (False: the protocol's prompt from now on). The
        switch recomputes from after the prefix (from a hidden demonstration on, not within its
        ``prompt.demo_calls`` first calls), like a move; it happens when the rule says that pays against
        the plain prompt (cached up to this call's outputs), or when the agent used a context command."""
        plain = self._plain
        assert plain is not None
        size, outputs = plain.size(history, t)
        used = bool(self._recv.restores or self._ledger.ops or self._spans.spans or self._pins.events or self._user_pins)
        same, common = plain.shared(self._prefix)
        full = Candidate(self._last.chars, common)
        if used or (
            (same == len(plain.prefix) or t >= self.config.prompt.demo_calls) and full.size < size
            and should_move(self.config, t, Candidate(size, size - outputs), full, self._recv.idle(t), self._peak_chars)
        ):
            self._plain = None
            assert self._again is not None
            m, o, a = self._again
            self._again = (m, o, (*a[:-1], same))  # what the last prompt shares: the prefix, up to a hidden demonstration
            return False
        self._peak_chars = max(self._peak_chars, size)
        return True

    def _stable(self, messages: Joined[Message], layout: Layout, t: int) -> int:
        prompt = self._last
        last = prompt.msgs
        if self._t != t - 1 or not last:
            return 0
        if layout is prompt.base:
            tail, before = messages.tail, last.tail
            if len(tail) >= len(before) and tail[: len(before)] == before:  # the usual call: the last prompt, then more
                return len(last)
            same = len(self._prefix) + len(layout.msgs)
        else:
            same = len(self._prefix) + layout.reused
        return messages.common(last, min(same, len(last), len(messages)))

    def _add_budget_line(self, history: History, t: int, tail: list[Message], layout: Layout, *, plain: bool) -> None:
        """Step t's last output, new in this prompt, ends with the size of this very prompt."""
        self._budget_done = t
        recv = self._recv
        msgs = recv.forms[t - 1].msgs
        if not tail or tail[-1] is not msgs[-1] or len(msgs) < 2:
            return
        # running totals; a tail without span blocks holds steps b+1..t as received
        tail_chars = recv.chars(layout.b, t) if plain else sum(message_chars(m) for m in tail)
        size = self._prefix_chars + layout.total_chars + tail_chars
        tail[-1] = recv.add_line(t, self._budget_line(size + 60), history)  # + the line itself

    def _receive(self, history: History, t: int) -> None:
        for s in history.steps_between(len(self._recv), t):
            self._spans.observe(s)
            self._ledger.observe(s)
            self._pins.observe(s)
            if self._objects is not None:
                self._objects.observe(s)
            note = self._spans.reminder(s.index)
            self._recv.add(s, received_form(s, self.config, note), note, step_time(s))

    def _same(self, history: History) -> bool:
        """Whether ``history`` starts with the steps seen, by content: digests chain the prefix;
        recorded times are not in digests, and the last one decides whether the cache was cold."""
        seen = self._seen
        if seen is None:
            return False
        n, last, raw, at, pins = seen
        if n > len(history) or history.pins != pins:
            return False
        if isinstance(last, str):  # no step seen: the digest of the whole history
            return history.digest == last
        step = history.step(n)
        if step is last and step.meta.get("time") is raw:  # the same steps (the usual case)
            return True
        return step.digest == last.digest and step_time(step) == at

    def _advance_marks(self, history: History, t: int) -> None:
        if self.config.policy.fold:  # else the marks are never read
            for s in history.steps_between(self._marks_t, t):
                for i in valid_marks(s, self.config.policy.k):
                    if i not in self._folded:
                        self._folded.add(i)
                        bisect.insort(self._folded_order, i)
        self._marks_t = max(self._marks_t, t)

    def _folded_changed(self) -> bool:
        # behind.folded holds only steps of self._folded up to the frontier (the fold stage takes them
        # from it, and it only grows): they differ exactly when the counts do
        return bisect.bisect_right(self._folded_order, self._behind.frontier) != len(self._behind.folded)

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
        return kept.b, self._hidden(kept.b, t), ids, self._pinned(kept.b, t, _reach(kept.b, spans))

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
            self._peak_chars, until_seed(self.config, t, kept.b, moved.b),
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
            if not apply and kept.b != seed:  # a move the rule makes anyway (as ``_boundary`` decides it) takes the folds along
                plain = self._layout_at(history, seed, t, shown)
                apply = should_move(
                    self.config, t, base, self._cache.candidate(history, plain, t, shown), idle, self._peak_chars,
                    until_seed(self.config, t, kept.b, seed),
                )
        if apply:
            self._commit(moved)
            return every, folds.apply_all()
        return shown, []

    def _layout_at(self, history: History, b: int, t: int, closed: ClosedSpans) -> Layout:
        """The layout of steps 1..b, from the committed one (or the cached candidate) when unchanged."""
        spans, ids = closed.upto(b)
        hidden = self._hidden(b, t)
        pinned = self._pinned(b, t, _reach(b, spans))
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

    # ---- agent-chosen folds -------------------------------------------------------------------

    def _tail(self, h: History, b: int, t: int, spans: list[Span], msgs: list[Message], origins: list[Origin]) -> None:
        """Steps b+1..t as received, except closed spans: one block at their first step (with the
        protected outputs and user messages of the steps it covers after it)."""
        pins = self._pinned(b, t, t if spans else None)
        if not spans and (not pins or all(p[0] <= b for p in pins)):  # every step as received
            self._recv.extend_plain(b, t, msgs, origins)
            return
        self._folds.tail(h, b, t, spans, self._recv.forms, pins, msgs, origins)


def _reach(b: int, spans: list[Span]) -> int:
    """How far the layout of steps 1..b folds: to the end of a span that straddles b (its block is
    behind the boundary), whose protected outputs and user messages it must keep after the block."""
    return max([b, *(s.end for s in spans if s.end is not None and s.end > b)])

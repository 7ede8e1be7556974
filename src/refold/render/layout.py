"""Stage 4: lay out steps 1..b behind the boundary, reusing the previous layout wherever it is unchanged.

Each step is shaped by the mechanisms (``render.mechanism``): spans are one block at their first
step, adjacent folded steps share one note, masked and ledger-hidden outputs become notes, and a
step whose stubs cite hidden content is shown as received (nothing may point at what is not
shown). A boundary move changes few steps: when every mechanism names the steps it changed
(``dirty_steps``), only those steps' units are shaped again and the runs of units between them
are copied from the previous layout (sharing its rope chunks: no per-step work); otherwise the
layout is rebuilt from the first step a mechanism reports (``dirty_from``).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

from ..mechanisms.fold import note_text
from ..mechanisms.pins import Part, pinned_note
from ..mechanisms.spans import Span, cover_map
from ..types import Message, Origin, Shown, Step
from .mechanism import LayoutView, Pins, StepPlan
from .received import message_chars
from .rope import Builder, Rope, empty

_SERIALS = itertools.count()
Hidden = tuple[tuple[int, int, str], ...]
Counts = tuple[int, int, int, int]  # stubs, trimmed, folded steps, notes
STEP, FOLD, SPAN = 0, 1, 2  # the kind of unit a step belongs to
_W = 1 << 32  # counts packed in one int per step, so that a run's total is one C-level sum()


def _pack(stubs: int, trimmed: int, folded: int, notes: int) -> int:
    return stubs + trimmed * _W + folded * _W**2 + notes * _W**3


def _unpack(v: int) -> Counts:
    return v % _W, v // _W % _W, v // _W**2 % _W, v // _W**3


@dataclass(slots=True)
class Layout:
    """Steps 1..b as shown. Per message: ``msgs``, ``origins``, ``lens`` (content characters); per
    step i (item i-1): ``sizes`` (messages its unit added at it), ``tallies`` (packed counts it
    added), ``group_of`` (first step of its unit) and ``kinds``. Ropes: a later layout shares
    their chunks wherever it is unchanged."""

    b: int
    spans: tuple[str, ...]
    hidden: Hidden
    masked_upto: int  # how many of Behind.mask_order this layout reflects
    pinned: frozenset[Part] = frozenset()  # (step, -1 reply | output) shown as received
    span_ranges: dict[str, tuple[int, int]] = field(default_factory=dict)
    msgs: Rope[Message] = field(default_factory=empty)
    origins: Rope[Origin] = field(default_factory=empty)
    lens: Rope[int] = field(default_factory=lambda: empty(numeric=True))
    sizes: Rope[int] = field(default_factory=lambda: empty(numeric=True))
    tallies: Rope[int] = field(default_factory=lambda: empty(numeric=True))
    group_of: Rope[int] = field(default_factory=empty)
    kinds: Rope[int] = field(default_factory=empty)
    counts: Counts = (0, 0, 0, 0)
    reused: int = 0  # leading messages taken unchanged from the previous layout ...
    base: int = -1  # ... the one with this serial (-1: laid out from the start)
    serial: int = field(default_factory=lambda: next(_SERIALS))

    @property
    def total_chars(self) -> int:
        return self.lens.total

    def chars_before(self, m: int) -> int:
        """Content characters of the first ``m`` messages."""
        return self.lens.sum_to(m)


def first_change(prev: Layout | None, view: LayoutView) -> int:
    """The first step whose rendering may differ from ``prev``'s (1 when there is no ``prev``)."""
    if prev is None:
        return 1
    start = min(prev.b + 1, view.b + 1)  # steps that crossed the boundary
    for mechanism in view.mechanisms:
        dirty = mechanism.dirty_from(prev, view)
        if dirty is not None:
            start = min(start, dirty)
    if 1 < start <= len(prev.group_of) + 1:
        start = prev.group_of[start - 2]  # a note or block that step start-1 belongs to may grow
    return max(1, start)


def dirty_steps(prev: Layout, view: LayoutView) -> list[int] | None:
    """Steps 1..prev.b whose shaping may differ from ``prev``'s, ascending; None when a mechanism
    cannot say (it only has ``dirty_from``) or the boundary went back."""
    if view.b < prev.b:
        return None
    out: set[int] = set()
    for mechanism in view.mechanisms:
        steps = getattr(mechanism, "dirty_steps", None)  # ``Incremental``; a runtime isinstance is slow
        if steps is None:
            return None
        out.update(steps(prev, view))
    return sorted(i for i in out if 1 <= i <= prev.b)


def lay_out(
    view: LayoutView,
    block: Callable[[Span], tuple[Message, Origin]],
    notes: dict[tuple[int, int], str],
    note_lines: dict[int, str],
    prev: Layout | None,
) -> Layout:
    """The layout of steps 1..b: units of ``prev`` copied where no mechanism changed them, the rest
    shaped by the view's mechanisms in order (``render.mechanism``)."""
    b, behind = view.b, view.behind
    reversible = view.config.policy.reversible
    view.gone = {(s, j): kind for s, j, kind in view.hidden}
    view.ledger_steps = {s for s, _, _ in view.hidden}
    start = first_change(prev, view)
    out = Layout(
        b, tuple(s.id for s in view.spans), view.hidden, len(behind.mask_order), view.pinned,
        {s.id: (s.begin, s.end or s.begin) for s in view.spans},
    )
    dirty: list[int] = []
    splice = False  # copy unchanged units after the first change too
    if prev is None:
        start, copy_until = 1, 1  # nothing to copy
    else:
        found = dirty_steps(prev, view)
        if found is None:
            copy_until = start  # copy steps before the first change only
        else:
            dirty, copy_until, splice = found, prev.b + 1, True
    view.pins_of = {}
    if any(isinstance(m, Pins) for m in view.mechanisms):  # pinned parts of folded steps: verbatim notes
        for ps, pj in sorted(view.pinned):
            view.pins_of.setdefault(ps, []).append(pj)
    lo = start  # no step before lo is shaped again: the unit before the first changed one at the earliest
    if dirty and prev is not None:
        lo = min(lo, prev.group_of[dirty[0] - 2] if dirty[0] > 1 else 1)
    view.cover = cover_map([s for s in view.spans if (s.end or 0) >= lo])
    mechanisms = view.mechanisms
    msgs: Builder[Message] = Builder()
    origins: Builder[Origin] = Builder()
    lens: Builder[int] = Builder(numeric=True)
    sizes: Builder[int] = Builder(numeric=True)
    tallies: Builder[int] = Builder(numeric=True)
    group_of: Builder[int] = Builder()
    kinds: Builder[int] = Builder()
    stubs = trimmed = folded = n_notes = 0
    copied = 0  # packed counts of the units copied so far
    n_msgs = 0
    group: list[Step] = []
    open_step: list[int] = []  # the step shaped last: its unit's first step, kind, and where it began (messages, counts)

    def add(m: Message, o: Origin) -> None:
        nonlocal n_msgs
        msgs.append(m)
        origins.append(o)
        lens.append(message_chars(m))
        n_msgs += 1

    def tally() -> int:
        return copied + _pack(stubs, trimmed, folded, n_notes)

    def close_step() -> None:  # the step shaped last ends here: its size and counts are known
        if open_step:
            g, kind, at_msgs, at_tally = open_step
            sizes.append(n_msgs - at_msgs)
            tallies.append(tally() - at_tally)
            group_of.append(g)
            kinds.append(kind)
            open_step.clear()

    def open_(g: int, kind: int) -> None:
        close_step()
        open_step.extend((g, kind, n_msgs, tally()))

    def add_pinned(steps: list[Step]) -> None:  # the pinned parts of folded steps, verbatim
        for s in steps:
            for j in view.pins_of.get(s.index, ()):
                if 1 + j < len(view.received[s.index - 1].msgs):
                    text = pinned_note(s.index, j, len(s.observations), s.reply_text if j == -1 else s.output_texts[j])
                    add({"role": "user", "content": text}, Origin(s.index, "pin", Shown.PINNED, (s.index,)))

    def flush() -> None:
        nonlocal n_notes
        if group:
            covers = tuple(s.index for s in group)
            key = (covers[0], covers[-1])  # a run of adjacent steps: its ends name it
            text = notes.get(key)
            if text is None:
                text = notes[key] = note_text(group, reversible=reversible, lines_cache=note_lines)
            add({"role": "user", "content": text}, Origin(covers[0], "note", Shown.NOTE, covers))
            n_notes += 1
            add_pinned(group)
            group.clear()

    i, k = 1, 0  # the next step; the index of the next changed step in ``dirty``
    group_start = 0
    while i <= b:
        if prev is not None and not group and i < copy_until:
            while k < len(dirty) and dirty[k] < i:
                k += 1
            nd = min(dirty[k] if k < len(dirty) else copy_until, copy_until)
            j = nd
            if splice:
                if j <= prev.b:
                    j = prev.group_of[j - 1]  # the unit holding the changed step is shaped whole
                if j == nd and i < j <= b and prev.kinds[j - 2] == FOLD:
                    j = prev.group_of[j - 2]  # a changed step may join the note before it
            if j > i and prev.group_of[i - 1] == i:  # whole units i..j-1 of prev, unchanged
                close_step()
                pm, pe = prev.sizes.sum_to(i - 1), prev.sizes.sum_to(j - 1)
                if i == 1:
                    out.reused, out.base = pe, prev.serial
                msgs.copy(prev.msgs, pm, pe)
                origins.copy(prev.origins, pm, pe)
                lens.copy(prev.lens, pm, pe)
                n_msgs += pe - pm
                sizes.copy(prev.sizes, i - 1, j - 1)
                tallies.copy(prev.tallies, i - 1, j - 1)
                copied += prev.tallies.sum_to(j - 1) - prev.tallies.sum_to(i - 1)
                group_of.copy(prev.group_of, i - 1, j - 1)
                kinds.copy(prev.kinds, i - 1, j - 1)
                i = j
                continue
        step = view.history.step(i)
        i += 1
        plan = StepPlan.received(step, view)
        for mechanism in mechanisms:
            mechanism.shape(plan, view)
            if plan.unit != "step":
                break
        if plan.unit == "fold" and group:  # joins the open note: same unit
            open_(group_start, FOLD)
            group.append(step)
            folded += 1
            continue
        flush()
        if plan.span is not None:
            span = plan.span
            open_(span.begin, SPAN)
            if step.index == span.begin:
                add(*block(span))
                add_pinned(view.history.steps_between(span.begin - 1, span.end or span.begin))
            continue
        if plan.unit == "fold":
            open_(step.index, FOLD)
            group_start = step.index
            group.append(step)
            folded += 1
            continue
        open_(step.index, STEP)
        for m, o in zip(plan.msgs, plan.origins, strict=True):
            add(m, o)
            if o.shown is Shown.STUB:
                stubs += 1
            elif o.shown is Shown.TRIMMED:
                trimmed += 1
    flush()
    close_step()
    out.counts = _unpack(tally())
    out.msgs, out.origins, out.lens = msgs.build(), origins.build(), lens.build()
    out.sizes, out.tallies, out.group_of, out.kinds = sizes.build(), tallies.build(), group_of.build(), kinds.build()
    return out



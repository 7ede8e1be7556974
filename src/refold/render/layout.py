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
import operator
from collections.abc import Callable
from dataclasses import dataclass, field

from ..mechanisms.fold import note_text
from ..mechanisms.pins import Part, pinned_note
from ..mechanisms.spans import Span, cover_map
from ..types import Message, Origin, Shown, Step
from .builtins import Pins
from .mechanism import LayoutView, StepPlan
from .received import message_chars
from .rope import Builder, Rope, empty

_SERIALS = itertools.count()
_ID = operator.attrgetter("id")  # a span's id
Hidden = tuple[tuple[int, int, str], ...]
Counts = tuple[int, int, int, int]  # stubs, trimmed, folded steps, notes
STEP, FOLD, SPAN = 0, 1, 2  # the kind of unit a step belongs to
_W = 1 << 32  # a step's messages and counts packed in one int, so that a run's total is one C-level sum()


_W2, _W3, _W4 = _W**2, _W**3, _W**4


def _counts(v: int) -> Counts:
    return v // _W % _W, v // _W2 % _W, v // _W3 % _W, v // _W4


@dataclass(slots=True)
class Layout:
    """Steps 1..b as shown. Per message: ``msgs``, ``origins``, ``lens`` (content characters); per
    step i (item i-1): ``steps`` (the messages and counts its unit added at it, packed) and
    ``units`` (first step of its unit * 4 + its kind). Ropes: a later layout shares their
    chunks wherever it is unchanged."""

    b: int
    spans: tuple[str, ...]
    hidden: Hidden
    masked_upto: int  # how many of Behind.mask_order this layout reflects
    pinned: frozenset[Part] = frozenset()  # (step, -1 reply | output) shown as received
    span_ranges: dict[str, tuple[int, int]] = field(default_factory=dict)
    msgs: Rope[Message] = field(default_factory=empty)
    origins: Rope[Origin] = field(default_factory=empty)
    lens: Rope[int] = field(default_factory=lambda: empty(numeric=True))
    steps: Rope[int] = field(default_factory=lambda: empty(numeric=True))
    units: Rope[int] = field(default_factory=empty)
    counts: Counts = (0, 0, 0, 0)
    reused: int = 0  # leading messages taken unchanged from the previous layout ...
    base: int = -1  # ... the one with this serial (-1: laid out from the start)
    serial: int = field(default_factory=lambda: next(_SERIALS))
    gone: dict[tuple[int, int], str] = field(default_factory=dict)  # ``hidden`` by (step, output)
    ledger_steps: set[int] = field(default_factory=set)  # the steps in ``hidden`` (both read, never changed)
    total_chars: int = 0  # content characters of all messages (``lens.total``; read several times per call)

    def chars_before(self, m: int) -> int:
        """Content characters of the first ``m`` messages."""
        return self.lens.sum_to(m)

    def group(self, i: int) -> int:
        """The first step of the unit (note, span block, step) that holds step i."""
        return self.units[i - 1] >> 2

    def kind(self, i: int) -> int:
        return self.units[i - 1] & 3

    def starts(self, i: int) -> int:
        """Where step i's messages begin."""
        return self.steps.sum_to(i - 1) % _W


def first_change(prev: Layout | None, view: LayoutView) -> int:
    """The first step whose rendering may differ from ``prev``'s (1 when there is no ``prev``)."""
    if prev is None:
        return 1
    start = min(prev.b + 1, view.b + 1)  # steps that crossed the boundary
    for mechanism in view.mechanisms:
        dirty = mechanism.dirty_from(prev, view)
        if dirty is not None:
            start = min(start, dirty)
    if 1 < start <= len(prev.units) + 1:
        start = prev.group(start - 1)  # a note or block that step start-1 belongs to may grow
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
    if prev is not None and (prev.hidden is view.hidden or prev.hidden == view.hidden):
        gone, ledger_steps = prev.gone, prev.ledger_steps  # O(ledger ops) per move otherwise
    else:
        gone, ledger_steps = {(s, j): kind for s, j, kind in view.hidden}, {s for s, _, _ in view.hidden}
    view.gone, view.ledger_steps = gone, ledger_steps
    ids = tuple(map(_ID, view.spans))
    if prev is not None and prev.spans == ids:  # the same closed spans: their ranges too (read, never changed)
        ranges = prev.span_ranges
    else:
        ranges = {s.id: (s.begin, s.end or s.begin) for s in view.spans}
    out = Layout(
        b, ids, view.hidden, len(behind.mask_order), view.pinned, ranges, gone=gone, ledger_steps=ledger_steps,
    )
    dirty: list[int] = []
    splice = False  # copy unchanged units after the first change too
    found = None if prev is None else dirty_steps(prev, view)
    if prev is None:
        start, copy_until = 1, 1  # nothing to copy
    elif found is None:
        start = copy_until = first_change(prev, view)  # copy steps before the first change only
    else:
        dirty, copy_until, splice = found, prev.b + 1, True
        start = min(prev.b + 1, view.b + 1)
        if start > 1:
            start = prev.group(start - 1)  # the note or block the last step belongs to may grow
    view.pins_of = {}
    if any(isinstance(m, Pins) for m in view.mechanisms):  # pinned parts of folded steps: verbatim notes
        for ps, pj in sorted(view.pinned):
            view.pins_of.setdefault(ps, []).append(pj)
    lo = start  # no step before lo is shaped again: the unit before the first changed one at the earliest
    if dirty and prev is not None:
        lo = min(lo, prev.group(dirty[0] - 1) if dirty[0] > 1 else 1)
    view.cover = cover_map([s for s in view.spans if (s.end or 0) >= lo])
    mechanisms = view.mechanisms
    msgs: Builder[Message] = Builder()
    origins: Builder[Origin] = Builder()
    lens: Builder[int] = Builder(numeric=True)
    steps: Builder[int] = Builder(numeric=True)
    units: Builder[int] = Builder()
    new_msgs: list[Message] = []  # shaped since the last copied run (appended to the ropes in one go)
    new_origins: list[Origin] = []
    new_lens: list[int] = []
    new_steps: list[int] = []
    new_units: list[int] = []
    shaped = 0  # what shaping added, packed: messages + stubs * _W + trimmed * _W2 + folded * _W3 + notes * _W4
    copied = 0  # what the copied runs added (packed)
    group: list[Step] = []
    open_step: list[int] = []  # the step shaped last: its unit (first step * 4 + kind), and the packed total when it began

    def add(m: Message, o: Origin) -> None:
        nonlocal shaped
        new_msgs.append(m)
        new_origins.append(o)
        new_lens.append(message_chars(m))
        shaped += 1

    def tally() -> int:
        return copied + shaped

    def close_step() -> None:  # the step shaped last ends here: its size and counts are known
        if open_step:
            unit, at = open_step
            new_steps.append(tally() - at)
            new_units.append(unit)
            open_step.clear()

    def open_(g: int, kind: int) -> None:
        close_step()
        open_step.extend((g * 4 + kind, tally()))

    def settle() -> None:  # what was shaped goes into the ropes before a copied run (or at the end)
        close_step()
        if new_msgs:
            msgs.extend(new_msgs)
            origins.extend(new_origins)
            lens.extend(new_lens)
            new_msgs.clear()
            new_origins.clear()
            new_lens.clear()
        if new_steps:
            steps.extend(new_steps)
            units.extend(new_units)
            new_steps.clear()
            new_units.clear()

    def add_pinned(steps: list[Step]) -> None:  # the pinned parts of folded steps, verbatim
        for s in steps:
            for j in view.pins_of.get(s.index, ()):
                if 1 + j < len(view.received[s.index - 1].msgs):
                    text = s.reply_text if j == -1 else s.output_texts[j]
                    text = pinned_note(s.index, j, len(s.observations), text, said=j in s.user_messages)
                    add({"role": "user", "content": text}, Origin(s.index, "pin", Shown.PINNED, (s.index,)))

    def flush() -> None:
        nonlocal shaped
        if group:
            covers = tuple(s.index for s in group)
            key = (covers[0], covers[-1])  # a run of adjacent steps: its ends name it
            text = notes.get(key)
            if text is None:
                text = notes[key] = note_text(group, reversible=reversible, lines_cache=note_lines)
            add({"role": "user", "content": text}, Origin(covers[0], "note", Shown.NOTE, covers))
            shaped += _W4
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
                    j = prev.group(j)  # the unit holding the changed step is shaped whole
                if j == nd and i < j <= b and prev.kind(j - 1) == FOLD:
                    j = prev.group(j - 1)  # a changed step may join the note before it
            if j > i and prev.group(i) == i:  # whole units i..j-1 of prev, unchanged
                settle()
                before, upto = prev.steps.sum_to(i - 1), prev.steps.sum_to(j - 1)
                pm, pe = before % _W, upto % _W
                if i == 1:
                    out.reused, out.base = pe, prev.serial
                msgs.copy(prev.msgs, pm, pe)
                origins.copy(prev.origins, pm, pe)
                lens.copy(prev.lens, pm, pe)
                steps.copy(prev.steps, i - 1, j - 1)
                units.copy(prev.units, i - 1, j - 1)
                copied += upto - before
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
            shaped += _W3
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
            shaped += _W3
            continue
        open_(step.index, STEP)
        for m, o in zip(plan.msgs, plan.origins, strict=True):
            add(m, o)
            if o.shown is Shown.STUB:
                shaped += _W
            elif o.shown is Shown.TRIMMED:
                shaped += _W2
    flush()
    settle()
    out.counts = _counts(tally())
    out.msgs, out.origins, out.lens = msgs.build(), origins.build(), lens.build()
    out.total_chars = out.lens.total
    out.steps, out.units = steps.build(), units.build()
    return out

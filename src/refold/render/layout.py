"""Stage 4: lay out steps 1..b behind the boundary, reusing the previous layout up to the first change.

Each step is shaped by the mechanisms (``render.mechanism``): spans are one block at their first
step, adjacent folded steps share one note, masked and ledger-hidden outputs become notes, and a
step whose stubs cite hidden content is shown as received (nothing may point at what is not
shown). A boundary move changes the layout only from the first step a mechanism reports
(``dirty_from``), so only that part is laid out again.
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

_SERIALS = itertools.count()
Hidden = tuple[tuple[int, int, str], ...]
Counts = tuple[int, int, int, int]  # stubs, trimmed, folded steps, notes


@dataclass(slots=True)
class Layout:
    """Steps 1..b as shown; ``starts[i-1]`` is where step i's messages begin (for a restart)."""

    b: int
    spans: tuple[str, ...]
    hidden: Hidden
    masked_upto: int  # how many of Behind.mask_order this layout reflects
    pinned: frozenset[Part] = frozenset()  # (step, -1 reply | output) shown as received
    msgs: list[Message] = field(default_factory=list)
    origins: list[Origin] = field(default_factory=list)
    chars: list[int] = field(default_factory=list)  # running total of content characters
    starts: list[int] = field(default_factory=list)
    counts_at: list[Counts] = field(default_factory=list)
    group_of: list[int] = field(default_factory=list)  # first step of the unit (note/span) holding step i
    counts: Counts = (0, 0, 0, 0)
    reused: int = 0  # leading messages taken unchanged from the previous layout ...
    base: int = -1  # ... the one with this serial (-1: laid out from the start)
    serial: int = field(default_factory=lambda: next(_SERIALS))

    @property
    def total_chars(self) -> int:
        return self.chars[-1] if self.chars else 0


def first_change(prev: Layout | None, view: LayoutView) -> int:
    """The first step whose rendering may differ from ``prev``'s (1 when there is no ``prev``)."""
    if prev is None:
        return 1
    start = min(prev.b + 1, view.b + 1)  # steps that crossed the boundary
    for mechanism in view.mechanisms:
        dirty = mechanism.dirty_from(prev, view)
        if dirty is not None:
            start = min(start, dirty)
    if start > 1 and start - 1 <= len(prev.group_of):
        start = prev.group_of[start - 2]  # a note or block that step start-1 belongs to may grow
    return max(1, start)


def lay_out(
    view: LayoutView,
    block: Callable[[Span], tuple[Message, Origin]],
    notes: dict[tuple[int, int], str],
    note_lines: dict[int, str],
    prev: Layout | None,
) -> Layout:
    """The layout of steps 1..b, reusing ``prev`` up to its first change; each step shaped by the
    view's mechanisms in order (``render.mechanism``)."""
    b, behind = view.b, view.behind
    reversible = view.config.policy.reversible
    start = first_change(prev, view)
    out = Layout(b, tuple(s.id for s in view.spans), view.hidden, len(behind.mask_order), view.pinned)
    view.pins_of = {}
    if any(isinstance(m, Pins) for m in view.mechanisms):  # pinned parts of folded steps: verbatim notes
        for ps, pj in sorted(view.pinned):
            view.pins_of.setdefault(ps, []).append(pj)
    if prev is not None and start > 1:
        cut = prev.starts[start - 1] if start - 1 < len(prev.starts) else len(prev.msgs)
        out.msgs = prev.msgs[:cut]
        out.origins = prev.origins[:cut]
        out.chars = prev.chars[:cut]
        out.starts = prev.starts[: start - 1]
        out.counts_at = prev.counts_at[: start - 1]
        out.group_of = prev.group_of[: start - 1]
        stubs, trimmed, folded, n_notes = prev.counts_at[start - 1] if start - 1 < len(prev.counts_at) else prev.counts
        out.reused = cut
        out.base = prev.serial
    else:
        start = 1
        stubs = trimmed = folded = n_notes = 0
    msgs, origins, chars = out.msgs, out.origins, out.chars
    view.cover = cover_map([s for s in view.spans if (s.end or 0) >= start])  # only the steps laid out again
    view.gone = {(s, j): kind for s, j, kind in view.hidden}
    view.ledger_steps = {s for s, _, _ in view.hidden}
    mechanisms = view.mechanisms
    group: list[Step] = []

    def add(m: Message, o: Origin) -> None:
        msgs.append(m)
        origins.append(o)
        chars.append((chars[-1] if chars else 0) + message_chars(m))

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

    for step in view.history.steps_between(start - 1, b):
        plan = StepPlan.received(step, view)
        for mechanism in mechanisms:
            mechanism.shape(plan, view)
            if plan.unit != "step":
                break
        if plan.unit == "fold" and group:  # joins the open note: same unit, same start
            out.starts.append(out.starts[-1])
            out.group_of.append(out.group_of[-1])
            out.counts_at.append(out.counts_at[-1])
            group.append(step)
            folded += 1
            continue
        flush()
        out.starts.append(len(msgs))
        out.counts_at.append((stubs, trimmed, folded, n_notes))
        if plan.span is not None:
            span = plan.span
            out.group_of.append(span.begin)
            if step.index == span.begin:
                add(*block(span))
                add_pinned(view.history.steps_between(span.begin - 1, span.end or span.begin))
            continue
        out.group_of.append(step.index)
        if plan.unit == "fold":
            group.append(step)
            folded += 1
            continue
        for m, o in zip(plan.msgs, plan.origins, strict=True):
            add(m, o)
            if o.shown is Shown.STUB:
                stubs += 1
            elif o.shown is Shown.TRIMMED:
                trimmed += 1
    flush()
    out.counts = (stubs, trimmed, folded, n_notes)
    return out


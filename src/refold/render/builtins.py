"""The built-in mechanisms, in ``Config.mechanisms``' default order: spans (seed 001), STALE folds,
dedup stubs, ledger folds (seed 002), [masking, condensed old replies: render/masking_mechanisms.py],
replies as objects, pins.

Each is a ``refold.render.mechanism.Mechanism``: it shapes a step's ``StepPlan`` and names the
steps it changed since the previous layout; most also have a ``behind`` stage that decides, as
steps cross the boundary, what the shaping then reads (dedup forms, the masked set).
"""

from __future__ import annotations

import bisect
import operator
from collections.abc import Iterable
from typing import TYPE_CHECKING

from ..config import Config
from ..mechanisms.dedup import DedupIndex
from ..mechanisms.ledger import hidden_outputs
from ..mechanisms.objects import hidden_reply
from ..messages import label, with_content, with_text
from ..types import Origin, Shown, Step, content_text
from .mechanism import BaseStage, LayoutView, Stage, StepPlan
from .received import kept_notes

if TYPE_CHECKING:
    from .behind import Behind, Form
    from .layout import Layout
    from .received import Received


_ID = operator.attrgetter("id")  # a span's id


def gone_changed(prev: Layout, view: LayoutView) -> set[int]:
    """Steps whose outputs became hidden (or shown again) since ``prev``: masked, or ledger ops."""
    out = set(view.behind.mask_order[prev.masked_upto :])
    if view.hidden != prev.hidden:
        out.update(view.ledger_steps ^ {s for s, _, _ in prev.hidden})
    return out


def in_span(view: LayoutView, j: int) -> bool:
    """Whether step j is inside a span block of the layout (``view.spans``: by first step, disjoint)."""
    k = bisect.bisect_right(view.spans, j, key=lambda s: s.begin) - 1
    return k >= 0 and (view.spans[k].end or view.spans[k].begin) >= j


def span_changed(prev: Layout, view: LayoutView) -> list[int]:
    """Steps that joined or left a span block since ``prev`` (a fold after the fact covers steps
    whose outputs later stubs may cite)."""
    if tuple(map(_ID, view.spans)) == prev.spans:
        return []
    now = {s.id: (s.begin, s.end or s.begin) for s in view.spans}
    changed = [now[i] for i in now.keys() - prev.span_ranges.keys()]
    changed += [prev.span_ranges[i] for i in prev.span_ranges.keys() - now.keys()]
    return [i for lo, hi in changed for i in range(lo, hi + 1)]


def hidden_changed(prev: Layout, view: LayoutView) -> set[int]:
    """Steps with a ledger fold or drop added or removed since ``prev``."""
    return set() if view.hidden == prev.hidden else {s for s, _, _ in set(view.hidden) ^ set(prev.hidden)}


# ---- the built-in mechanisms, in their default order ------------------------------------------


class Spans:
    """A step inside a closed span is shown by the span's block (seed 001)."""

    def behind(self, config: Config) -> Stage:
        return _SpansStage()

    def shape(self, plan: StepPlan, view: LayoutView) -> None:
        span = view.cover.get(plan.step.index)
        if span is not None:
            plan.unit, plan.span = "span", span

    def dirty_from(self, prev: Layout, view: LayoutView) -> int | None:
        if tuple(map(_ID, view.spans)) == prev.spans:
            return None
        # a span that stopped being outermost lies inside a new one, which starts no later
        return min((s.begin for s in view.spans if s.id not in prev.spans), default=None)

    def dirty_steps(self, prev: Layout, view: LayoutView) -> Iterable[int]:
        return span_changed(prev, view)


class _SpansStage(BaseStage):
    """Steps folded into a span are no longer shown: their outputs stop being dedup sources."""

    def __init__(self) -> None:
        self.retired = 0  # closed spans retired so far

    def cross(self, step: Step, behind: Behind) -> None:
        closed = behind.closed
        while self.retired < len(closed) and (closed[self.retired].end or 0) < step.index:
            for i in closed[self.retired].covers:
                behind.retire(i)
            self.retired += 1


class Fold:
    """A step the agent marked STALE joins the note of its adjacent folded steps."""

    def behind(self, config: Config) -> Stage:
        return _FoldStage()

    def shape(self, plan: StepPlan, view: LayoutView) -> None:
        if view.behind.forms[plan.step.index - 1] is None:
            plan.unit = "fold"

    def dirty_from(self, prev: Layout, view: LayoutView) -> int | None:
        return None

    def dirty_steps(self, prev: Layout, view: LayoutView) -> Iterable[int]:
        return ()  # a step's STALE fold is fixed once it is behind the boundary


class _FoldStage(BaseStage):
    def cross(self, step: Step, behind: Behind) -> None:
        if step.index in behind.marks:  # its STALE window has closed: folded for good
            behind.folded.add(step.index)




class Dedup:
    """Repeated outputs as stubs and trims, unless a stub would point at hidden content."""

    def behind(self, config: Config) -> Stage:
        return _DedupStage(config)

    def shape(self, plan: StepPlan, view: LayoutView) -> None:
        form = view.behind.forms[plan.step.index - 1]
        if form is not None and not any(view.is_gone(j) or in_span(view, j) for j in form.sources):
            plan.show(form.msgs, form.origins)

    def dirty_from(self, prev: Layout, view: LayoutView) -> int | None:
        return None  # a stub cites earlier steps only: the mechanism that hid them reports an earlier step

    def dirty_steps(self, prev: Layout, view: LayoutView) -> Iterable[int]:
        return [i for g in gone_changed(prev, view).union(span_changed(prev, view)) for i in view.behind.citing(g)]


class _DedupStage(BaseStage):
    """Each output crossing the boundary is compared with the shown outputs before it."""

    def __init__(self, config: Config) -> None:
        p = config.policy
        self.on, self.protocol = p.dedup, p.protocol
        self.index = DedupIndex(p.dedup_min_lines, p.dedup_min_chars, p.outline_min_lines, p.reversible)

    def cross(self, step: Step, behind: Behind) -> None:
        for a in step.actions:  # a folded step's writes still make older reads stale
            self.index.note_writes(step.index, a.effects)

    def shape_form(self, step: Step, rec: Received, form: Form, behind: Behind) -> None:
        if not self.on or step.restores:  # a restore is shown as answered, never as a pointer to itself
            return
        infos = [a.effects for a in step.actions]
        fallback = infos[0] if infos else None
        last = len(step.observations) - 1
        said = step.user_messages
        for j, obs in enumerate(step.observations):
            if said and j in said:  # a message to the agent is no output: never stubbed, nor a source
                continue
            body = content_text(obs.get("content"))
            result = self.index.process(step.index, body, infos[j] if j < len(infos) else fallback)
            if result.kind == "received":
                continue
            text = label(step.index, result.text) if self.protocol else result.text
            if j == last:
                text += kept_notes(rec)  # the notes that came with it stay, but a spent reminder
            form.msgs[1 + j] = with_content(obs, text)
            shown = Shown.STUB if result.kind == "stub" else Shown.TRIMMED
            form.origins[1 + j] = Origin(step.index, "output", shown, tuple(dict.fromkeys((step.index, *result.sources))))
            form.sources.update(result.sources)

    def retire(self, i: int) -> None:
        self.index.retire(i)


class Ledger:
    """Outputs the agent folded or dropped (seed 002) become their one-line notes."""

    def shape(self, plan: StepPlan, view: LayoutView) -> None:
        step = plan.step
        if step.index not in view.ledger_steps:
            return
        reversible = view.config.policy.reversible
        for j, text in hidden_outputs(step, view.gone, view.hidden_texts, reversible=reversible):
            plan.put(1 + j, with_content(step.observations[j], text), Origin(step.index, "output", Shown.NOTE, (step.index,)))

    def dirty_from(self, prev: Layout, view: LayoutView) -> int | None:
        if view.hidden == prev.hidden:
            return None
        return min((step for step, _, _ in set(view.hidden) ^ set(prev.hidden)), default=None)

    def dirty_steps(self, prev: Layout, view: LayoutView) -> Iterable[int]:
        return hidden_changed(prev, view)


class ReplyObjects:
    """A reply the agent folded or dropped (``r7``, seed 002) becomes its note, where that is shorter."""

    def shape(self, plan: StepPlan, view: LayoutView) -> None:
        step = plan.step
        i = step.index
        if not view.is_gone(i):
            return
        text = hidden_reply(step, view.gone, view.hidden_texts, reversible=view.config.policy.reversible)
        if text is not None and len(text) < len(content_text(plan.msgs[0].get("content"))):
            plan.put(0, with_text(step.reply, text), Origin(i, "reply", Shown.NOTE, (i,)))

    def dirty_from(self, prev: Layout, view: LayoutView) -> int | None:
        if view.hidden == prev.hidden:
            return None
        return min((step for step, j, _ in set(view.hidden) ^ set(prev.hidden) if j == -1), default=None)

    def dirty_steps(self, prev: Layout, view: LayoutView) -> Iterable[int]:
        return gone_changed(prev, view) | hidden_changed(prev, view)


class Pins:
    """Pinned parts (``History.pin``, the agent's pin, the latest plan) are shown as received.

    Where the step is folded (a note or a span block), the layout adds them as verbatim notes."""

    def shape(self, plan: StepPlan, view: LayoutView) -> None:
        i = plan.step.index
        parts = view.pins_of.get(i)
        if not parts:
            return
        rec = view.received[i - 1]
        for j in parts:
            if 1 + j < len(plan.msgs):
                plan.put(1 + j, rec.msgs[1 + j], Origin(i, "reply" if j == -1 else "output", Shown.PINNED, (i,)))

    def dirty_from(self, prev: Layout, view: LayoutView) -> int | None:
        if view.pinned == prev.pinned:
            return None
        return min((step for step, _ in view.pinned ^ prev.pinned), default=None)

    def dirty_steps(self, prev: Layout, view: LayoutView) -> Iterable[int]:
        return () if view.pinned == prev.pinned else {step for step, _ in view.pinned ^ prev.pinned}

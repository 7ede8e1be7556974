"""The Mechanism protocol: each projection rule shapes how a step behind the boundary is shown.

A layout walks steps 1..b. Each step starts as a ``StepPlan`` holding its messages as first
received; every mechanism of ``Config.mechanisms``, in order, may reshape it (structlog's
processor chain). A mechanism that makes the step part of a larger unit (a span block, a note
of adjacent folded steps) ends the chain for that step::

    plan = StepPlan.received(step, view)
    for mechanism in view.mechanisms:
        mechanism.shape(plan, view)
        if plan.unit != "step":
            break

The facts mechanisms read are computed once, as steps cross the boundary (``render.behind``:
dedup forms, the masked set) or as they arrive (span and ledger books); a mechanism only
decides how they show. The layout is incremental: ``dirty_from`` names the first step whose
shaping may differ from the previous layout's (None: only steps crossing the boundary change).

A mechanism may also name every step it changed (``dirty_steps``, the ``Incremental`` protocol):
when all of the chain do, the layout shapes only those steps' units again and copies the rest
from the previous layout; a mechanism with only ``dirty_from`` makes it rebuild from that step.

Adding a mechanism is one class with ``shape`` (and ``dirty_from``) plus its name in
``Config.mechanisms``: a short name from ``BUILTIN`` or a dotted path, as mini-swe-agent names
its classes (``Config.parse(mechanisms=[..., "mypkg.rules.Pinned"])``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol, runtime_checkable

from ..config import Config
from ..errors import PolicyError
from ..history import History
from ..mechanisms.dedup import DedupIndex
from ..mechanisms.ledger import hidden_outputs
from ..mechanisms.masking import condensed_reply, newly_masked
from ..mechanisms.objects import hidden_reply
from ..mechanisms.pins import Part
from ..mechanisms.spans import Span
from ..messages import label, mask_note, with_content, with_text
from ..types import Message, Origin, Shown, Step, content_text

if TYPE_CHECKING:
    from .behind import Behind, Form
    from .layout import Layout
    from .received import Received

Unit = Literal["step", "fold", "span"]


@dataclass(slots=True)
class StepPlan:
    """How one step behind the boundary is shown: its messages, or the unit it joins."""

    step: Step
    msgs: list[Message]
    origins: list[Origin]
    unit: Unit = "step"  # "fold": joins a note of adjacent folded steps; "span": inside a span's block
    span: Span | None = None
    _owned: bool = False  # msgs/origins are this plan's own lists (else shared with a cached form)

    @classmethod
    def received(cls, step: Step, view: LayoutView) -> StepPlan:
        form = view.received[step.index - 1]
        return cls(step, form.msgs, form.origins)

    def show(self, msgs: list[Message], origins: list[Origin]) -> None:
        """Show these messages (shared, not copied: ``put`` copies before the first edit)."""
        self.msgs, self.origins, self._owned = msgs, origins, False

    def put(self, j: int, msg: Message, origin: Origin) -> None:
        """Replace message ``j`` (0: the reply, 1..: the outputs)."""
        if not self._owned:
            self.msgs, self.origins, self._owned = list(self.msgs), list(self.origins), True
        self.msgs[j] = msg
        self.origins[j] = origin


@dataclass(slots=True)
class LayoutView:
    """What mechanisms read while a layout of steps 1..b is built (and the caches they share)."""

    history: History
    config: Config
    b: int
    spans: list[Span]  # the outermost closed spans that begin at or before b
    hidden: tuple[tuple[int, int, str], ...]  # ledger folds and drops in effect: (step, output, kind)
    behind: Behind
    received: list[Received]
    mechanisms: tuple[Mechanism, ...]
    pinned: frozenset[Part] = frozenset()  # (step, -1 reply | output) shown as received
    pins_of: dict[int, list[int]] = field(default_factory=dict)  # step -> its pinned parts (steps laid out)
    cover: dict[int, Span] = field(default_factory=dict)  # step -> the span that covers it (steps laid out)
    gone: dict[tuple[int, int], str] = field(default_factory=dict)  # (step, output) -> fold|drop
    ledger_steps: set[int] = field(default_factory=set)
    hidden_texts: dict[tuple[int, int, str], str] = field(default_factory=dict)
    reply_texts: dict[int, str | None] = field(default_factory=dict)
    mask_notes: dict[tuple[int, int], Message] = field(default_factory=dict)

    def is_gone(self, i: int) -> bool:
        """Whether step i's outputs are hidden (masked, or folded/dropped by the ledger)."""
        return i in self.behind.masked or i in self.ledger_steps


@runtime_checkable
class Mechanism(Protocol):
    """One projection rule, as the layout applies it to each step behind the boundary."""

    def shape(self, plan: StepPlan, view: LayoutView) -> None:
        """Reshape ``plan`` (its messages, or the unit it joins)."""

    def dirty_from(self, prev: Layout, view: LayoutView) -> int | None:
        """The first step whose shaping may differ from ``prev``'s, or None."""


@runtime_checkable
class Incremental(Protocol):
    """A mechanism that can name every step whose shaping may differ from a previous layout's."""

    def dirty_steps(self, prev: Layout, view: LayoutView) -> Iterable[int]:
        """Steps 1..prev.b whose shaping may differ from ``prev``'s (a superset is fine; steps
        after prev.b are shaped anyway)."""


class Stage(Protocol):
    """What a mechanism does as steps cross the boundary (``render.behind``), once per step and in
    step order, so that it may keep state (dedup's index of shown outputs). A mechanism offers one
    with ``behind(config) -> Stage``; each ``Behind`` gets its own."""

    def cross(self, step: Step, behind: Behind) -> None:
        """Every step as it crosses, folded or not (before its form exists)."""

    def shape_form(self, step: Step, rec: Received, form: Form, behind: Behind) -> None:
        """Reshape the final form of a step that is not folded."""

    def settle(self, b: int, behind: Behind) -> None:
        """The boundary has reached b: every step up to b has crossed."""

    def retire(self, i: int) -> None:
        """Step i's outputs are no longer shown: nothing may cite them."""


class BaseStage:
    """A ``Stage`` that does nothing: subclasses override what they need."""

    def cross(self, step: Step, behind: Behind) -> None:
        pass

    def shape_form(self, step: Step, rec: Received, form: Form, behind: Behind) -> None:
        pass

    def settle(self, b: int, behind: Behind) -> None:
        pass

    def retire(self, i: int) -> None:
        pass


def gone_changed(prev: Layout, view: LayoutView) -> set[int]:
    """Steps whose outputs became hidden (or shown again) since ``prev``: masked, or ledger ops."""
    out = set(view.behind.mask_order[prev.masked_upto :])
    if view.hidden != prev.hidden:
        out.update(view.ledger_steps ^ {s for s, _, _ in prev.hidden})
    return out


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
        if tuple(s.id for s in view.spans) == prev.spans:
            return None
        # a span that stopped being outermost lies inside a new one, which starts no later
        return min((s.begin for s in view.spans if s.id not in prev.spans), default=None)

    def dirty_steps(self, prev: Layout, view: LayoutView) -> Iterable[int]:
        if tuple(s.id for s in view.spans) == prev.spans:
            return ()
        now = {s.id: (s.begin, s.end or s.begin) for s in view.spans}
        changed = [now[i] for i in now.keys() - prev.span_ranges.keys()]
        changed += [prev.span_ranges[i] for i in prev.span_ranges.keys() - now.keys()]
        return [i for lo, hi in changed for i in range(lo, hi + 1)]


class _SpansStage(BaseStage):
    """Steps folded into a span are no longer shown: their outputs stop being dedup sources."""

    def __init__(self) -> None:
        self.retired = 0  # closed spans retired so far

    def cross(self, step: Step, behind: Behind) -> None:
        closed = behind.spans.closed if behind.spans is not None else []
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


KEEP_NOTES = True  # a stub keeps the reminder and notes that came with the output it replaces


class Dedup:
    """Repeated outputs as stubs and trims, unless a stub would point at hidden content."""

    def behind(self, config: Config) -> Stage:
        return _DedupStage(config)

    def shape(self, plan: StepPlan, view: LayoutView) -> None:
        form = view.behind.forms[plan.step.index - 1]
        if form is not None and not any(view.is_gone(j) for j in form.sources):
            plan.show(form.msgs, form.origins)

    def dirty_from(self, prev: Layout, view: LayoutView) -> int | None:
        return None  # a stub cites earlier steps only: the mechanism that hid them reports an earlier step

    def dirty_steps(self, prev: Layout, view: LayoutView) -> Iterable[int]:
        return [i for g in gone_changed(prev, view) for i in view.behind.citing(g)]


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
        if not self.on or step.restore_of:  # a restore is shown as answered, never as a pointer to itself
            return
        infos = [a.effects for a in step.actions]
        fallback = infos[0] if infos else None
        last = len(step.observations) - 1
        for j, obs in enumerate(step.observations):
            body = content_text(obs.get("content"))
            result = self.index.process(step.index, body, infos[j] if j < len(infos) else fallback)
            if result.kind == "received":
                continue
            text = label(step.index, result.text) if self.protocol else result.text
            if j == last and KEEP_NOTES:
                text += rec.suffix  # the reminder and notes that came with it stay
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


class Masking:
    """Outputs behind the boundary and old enough become restorable notes (``Policy.mask_after``)."""

    def behind(self, config: Config) -> Stage:
        return _MaskingStage(config)

    def shape(self, plan: StepPlan, view: LayoutView) -> None:
        step = plan.step
        i = step.index
        if i not in view.behind.masked:
            return
        reversible = view.config.policy.reversible
        for j, obs in enumerate(step.observations):
            note = view.mask_notes.get((i, j))
            if note is None:
                note = view.mask_notes[(i, j)] = with_content(obs, mask_note(step, j, reversible=reversible))
            plan.put(1 + j, note, Origin(i, "output", Shown.NOTE, (i,)))

    def dirty_from(self, prev: Layout, view: LayoutView) -> int | None:
        return min(view.behind.mask_order[prev.masked_upto :], default=None)

    def dirty_steps(self, prev: Layout, view: LayoutView) -> Iterable[int]:
        return view.behind.mask_order[prev.masked_upto :]


class _MaskingStage(BaseStage):
    """When the boundary settles, outputs more than ``mask_after`` steps behind it are masked (and
    what cites them); a restore is held visible ``restore_hold`` steps longer."""

    def __init__(self, config: Config) -> None:
        self.policy = config.policy
        self.scanned = 0
        self.restores: set[int] = set()  # restore steps not yet masked

    def cross(self, step: Step, behind: Behind) -> None:
        if step.restore_of:
            self.restores.add(step.index)

    def settle(self, b: int, behind: Behind) -> None:
        p = self.policy
        n = p.mask_after
        if n is None:
            return

        def size_of(i: int) -> int | None:
            form = behind.forms[i - 1]
            if form is None or i in self.restores:
                return None
            return sum(len(content_text(m.get("content"))) for m in form.msgs[1:])

        for i in newly_masked(
            b=b, n=n, scanned=self.scanned, masked=behind.masked,
            size_of=size_of, cited_by=behind.citing, min_chars=p.mask_min_chars,
        ):
            behind.mask(i)
            behind.retire(i)
        self.scanned = max(self.scanned, b - n)
        for i in [r for r in sorted(self.restores) if r <= b - n - p.restore_hold and r not in behind.masked]:
            form = behind.forms[i - 1]
            self.restores.discard(i)
            if form is not None and sum(len(content_text(m.get("content"))) for m in form.msgs[1:]) >= p.mask_min_chars:
                behind.mask(i)


class Replies:
    """Old replies keep their PROGRESS/STALE head, first line and commands; the reasoning is hidden."""

    def shape(self, plan: StepPlan, view: LayoutView) -> None:
        p = view.config.policy
        i = plan.step.index
        if p.mask_after is None or not p.mask_replies or i > view.b - p.mask_after:
            return
        if i not in view.reply_texts:
            view.reply_texts[i] = condensed_reply(plan.step, reversible=p.reversible, min_chars=p.mask_min_chars)
        text = view.reply_texts[i]
        if text:
            plan.put(0, with_text(plan.msgs[0], text), Origin(i, "reply", Shown.NOTE, (i,)))

    def dirty_from(self, prev: Layout, view: LayoutView) -> int | None:
        p = view.config.policy
        if p.mask_after is None or not p.mask_replies:
            return None
        return prev.b - p.mask_after + 1  # replies that became old enough to condense

    def dirty_steps(self, prev: Layout, view: LayoutView) -> Iterable[int]:
        p = view.config.policy
        if p.mask_after is None or not p.mask_replies:
            return ()
        return range(max(1, prev.b - p.mask_after + 1), view.b - p.mask_after + 1)


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


BUILTIN: dict[str, str] = {
    "spans": f"{__name__}.Spans",
    "fold": f"{__name__}.Fold",
    "dedup": f"{__name__}.Dedup",
    "ledger": f"{__name__}.Ledger",
    "masking": f"{__name__}.Masking",
    "replies": f"{__name__}.Replies",
    "objects": f"{__name__}.ReplyObjects",
    "pins": f"{__name__}.Pins",
}


def resolve(specs: Sequence[str]) -> tuple[Mechanism, ...]:
    """The mechanisms named by ``specs`` (short names or dotted paths), instantiated, in order."""
    out: list[Mechanism] = []
    for spec in specs:
        module, _, attr = BUILTIN.get(spec, spec).rpartition(".")
        try:
            factory: Callable[[], object] = getattr(importlib.import_module(module), attr)
        except (ValueError, ImportError, AttributeError):
            raise PolicyError(
                f"invalid config field 'mechanisms': cannot import '{spec}'; built in: {', '.join(BUILTIN)}"
            ) from None
        mechanism = factory() if isinstance(factory, type) else factory
        if not isinstance(mechanism, Mechanism):
            raise PolicyError(f"invalid config field 'mechanisms': '{spec}' has no shape(plan, view) / dirty_from(prev, view)")
        out.append(mechanism)
    return tuple(out)

"""The built-in mechanisms, in ``Config.mechanisms``' default order: spans (seed 001), STALE folds,
dedup stubs, ledger folds (seed 002), masking, condensed old replies, replies as objects, pins.

Each is a ``refold.render.mechanism.Mechanism``: it shapes a step's ``StepPlan`` and names the
steps it changed since the previous layout; most also have a ``behind`` stage that decides, as
steps cross the boundary, what the shaping then reads (dedup forms, the masked set).
"""

from __future__ import annotations

import bisect
import operator
import re
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from ..config import Config
from ..mechanisms.dedup import DedupIndex
from ..mechanisms.ledger import hidden_outputs
from ..mechanisms.masking import condensed_reply, newly_masked
from ..mechanisms.objects import hidden_reply
from ..mechanisms.use import Uses
from ..messages import label, mask_note, with_content, with_text
from ..protocol import CM
from ..types import Origin, Shown, Step, content_text
from .mechanism import BaseStage, LayoutView, Stage, StepPlan
from .received import kept_notes

if TYPE_CHECKING:
    from ..policy import Policy
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


class Masking:
    """Outputs behind the boundary and old enough become restorable notes (``Policy.mask_after``)."""

    def behind(self, config: Config) -> Stage:
        return _MaskingStage(config)

    def shape(self, plan: StepPlan, view: LayoutView) -> None:
        step = plan.step
        i = step.index
        if i not in view.behind.masked:
            return
        p = view.config.policy
        several = len(step.observations) > 1
        said = step.user_messages
        for j, obs in enumerate(step.observations):
            if said and j in said:
                continue  # a message to the agent is never masked (pinned too: ``Pins``)
            if several and plan.origins[1 + j].shown is Shown.RECEIVED and (
                output_chars(content_text(plan.msgs[1 + j].get("content"))) < p.mask_min_chars
            ):
                continue  # the floor holds per output: a short one (a format-error retry) outweighs no note
            note = view.mask_notes.get((i, j))
            if note is None:
                note = view.mask_notes[(i, j)] = with_content(obs, mask_note(step, j, reversible=p.reversible))
            plan.put(1 + j, note, Origin(i, "output", Shown.NOTE, (i,)))

    def dirty_from(self, prev: Layout, view: LayoutView) -> int | None:
        return min(view.behind.mask_order[prev.masked_upto :], default=None)

    def dirty_steps(self, prev: Layout, view: LayoutView) -> Iterable[int]:
        return view.behind.mask_order[prev.masked_upto :]


_LABEL = re.compile(r"\[step \d+\]\n")


def output_chars(text: str) -> int:
    """The size of an output as shown, without refold's own lines: its ``[step N]`` label and the
    ``[context-manager]`` notes after it (a reminder, a span note): a short output stays unmasked
    however many of those a surface adds."""
    body = text[m.end():] if (m := _LABEL.match(text)) else text
    while True:
        cut = body.rfind("\n")
        if cut < 0 or not body[cut + 1 :].startswith(CM):
            return len(body)
        body = body[:cut]


class _MaskingStage(BaseStage):
    """When the boundary settles, outputs more than ``mask_after`` steps behind it are masked (and
    what cites them); a restore is held visible ``restore_hold`` steps longer."""

    def __init__(self, config: Config) -> None:
        self.policy = config.policy
        self.scanned = 0
        self.restores: set[int] = set()  # restore steps not yet masked
        self.short: set[int] = set()  # steps whose every output is no longer than its note
        self.said: dict[int, tuple[int, ...]] = {}  # step -> its user messages (never masked: not sized)
        self.uses = Uses() if config.policy.mask_by == "use" else None
        self.waiting: set[int] = set()  # old enough by arrival, still in use

    def cross(self, step: Step, behind: Behind) -> None:
        if step.user_messages:
            self.said[step.index] = step.user_messages
        if step.restores:
            self.restores.add(step.index)
        p = self.policy
        if p.mask_after is not None and not step.restores and _not_worth_a_note(step, p.reversible, p.mask_min_chars):
            self.short.add(step.index)

    def settle(self, b: int, behind: Behind) -> None:
        p = self.policy
        n = p.mask_after
        if n is None:
            return

        def size_of(i: int) -> int | None:
            form = behind.forms[i - 1]
            if form is None or i in self.restores or i in self.short:
                return None
            said = self.said.get(i, ())
            return sum(output_chars(content_text(m.get("content"))) for j, m in enumerate(form.msgs[1:]) if j not in said)

        held = None
        uses = self.uses
        history = behind.history
        if uses is not None and history is not None:
            # the replies given by the first call at this boundary: the same for every later call
            uses.read_replies(history.step, min(len(history), behind.first_call(b)))
            held = self._held(uses, b - n, behind)
        for i in newly_masked(
            b=b, n=n, scanned=self.scanned, masked=behind.masked,
            size_of=size_of, cited_by=behind.citing, min_chars=p.mask_min_chars,
            held=held, waiting=self.waiting,
        ):
            behind.mask(i)
            behind.retire(i)
            if uses is not None:
                uses.forget(i)
        self.scanned = max(self.scanned, b - n)
        for i in [r for r in sorted(self.restores) if r <= b - n - p.restore_hold and r not in behind.masked]:
            form = behind.forms[i - 1]
            self.restores.discard(i)
            if form is not None and sum(output_chars(content_text(m.get("content"))) for m in form.msgs[1:]) >= p.mask_min_chars:
                behind.mask(i)


    def _held(self, uses: Uses, upto: int, behind: Behind) -> Callable[[int], bool]:
        """Whether step i (or a later step behind the boundary whose stubs cite it: its content
        lives in i) was named by a reply after ``upto``."""
        history = behind.history
        assert history is not None
        memo: dict[int, bool] = {}

        def later(i: int) -> list[int]:  # the steps whose stubs cite i and still show their content
            return [j for j in behind.citing(i) if i < j <= behind.frontier and j not in behind.masked]

        def held(i: int) -> bool:
            # iterative: a polled log makes a chain i <- i+1 <- i+2 ... as long as the run
            stack = [i]
            while stack:
                x = stack[-1]
                if x in memo:
                    stack.pop()
                elif uses.last(history.step(x), self.said.get(x, ())) > upto:
                    memo[x] = True
                    stack.pop()
                else:
                    todo = [j for j in later(x) if j not in memo]
                    if todo:  # citing steps are later ones: no cycle
                        stack.extend(todo)
                    else:
                        memo[x] = any(memo[j] for j in later(x))
                        stack.pop()
            return memo[i]

        return held


_NOTE_MAX = 600  # longer than any mask note (a 40-character command, a summary of at most 300)


def _not_worth_a_note(step: Step, reversible: bool, floor: int) -> bool:
    """Whether no output of ``step`` is longer than the note that would replace it: masking it
    would hide it for nothing (a short output just over the floor, a long command in its note).
    Under the floor it is never masked: no note is made to find out."""
    said = step.user_messages  # never masked: not weighed
    texts = [(j, t) for j, t in enumerate(step.output_texts) if j not in said]
    if not texts or any(len(t) >= _NOTE_MAX for _, t in texts) or all(len(t) < floor for _, t in texts):
        return False
    return all(len(mask_note(step, j, reversible=reversible)) >= len(label(step.index, t)) for j, t in texts)


class Replies:
    """Old replies keep their PROGRESS/STALE head, first line and commands; the reasoning is hidden."""

    def shape(self, plan: StepPlan, view: LayoutView) -> None:
        p = view.config.policy
        i = plan.step.index
        if p.mask_after is None or not p.mask_replies or i > view.b - _reply_after(p):
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
        return prev.b - _reply_after(p) + 1  # replies that became old enough to condense

    def dirty_steps(self, prev: Layout, view: LayoutView) -> Iterable[int]:
        p = view.config.policy
        if p.mask_after is None or not p.mask_replies:
            return ()
        return range(max(1, prev.b - _reply_after(p) + 1), view.b - _reply_after(p) + 1)


def _reply_after(p: Policy) -> int:
    """How many steps behind the boundary a reply stays whole (``Policy.reply_after``)."""
    n = p.reply_after if p.reply_after is not None else p.mask_after
    return n if n is not None else 0


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

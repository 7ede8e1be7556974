"""The built-in masking mechanisms: outputs behind the boundary and old enough become restorable
notes (``Policy.mask_after``; with ``mask_by="use"`` only once no later reply names them, with
``mask_by="edit"`` a file's latest read only once no later reply writes the file), and old
replies are condensed to their PROGRESS/STALE head, first line and commands (``Replies``)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from ..config import Config
from ..mechanisms.edits import Edits
from ..mechanisms.masking import condensed_reply, newly_masked
from ..mechanisms.use import Uses
from ..messages import label, mask_note, with_content, with_text
from ..protocol import CM
from ..types import Origin, Shown, Step, content_text
from .mechanism import BaseStage, LayoutView, Stage, StepPlan

if TYPE_CHECKING:
    from ..policy import Policy
    from .behind import Behind
    from .layout import Layout


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
        by = config.policy.mask_by
        self.uses: Uses | Edits | None = Uses() if by == "use" else Edits() if by == "edit" else None
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


    def _held(self, uses: Uses | Edits, upto: int, behind: Behind) -> Callable[[int], bool]:
        """Whether step i (or a later step behind the boundary whose stubs cite it: its content
        lives in i) was used (named, or its file written: ``uses.last``) by a reply after ``upto``."""
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

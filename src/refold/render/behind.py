"""Stage 2: the final form of every step behind the boundary, and which outputs are masked.

Both only grow as the boundary moves forward: a step's form is fixed once the boundary passes it
(its STALE window has closed and every step it could cite is final too). The boundary visits every
position in order, as a call-by-call run would, so the result does not depend on which calls were
rendered before. That includes what the stages know: at each position they see the spans closed
by the call whose boundary first reached it, not those of the call being rendered (a later
``fold_steps`` of steps already behind the boundary retires them from then on, as it does in a
call-by-call run, and leaves their forms and masks alone).

The work is the mechanisms' (``render.mechanism``): each mechanism with a ``behind(config)``
factory gets a ``Stage`` per ``Behind``, and the stages see every step as it crosses the boundary,
in the chain's order (spans retire what they cover, fold marks STALE steps, dedup rewrites repeated
outputs as stubs, masking masks old outputs when the boundary settles). ``Behind`` only keeps what
they decide: the forms, the masked set, and which steps' stubs cite which.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..config import Config
from ..history import History
from ..mechanisms.spans import Span, SpanBook
from ..messages import with_content
from ..types import Message, Origin, Step, content_text
from .mechanism import BaseStage
from .received import SPENT, Received, kept_notes

if TYPE_CHECKING:
    from .mechanism import Stage


@dataclass(slots=True)
class Form:
    """A step's messages behind the boundary (dedup applied) and the steps its stubs cite."""

    msgs: list[Message]
    origins: list[Origin]
    sources: set[int] = field(default_factory=set)


class Behind:
    """Forms of steps 1..frontier and the masked set, advanced one boundary position at a time."""

    def __init__(self, config: Config, mechanisms: Sequence[object] = ()) -> None:
        self.config = config
        self.frontier = 0
        self.forms: list[Form | None] = []  # per step; None = folded (STALE)
        self.masked: set[int] = set()
        self.mask_order: list[int] = []  # masked steps in the order they were masked
        self.folded: set[int] = set()  # steps pushed as folded
        self.marks: set[int] = set()  # steps the agent marked STALE (as of the current advance)
        self.history: History | None = None
        self.closed: list[Span] = []  # spans closed by the call whose boundary first reached the frontier
        self._cited_by: dict[int, list[int]] = {}  # step -> the later steps whose stubs cite it, ascending
        self.stages: list[Stage] = [make(config) for m in mechanisms if (make := getattr(m, "behind", None)) is not None]
        # per hook, only the stages that do something there (a call per step and stage adds up)
        self._cross = [s.cross for s in self.stages if _overrides(s, "cross")]
        self._shape = [s.shape_form for s in self.stages if _overrides(s, "shape_form")]
        self._settle = [s.settle for s in self.stages if _overrides(s, "settle")]
        self._retire = [s.retire for s in self.stages if _overrides(s, "retire")]

    def advance(self, history: History, to: int, received: list[Received], folded: set[int], spans: SpanBook) -> None:
        """Move the frontier to ``to`` through every boundary position on the way; ``spans`` is
        the book as of the call rendered (its later closings are not seen by earlier positions)."""
        self.marks = folded
        self.history = history  # what a settle may read of the replies given by its first call
        for bb in self._positions(self.frontier, to):
            self.closed = spans.closed_by(self.first_call(bb))
            for s in history.steps_between(self.frontier, bb):
                self._push(s, received[s.index - 1])
            self.frontier = bb
            for settle in self._settle:
                settle(bb, self)

    def citing(self, i: int) -> list[int]:
        """The steps whose stubs cite step i, ascending."""
        return self._cited_by.get(i, [])

    def retire(self, i: int) -> None:
        """Step i's outputs are no longer shown as received: nothing may cite them from now on."""
        for retire in self._retire:
            retire(i)

    def mask(self, i: int) -> None:
        self.masked.add(i)
        self.mask_order.append(i)

    def _positions(self, lo: int, hi: int) -> list[int]:
        """Boundary positions in (lo, hi]: multiples of k with chunking, every step without."""
        p = self.config.policy
        if lo >= hi:
            return []
        if not p.chunk:
            return list(range(lo + 1, hi + 1))
        return [*range((lo // p.k + 1) * p.k, hi, p.k), hi]

    def first_call(self, bb: int) -> int:
        """The first call whose boundary (``Policy.boundary``; ``boundary.target`` under
        ``boundary.position=window``: t - k) is at ``bb`` or past it. A settle reads the replies
        given by then, so a later one would read replies not yet given when the call is rendered."""
        p, b = self.config.policy, self.config.boundary
        if not p.chunk:
            return bb
        if b.position == "window" and b.rule == "cost":
            return bb + p.k  # the seed's formula for bb on its grid; off it, t - k = bb first at t = bb + k
        return (-(-bb // p.k) + 1) * p.k

    def _push(self, step: Step, rec: Received) -> None:
        for cross in self._cross:
            cross(step, self)
        if step.index in self.folded:
            self.forms.append(None)
            return
        form = Form(list(rec.msgs), list(rec.origins))
        if rec.suffix.startswith(SPENT):  # the reminder spoke to the reply after it: behind the boundary it is spent
            last = form.msgs[-1]
            text = content_text(last.get("content"))
            if text.endswith(rec.suffix):
                form.msgs[-1] = with_content(last, text[: -len(rec.suffix)] + kept_notes(rec))
        for shape in self._shape:
            shape(step, rec, form, self)
        for source in sorted(form.sources):
            self._cited_by.setdefault(source, []).append(step.index)
        self.forms.append(form)


def _overrides(stage: object, hook: str) -> bool:
    return getattr(type(stage), hook, None) is not getattr(BaseStage, hook)

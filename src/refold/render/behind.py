"""Stage 2: the final form of every step behind the boundary (dedup), and which outputs are masked.

Both only grow as the boundary moves forward: a step's form is fixed once the boundary passes it
(its STALE window has closed and every step it could cite is final too). The boundary visits every
position in order, as a call-by-call run would, so the result does not depend on which calls were
rendered before.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..config import Config
from ..history import History
from ..mechanisms.dedup import DedupIndex
from ..mechanisms.masking import newly_masked
from ..mechanisms.spans import SpanBook
from ..messages import label, with_content
from ..types import Message, Origin, Shown, Step, content_text
from .received import Received


@dataclass(slots=True)
class Form:
    """A step's messages behind the boundary (dedup applied) and the steps its stubs cite."""

    msgs: list[Message]
    origins: list[Origin]
    sources: set[int] = field(default_factory=set)


KEEP_NOTES = True


class Behind:
    """Forms of steps 1..frontier and the masked set, advanced one boundary position at a time."""

    def __init__(self, config: Config) -> None:
        p = config.policy
        self.config = config
        self.frontier = 0
        self.forms: list[Form | None] = []  # per step; None = folded (STALE)
        self.masked: set[int] = set()
        self.mask_order: list[int] = []  # masked steps in the order they were masked
        self._mask_scanned = 0
        self._dedup = DedupIndex(p.dedup_min_lines, p.dedup_min_chars, p.outline_min_lines, p.reversible)
        self._span_retired = 0
        self.folded: set[int] = set()  # steps pushed as folded
        self._restores: set[int] = set()  # restore steps not yet masked
        self._cited_by: dict[int, list[int]] = {}  # step -> the later steps whose stubs cite it, ascending

    def advance(self, history: History, to: int, received: list[Received], folded: set[int], spans: SpanBook) -> None:
        """Move the frontier to ``to`` through every boundary position on the way."""
        for bb in self._positions(self.frontier, to):
            for s in history.steps_between(self.frontier, bb):
                self._push(s, received[s.index - 1], folded, spans)
            self.frontier = bb
            self._mask(bb)

    def citing(self, i: int) -> list[int]:
        """The steps whose stubs cite step i, ascending."""
        return self._cited_by.get(i, [])

    def _positions(self, lo: int, hi: int) -> list[int]:
        """Boundary positions in (lo, hi]: multiples of k with chunking, every step without."""
        p = self.config.policy
        if lo >= hi:
            return []
        if not p.chunk:
            return list(range(lo + 1, hi + 1))
        return [*range((lo // p.k + 1) * p.k, hi, p.k), hi]

    def _push(self, step: Step, rec: Received, folded: set[int], spans: SpanBook) -> None:
        p = self.config.policy
        infos = [a.effects for a in step.actions]
        for info in infos:
            self._dedup.note_writes(step.index, info)
        closed = spans.closed
        while self._span_retired < len(closed) and (closed[self._span_retired].end or 0) < step.index:
            for i in closed[self._span_retired].covers:  # folded into a span: no longer shown
                self._dedup.retire(i)
            self._span_retired += 1
        if step.restore_of:
            self._restores.add(step.index)
        if step.index in folded:
            self.folded.add(step.index)
            self.forms.append(None)
            return
        form = Form(list(rec.msgs), list(rec.origins))
        if p.dedup and not step.restore_of:  # a restore is shown as answered, never as a pointer to itself
            fallback = infos[0] if infos else None
            last = len(step.observations) - 1
            for j, obs in enumerate(step.observations):
                body = content_text(obs.get("content"))
                result = self._dedup.process(step.index, body, infos[j] if j < len(infos) else fallback)
                if result.kind == "received":
                    continue
                text = label(step.index, result.text) if p.protocol else result.text
                if j == last and KEEP_NOTES:
                    text += rec.suffix  # the reminder and notes that came with it stay
                form.msgs[1 + j] = with_content(obs, text)
                shown = Shown.STUB if result.kind == "stub" else Shown.TRIMMED
                form.origins[1 + j] = Origin(step.index, "output", shown, tuple(dict.fromkeys((step.index, *result.sources))))
                form.sources.update(result.sources)
        for source in sorted(form.sources):
            self._cited_by.setdefault(source, []).append(step.index)
        self.forms.append(form)

    def _mask(self, b: int) -> None:
        p = self.config.policy
        n = p.mask_after
        if n is None:
            return

        def size_of(i: int) -> int | None:
            form = self.forms[i - 1]
            if form is None or i in self._restores:
                return None
            return sum(len(content_text(m.get("content"))) for m in form.msgs[1:])

        for i in newly_masked(
            b=b, n=n, scanned=self._mask_scanned, masked=self.masked,
            size_of=size_of, cited_by=self.citing, min_chars=p.mask_min_chars,
        ):
            self.masked.add(i)
            self.mask_order.append(i)
            self._dedup.retire(i)
        self._mask_scanned = max(self._mask_scanned, b - n)
        for i in [r for r in sorted(self._restores) if r <= b - n - p.restore_hold and r not in self.masked]:
            form = self.forms[i - 1]
            self._restores.discard(i)
            if form is not None and sum(len(content_text(m.get("content"))) for m in form.msgs[1:]) >= p.mask_min_chars:
                self.masked.add(i)
                self.mask_order.append(i)

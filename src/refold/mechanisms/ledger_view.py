"""The ledger view at the end of every self-gc prompt, built per call from what changed.

``objects.view_text`` lists every object to pick the ``view_items`` most recently touched, and
reads every op and every closed span to give each line its status: O(steps) per call, so a
replay grew quadratically. ``LedgerView`` returns the same text from state kept across calls:
the index's ``recency`` (which objects were touched latest, ``mechanisms.recency``), the ops and
closed spans seen so far (both only grow within one renderer), so a call costs about the lines it
lists plus the closed spans, the size of the text itself.
"""

from __future__ import annotations

import bisect

from ..protocol import CM
from .ledger import LedgerBook, Op
from .objects import ObjectIndex, clip, view_text
from .spans import Span, SpanBook

Part = tuple[int, int]


class LedgerView:
    """``view_text(index, t, spans, ledger, pinned)`` for a renderer that calls it at t = 1, 2, ..."""

    def __init__(self, index: ObjectIndex) -> None:
        self.index = index
        self._spans: SpanBook | None = None
        self._closed: list[Span] = []  # the closed spans seen, in closing order
        self._covered: dict[int, str] = {}  # step -> the last closed span covering it
        self._span_lines: list[str] = []
        self._ledger: LedgerBook | None = None
        self._ops: list[Op] = []  # the ops applied, in order
        self._exact: dict[Part, tuple[int, str]] = {}  # (step, sub) -> (op number, kind) of its last op
        self._whole: dict[int, tuple[int, str]] = {}  # step -> the same for ops on every output

    def text(self, t: int, spans: SpanBook, ledger: LedgerBook, pinned: frozenset[Part]) -> str:
        index = self.index
        if index.t != t:  # the index has observed other steps than 1..t: from scratch
            return view_text(index, t, spans, ledger, pinned)
        self._sync_spans(spans)
        self._sync_ops(ledger, t)
        limit = ledger.policy.view_items
        recency = index.recency
        listed = recency.listed
        if len(listed) > limit:
            keep = set(recency.recent(limit, t))
            keep.update(p for p in pinned if p in listed)
            left = len(listed) - len(keep)
        else:
            keep, left = set(listed), 0
        out = [f"{CM} Ledger after step {t} (id kind [status] created/last touched: summary):"]
        for part in sorted(keep):  # the order of ``ObjectIndex.all``: by step, the reply first
            o = index.obj(*part, last=part[0] == t)
            out.append(f"{o.id} {o.kind} [{self._status(part, pinned)}] {o.created_at_turn}/{recency.last(part)}: {clip(o.summary, 120)}")
        if left:
            out.append(f"(+{left} older objects not listed: `search_ledger *` lists them all)")
        out.extend(self._span_lines)
        for sid in spans.stack:
            out.append(f"{sid} span [open since step {spans.spans[sid].begin}]: {spans.spans[sid].question}")
        out.append("`fold <id>` / `drop <id>` shorten an object, `expand <id>` shows it again, `pin <id>` keeps it shown.")
        return "\n".join(out)

    def _status(self, part: Part, pinned: frozenset[Part]) -> str:
        """``objects.status`` without ``states``: the last op on the object, its span, its pin."""
        step, sub = part
        op = self._exact.get(part)
        if sub >= 0:
            whole = self._whole.get(step)
            if whole is not None and (op is None or whole[0] > op[0]):
                op = whole
        state = "" if op is None else "dropped" if op[1] == "drop" else "folded"
        span = self._covered.get(step)
        if span is not None:
            state = (state + ", " if state else "") + f"in span {span}"
        if part in pinned:
            state = (state + ", " if state else "") + "pinned"
        return state or "shown"

    def _sync_spans(self, spans: SpanBook) -> None:
        closed, seen = spans.closed, self._closed
        if spans is not self._spans or len(closed) < len(seen) or (seen and closed[len(seen) - 1] is not seen[-1]):
            self._spans, seen, self._covered, self._span_lines = spans, [], {}, []
            self._closed = seen
        for span in closed[len(seen) :]:  # closed spans never change what the view shows of them
            for i in span.covers:
                self._covered[i] = span.id
            self._span_lines.append(f"{span.id} span [steps {span.begin}-{span.end}]: {span.question} -> {span.conclusion}")
            seen.append(span)

    def _sync_ops(self, ledger: LedgerBook, t: int) -> None:
        ops = ledger.ops
        issued = bisect.bisect_right(ops, t, key=lambda op: op.at)  # ops come in step order
        seen = self._ops
        if ledger is not self._ledger or issued < len(seen) or (seen and ops[len(seen) - 1] is not seen[-1]):
            self._ledger, seen, self._exact, self._whole = ledger, [], {}, {}
            self._ops = seen
        for op in ops[len(seen) : issued]:
            entry = (len(seen), op.kind)
            if op.sub is None:
                self._whole[op.step] = entry
            else:
                self._exact[(op.step, op.sub)] = entry
            seen.append(op)

"""``search_ledger``: BM25 over every output and span, folded or not, and the ledger view."""

from __future__ import annotations

from collections.abc import Sequence

from ..mechanisms.ledger import LedgerBook, LedgerObject, best_line, bm25, last_touched, objects_of, summary
from ..mechanisms.objects import ObjectIndex, reply_object, view_text
from ..mechanisms.spans import Span, SpanBook
from ..protocol import CM
from ..types import Step


def _status(obj: LedgerObject, book: LedgerBook, cover: dict[int, Span]) -> str:
    state = ""
    for op in book.ops:
        if op.step == obj.step and op.sub in (None, obj.sub):
            state = f"{op.kind}ed".replace("droped", "dropped")
    if obj.step in cover:
        state = (state + ", " if state else "") + f"in span {cover[obj.step].id}"
    return state or "shown"


def search_text(
    steps: Sequence[Step], query: str, spans: SpanBook, ledger: LedgerBook, limit: int = 8, *, replies: bool = False
) -> str:
    """The ``limit`` best matches of ``query`` among the outputs of ``steps`` (and their replies,
    ``r7``, with ``replies``) and the closed spans."""
    cover = {i: s for s in spans.closed for i in s.covers}
    objs = [o for s in steps for o in objects_of(s) if o.kind != "context"]
    docs = [f"{summary(o)}\n{o.body}" for o in objs]
    said = [reply_object(s) for s in steps] if replies else []
    docs += [f"{r.summary}\n{r.body}" for r in said]
    closed = list(spans.closed)
    docs += [f"{s.question}\n{s.conclusion}" for s in closed]
    n_out = len(objs) + len(said)
    hits = bm25(docs, query)[:limit]
    total = len(docs)
    if not hits:
        return f'{CM} search_ledger "{query}": no match among {total} outputs and spans.'
    lines = [f'{CM} search_ledger "{query}": {len(hits)} best of {total} outputs and spans (nothing was run again):']
    for _, i in hits:
        if i < len(objs):
            o = objs[i]
            lines.append(f"{o.id} [{_status(o, ledger, cover)}] {summary(o)}")
            line = best_line(o.body, query)
            if line:
                lines.append(f"    > {line}")
        elif i < n_out:
            r = said[i - len(objs)]
            lines.append(f"{r.id} [{r.kind}] {r.summary}")
            line = best_line(r.body, query)
            if line:
                lines.append(f"    > {line}")
        else:
            s = closed[i - n_out]
            lines.append(f"{s.id} [span, steps {s.begin}-{s.end}] {s.question} -> {s.conclusion}")
    lines.append("`expand <id>` shows one as first shown.")
    return "\n".join(lines)


def ledger_view(steps: Sequence[Step], t: int, spans: SpanBook, ledger: LedgerBook) -> str:
    """The ledger as one message: id, status, created and last-touched steps, summary, per output."""
    cover = {i: s for s in spans.closed for i in s.covers}
    listed = list(steps)
    lines = [f"{CM} Ledger after step {t} (id [status] created/last touched: summary):"]
    for s in listed:
        for o in objects_of(s):
            if o.kind != "context":
                lines.append(f"{o.id} [{_status(o, ledger, cover)}] {o.step}/{last_touched(listed, o)}: {summary(o)}")
    for span in spans.closed:
        lines.append(f"{span.id} [span, steps {span.begin}-{span.end}]: {span.question} -> {span.conclusion}")
    for sid in spans.stack:
        span = spans.spans[sid]
        lines.append(f"{span.id} [open since step {span.begin}]: {span.question}")
    return "\n".join(lines)


def objects_view(steps: Sequence[Step], t: int, spans: SpanBook, ledger: LedgerBook, pinned: frozenset[tuple[int, int]]) -> str:
    """The whole ledger with replies as objects (``r7``: thought, plan or result) and pins."""
    index = ObjectIndex()
    for s in steps:
        index.observe(s)
    return view_text(index, t, spans, ledger, pinned, everything=True)

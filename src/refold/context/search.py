"""``search_ledger``: BM25 over every output and span, folded or not, and the ledger view."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..mechanisms.ledger import (
    LedgerBook,
    LedgerObject,
    best_line,
    bm25,
    last_touched,
    object_id,
    objects_of,
    summary,
)
from ..mechanisms.objects import ObjectIndex, reply_object, view_text
from ..mechanisms.spans import Span, SpanBook
from ..protocol import CM
from ..types import Message, Origin, Shown, Step, content_text

Prompt = tuple[Sequence[Message], Sequence[Origin]]
"""The prompt an answer's step was issued from (messages, origins), or None: the plain history."""

_SHOWN = {
    Shown.RECEIVED: "shown", Shown.RESTORED: "shown", Shown.PINNED: "shown, pinned", Shown.PREFIX: "shown",
    Shown.STUB: "stubbed", Shown.TRIMMED: "trimmed",
}  # fmt: skip


def prompt_states(steps: Sequence[Step], prompt: Prompt | None, book: LedgerBook) -> dict[tuple[int, int], str]:
    """How each output (step, index) stands in ``prompt``: shown, stubbed, trimmed, masked, folded,
    dropped, or folded into a note or a span block; with ``prompt`` None (the plain history was
    sent) every output is shown. A fold or drop issued but not yet in effect is said as pending."""
    counts = {s.index: len(s.observations) for s in steps}
    states: dict[tuple[int, int], str] = {}
    covered: dict[int, str] = {}
    again: dict[int, int] = {}  # step -> the step whose restore shows it again
    if prompt is None:
        states = {(i, j): "shown" for i, n in counts.items() for j in range(n)}
    else:
        seen: dict[int, int] = {}
        for m, o in zip(*prompt, strict=True):
            if o.step is None or o.step not in counts:
                continue
            if o.shown is Shown.RESTORED:  # a restore's answer shows the steps it covers again
                for i in o.covers:
                    again.setdefault(i, o.step)
            if o.part == "output":
                j = seen[o.step] = seen.get(o.step, -1) + 1
                states[(o.step, j)] = _SHOWN.get(o.shown) or _note_state(o.step, j, counts[o.step], m)
            elif o.part in ("note", "span") and o.shown is Shown.NOTE:
                for i in o.covers:  # a STALE fold's note, a closed span's block
                    covered.setdefault(i, "folded into a note" if o.part == "note" else "in span")
    for i, n in counts.items():
        for j in range(n):
            if (i, j) not in states:
                states[(i, j)] = covered.get(i, "hidden")
    for (i, j), state in states.items():
        if i in again and not state.startswith("shown"):
            states[(i, j)] = f"{state}, shown again at step {again[i]}"
    for op in book.ops:  # issued, but the prompt still shows the output: it takes effect later
        for j in range(counts.get(op.step, 0)) if op.sub is None else (op.sub,):
            state = states.get((op.step, j), "")
            if state.startswith("shown") or state in ("stubbed", "trimmed"):
                states[(op.step, j)] = f"{state}, {op.kind} pending"
    return states


def _note_state(step: int, j: int, n: int, message: Message) -> str:
    """A note in place of an output: the ledger's fold or drop, else masking."""
    text = content_text(message.get("content"))
    head = f"[step {step}]\n{CM} Output {object_id(step, j, n)} "
    if text.startswith(head + "dropped."):
        return "dropped"
    if text.startswith(head + "folded:"):
        return "folded"
    return "masked"


def _status(obj: LedgerObject, book: LedgerBook, cover: dict[int, Span], states: Mapping[tuple[int, int], str] | None = None) -> str:
    state = states.get((obj.step, obj.sub), "") if states is not None else ""
    if states is None:
        for op in book.ops:
            if op.step == obj.step and op.sub in (None, obj.sub):
                state = f"{op.kind}ed".replace("droped", "dropped")
    if obj.step in cover:  # 'in span S1': folded into its block; 'shown, in span S1': not yet
        state = f"in span {cover[obj.step].id}" if state == "in span" else (state + ", " if state else "") + f"in span {cover[obj.step].id}"
    return state or "shown"


def search_text(
    steps: Sequence[Step], query: str, spans: SpanBook, ledger: LedgerBook, limit: int = 8, *, replies: bool = False,
    states: Mapping[tuple[int, int], str] | None = None,
) -> str:
    """The ``limit`` best matches of ``query`` among the outputs of ``steps`` (and their replies,
    ``r7``, with ``replies``) and the closed spans; ``states`` (``prompt_states``): how each
    output stands in the prompt the search was issued from (else: from the ledger's ops alone)."""
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
            lines.append(f"{o.id} [{_status(o, ledger, cover, states)}] {summary(o)}")
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


def ledger_view(
    steps: Sequence[Step], t: int, spans: SpanBook, ledger: LedgerBook, states: Mapping[tuple[int, int], str] | None = None
) -> str:
    """The ledger as one message: id, status, created and last-touched steps, summary, per output."""
    cover = {i: s for s in spans.closed for i in s.covers}
    listed = list(steps)
    lines = [f"{CM} Ledger after step {t} (id [status] created/last touched: summary):"]
    for s in listed:
        for o in objects_of(s):
            if o.kind != "context":
                lines.append(f"{o.id} [{_status(o, ledger, cover, states)}] {o.step}/{last_touched(listed, o)}: {summary(o)}")
    for span in spans.closed:
        lines.append(f"{span.id} [span, steps {span.begin}-{span.end}]: {span.question} -> {span.conclusion}")
    for sid in spans.stack:
        span = spans.spans[sid]
        lines.append(f"{span.id} [open since step {span.begin}]: {span.question}")
    return "\n".join(lines)


def objects_view(
    steps: Sequence[Step], t: int, spans: SpanBook, ledger: LedgerBook, pinned: frozenset[tuple[int, int]],
    states: Mapping[tuple[int, int], str] | None = None,
) -> str:
    """The whole ledger with replies as objects (``r7``: thought, plan or result) and pins."""
    index = ObjectIndex()
    for s in steps:
        index.observe(s)
    return view_text(index, t, spans, ledger, pinned, everything=True, states=states)

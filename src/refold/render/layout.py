"""Stage 3: lay out steps 1..b behind the boundary, reusing the previous layout up to the first change.

Spans are one block at their first step, adjacent folded steps share one note, masked and
ledger-hidden outputs become notes, and a step whose stubs cite hidden content is shown as
received (nothing may point at what is not shown). A boundary move changes the layout only from
the first step it touches, so only that part is laid out again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ..config import Config
from ..history import History
from ..mechanisms.fold import note_text
from ..mechanisms.ledger import hidden_outputs
from ..mechanisms.masking import condensed_reply
from ..mechanisms.objects import hidden_reply
from ..mechanisms.pins import Part, pinned_note
from ..mechanisms.spans import Span, cover_map
from ..messages import mask_note, with_content, with_text
from ..types import Message, Origin, Shown, Step, content_text
from .behind import Behind
from .received import Received, message_chars

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
    reused: int = 0  # leading messages taken unchanged from the previous layout

    @property
    def total_chars(self) -> int:
        return self.chars[-1] if self.chars else 0


def first_change(
    prev: Layout | None, b: int, spans: list[Span], hidden: Hidden, behind: Behind, pinned: frozenset[Part] = frozenset()
) -> int:
    """The first step whose rendering may differ from ``prev``'s (1 when there is no ``prev``)."""
    if prev is None:
        return 1
    start = prev.b + 1
    n = behind.config.policy.mask_after
    if n is not None and behind.config.policy.mask_replies:
        start = min(start, prev.b - n + 1)  # replies that became old enough to condense
    for i in behind.mask_order[prev.masked_upto :]:
        start = min(start, i)
    if hidden != prev.hidden:
        start = min((start, *(step for step, _, _ in set(hidden) ^ set(prev.hidden))))
    if pinned != prev.pinned:
        start = min((start, *(step for step, _ in pinned ^ prev.pinned)))
    ids = tuple(s.id for s in spans)
    if ids != prev.spans:
        start = min((start, *(span.begin for span in spans if span.id not in prev.spans)))
        # a span that stopped being outermost lies inside a new one, which starts no later
    start = min(start, b + 1)
    if start > 1 and start - 1 <= len(prev.group_of):
        start = prev.group_of[start - 2]  # a note or block that step start-1 belongs to may grow
    return max(1, start)


def lay_out(
    history: History,
    config: Config,
    b: int,
    spans: list[Span],
    hidden: Hidden,
    behind: Behind,
    received: list[Received],
    block: Callable[[Span], tuple[Message, Origin]],
    notes: dict[tuple[int, int], str],
    note_lines: dict[int, str],
    hidden_texts: dict[tuple[int, int, str], str],
    reply_texts: dict[int, str | None],
    prev: Layout | None,
    pinned: frozenset[Part] = frozenset(),
) -> Layout:
    """The layout of steps 1..b, reusing ``prev`` up to its first change; ``pinned`` parts are shown
    as received (as a verbatim note where their step is folded)."""
    reversible = config.policy.reversible
    n = config.policy.mask_after
    old_replies = b - n if n is not None and config.policy.mask_replies else 0
    start = first_change(prev, b, spans, hidden, behind, pinned)
    out = Layout(b, tuple(s.id for s in spans), hidden, len(behind.mask_order), pinned)
    pins_of: dict[int, list[int]] = {}
    for ps, pj in sorted(pinned):
        pins_of.setdefault(ps, []).append(pj)
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
    else:
        start = 1
        stubs = trimmed = folded = n_notes = 0
    msgs, origins, chars = out.msgs, out.origins, out.chars
    cover = cover_map(spans)
    gone = {(s, j): kind for s, j, kind in hidden}
    gone_steps = {s for s, _, _ in hidden} | behind.masked
    group: list[Step] = []

    def add(m: Message, o: Origin) -> None:
        msgs.append(m)
        origins.append(o)
        chars.append((chars[-1] if chars else 0) + message_chars(m))

    def add_pinned(steps: list[Step]) -> None:  # the pinned parts of folded steps, verbatim
        for s in steps:
            for j in pins_of.get(s.index, ()):
                rec = received[s.index - 1]
                if 1 + j < len(rec.msgs):
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

    for step in history.steps_between(start - 1, b):
        i = step.index
        span = cover.get(i)
        form = behind.forms[i - 1] if span is None else None
        if span is None and form is None and group:  # joins the open note: same unit, same start
            out.starts.append(out.starts[-1])
            out.group_of.append(out.group_of[-1])
            out.counts_at.append(out.counts_at[-1])
            group.append(step)
            folded += 1
            continue
        flush()
        out.starts.append(len(msgs))
        out.counts_at.append((stubs, trimmed, folded, n_notes))
        if span is not None:
            out.group_of.append(span.begin)
            if i == span.begin:
                add(*block(span))
                add_pinned(history.steps_between(span.begin - 1, span.end or span.begin))
            continue
        out.group_of.append(i)
        if form is None:
            group.append(step)
            folded += 1
            continue
        reply, reply_origin = form.msgs[0], form.origins[0]
        if i <= old_replies:
            if i not in reply_texts:
                reply_texts[i] = condensed_reply(step, reversible=reversible, min_chars=config.policy.mask_min_chars)
            text = reply_texts[i]
            if text:
                reply, reply_origin = with_text(reply, text), Origin(i, "reply", Shown.NOTE, (i,))
        folded_reply = hidden_reply(step, gone, hidden_texts, reversible=reversible) if i in gone_steps else None
        if folded_reply is not None and len(folded_reply) < len(content_text(reply.get("content"))):
            reply, reply_origin = with_text(step.reply, folded_reply), Origin(i, "reply", Shown.NOTE, (i,))  # the shorter form
        if i in behind.masked:
            masked = [reply] + [with_content(o, mask_note(step, j, reversible=reversible)) for j, o in enumerate(step.observations)]
            masked_origins = [reply_origin] + [Origin(i, "output", Shown.NOTE, (i,))] * len(step.observations)
            for m, o in zip(*_pin(masked, masked_origins, received[i - 1], i, pins_of.get(i, ())), strict=True):
                add(m, o)
            continue
        shown, shown_origins = form.msgs, form.origins
        if form.sources & gone_steps:  # its stubs would point at what is no longer shown
            shown, shown_origins = received[i - 1].msgs, received[i - 1].origins
        if i in gone_steps:
            shown, shown_origins = list(shown), list(shown_origins)
            for j, text in hidden_outputs(step, gone, hidden_texts, reversible=reversible):
                shown[1 + j] = with_content(step.observations[j], text)
                shown_origins[1 + j] = Origin(i, "output", Shown.NOTE, (i,))
        if reply is not form.msgs[0]:
            shown, shown_origins = [reply, *shown[1:]], [reply_origin, *shown_origins[1:]]
        if i in pins_of:
            shown, shown_origins = _pin(shown, shown_origins, received[i - 1], i, pins_of[i])
        for m, o in zip(shown, shown_origins, strict=True):
            add(m, o)
            if o.shown is Shown.STUB:
                stubs += 1
            elif o.shown is Shown.TRIMMED:
                trimmed += 1
    flush()
    out.counts = (stubs, trimmed, folded, n_notes)
    return out


def _pin(
    msgs: list[Message], origins: list[Origin], rec: Received, i: int, parts: list[int] | tuple[int, ...]
) -> tuple[list[Message], list[Origin]]:
    """``msgs`` with the pinned parts of step i (-1: the reply) as received."""
    if not parts:
        return msgs, origins
    msgs, origins = list(msgs), list(origins)
    for j in parts:
        if 1 + j < len(msgs):
            msgs[1 + j] = rec.msgs[1 + j]
            origins[1 + j] = Origin(i, "reply" if j == -1 else "output", Shown.PINNED, (i,))
    return msgs, origins

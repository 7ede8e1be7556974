"""Render c_t, the prompt at step t, from an append-only history (seed 000, "The prompt at step t").

    c_t = p_sys ⊕ p_task ⊕ ⨁_{i=1..t}  f_i        if i <= b_t and i in S_t   (folded: one note)
                                        a_i ⊕ o_i  if i > b_t                 (as received)
                                        a_i ⊕ d_i  otherwise                  (deduplicated)

The work is incremental: a step's form behind the boundary is final once the boundary passes
it (its STALE window has closed and every step it could point at is final too), so each call
only renders what crossed the boundary since the last call plus the tail.

Agent-chosen folds act on top (seeds 001 and 002): a closed span (begin_span ... fold_span) is
one collapsed block at once, wherever it lies, so the prompt changes only from the span's start;
a ledger ``fold``/``drop`` of one output takes effect at the next boundary move.
"""

from __future__ import annotations

import bisect
import time

from .config import DEFAULT, Config
from .history import History
from .mechanisms.dedup import DedupIndex
from .mechanisms.fold import note_text, valid_marks
from .mechanisms.ledger import LedgerBook, budget_line, hidden_outputs
from .mechanisms.masking import newly_masked
from .mechanisms.spans import (
    FoldCost,
    Span,
    SpanBook,
    block_text,
    cover_map,
    fold_cost,
)
from .messages import clean as clean  # re-exported: callers import it from here
from .messages import label, mask_text, with_text
from .messages import with_content as _with_content
from .protocol import ledger_section, reminder, span_section, system_section
from .shell import analyze
from .types import Message, Origin, Rendered, RenderStats, Shown, Step, content_text

_SYSTEM_ROLES = ("system", "developer")
_Hidden = tuple[tuple[int, int, str], ...]


class Renderer:
    """Renders prompts for one history at a time; caches what can no longer change."""

    def __init__(self, config: Config = DEFAULT) -> None:
        self.config = config
        self.policy = config.policy
        self.format_in_system = config.prompt.format_in_system
        self.span_policy = config.spans
        self.ledger_policy = config.ledger
        self.fold_costs: dict[str, FoldCost] = {}
        """Per folded span, what its fold cost (filled when a render applies it)."""
        self._reset(None)

    def _reset(self, history: History | None) -> None:
        self._seen = _seen_key(history, 0) if history is not None else None
        self._prefix: list[Message] = []
        self._prefix_origins: list[Origin] = []
        self._received: list[tuple[list[Message], list[Origin]]] = []  # per step, index i-1
        self._t = 0
        self._restored_upto: list[int] = []  # indices of restore steps, ascending
        self._folded: set[int] = set()
        self._spans = SpanBook(self.span_policy)
        self._ledger = LedgerBook(self.ledger_policy)
        self._reminders: list[str | None] = []  # span reminder shown with each step
        self._blocks: dict[str, str] = {}
        self._hidden_texts: dict[tuple[int, int, str], str] = {}
        self._note_lines: dict[int, str] = {}  # folded step -> its line in a note
        self._notes: dict[tuple[int, int], str] = {}  # (first, last) folded step -> the note
        self._last: list[Message] = []
        self._last_chars = 0
        self._last_t = -1
        self.fold_costs = {}
        self._reset_behind()

    def _reset_behind(self) -> None:
        p = self.policy
        self._frontier = 0  # steps 1..frontier have their behind-the-boundary form computed
        self._forms: list[_Form | None] = []  # per step; None = folded
        self._masked: set[int] = set()
        self._mask_scanned = 0  # steps 1..this were already considered for masking
        self._dedup = DedupIndex(p.dedup_min_lines, p.dedup_min_chars, p.outline_min_lines, p.reversible)
        self._behind: list[Message] = []
        self._behind_origins: list[Origin] = []
        self._counts = {"stubs": 0, "trimmed": 0, "folded": 0, "notes": 0}
        self._behind_folded: set[int] = set()
        self._span_retired = 0  # closed spans whose steps stopped being dedup sources
        self._behind_key: tuple[int, _Hidden, tuple[str, ...]] | None = None

    # ---- public -----------------------------------------------------------------------------

    def render(self, history: History, t: int | None = None) -> Rendered:
        """The prompt after ``t`` steps (default: all), i.e. what model call t+1 is sent."""
        start = time.perf_counter()
        n = len(history)
        t = n if t is None else t
        if not 0 <= t <= n:
            raise ValueError(f"t={t} is outside 0..{n}")
        if self._seen is None or _seen_key(history, self._seen[0]) != self._seen or t < self._t:
            self._reset(history)
            self._build_prefix(history)
        if self.ledger_policy.budget_tokens and len(self._received) < t:
            if self._last_t != len(self._received):  # each budget line is computed at its own call
                self.render(history, len(self._received))
            for u in range(len(self._received) + 1, t):
                self.render(history, u)
        for s in history.steps_between(len(self._received), t):
            self._spans.observe(s)
            self._ledger.observe(s)
            self._reminders.append(self._spans.reminder(s.index))
            self._received.append(self._received_form(s, self._reminders[-1]))
            if self.ledger_policy.budget_tokens:
                self._add_budget_line(s)
            if s.restore_of:
                self._restored_upto.append(s.index)
        self._seen = _seen_key(history, len(self._received))
        self._advance_marks(history, t)
        b = self.policy.boundary(t)
        if b < self._frontier or (
            not self.policy.chunk
            and any((i in self._folded) != (i in self._behind_folded) for i in range(1, self._frontier + 1))
        ):
            self._reset_behind()
        if self._frontier < b:
            # Visit every boundary position in order, as a call-by-call run would, so that the
            # result does not depend on which t values were rendered before (determinism).
            for bb in self._boundaries_between(self._frontier, b):
                for s in history.steps_between(self._frontier, bb):
                    self._push_behind(s)
                self._frontier = bb
                self._apply_masking(bb)
            self._behind_key = None
        spans = self._spans.outermost_closed()
        limit = min(t, b + self.policy.k) if self.policy.chunk else t
        key = (b, self._ledger.hidden(b, limit), tuple(s.id for s in spans if s.begin <= b))
        if key != self._behind_key:
            self._assemble_behind(history, b, [s for s in spans if s.begin <= b], key[1])
            self._behind_key = key
        messages = self._prefix + self._behind
        origins = self._prefix_origins + self._behind_origins
        self._tail(history, b, t, [s for s in spans if (s.end or 0) > b], messages, origins)
        self._note_fold_costs(t, messages)
        restores = bisect.bisect_right(self._restored_upto, t)
        c = self._counts
        ms = (time.perf_counter() - start) * 1000
        stats = RenderStats(t, b, c["stubs"], c["trimmed"], c["folded"], c["notes"], restores, ms)
        return Rendered(messages, origins, stats)

    def received(self, history: History, index: int) -> list[Message]:
        """Step ``index`` as first shown to the model (reply, then labeled outputs; no budget line)."""
        step = history.step(index)
        if self._seen is not None and index <= len(self._reminders) and _seen_key(history, self._seen[0]) == self._seen:
            note = self._reminders[index - 1]
        else:
            note = SpanBook.replay(history.steps_between(0, index), self.span_policy).reminder(index)
        return self._received_form(step, note)[0]

    @property
    def span_book(self) -> SpanBook:
        """The spans of the history last rendered, as of its last rendered step (read-only)."""
        return self._spans

    # ---- agent-chosen folds -------------------------------------------------------------------

    def _block(self, history: History, span: Span) -> tuple[Message, Origin]:
        text = self._blocks.get(span.id)
        if text is None:
            steps = history.steps_between(span.begin - 1, span.end or span.begin)
            text = self._blocks[span.id] = block_text(span, steps, self._spans, reversible=self.policy.reversible)
        return {"role": "user", "content": text}, Origin(span.begin, "span", Shown.NOTE, span.covers)

    def _tail(self, h: History, b: int, t: int, spans: list[Span], msgs: list[Message], origins: list[Origin]) -> None:
        """Steps b+1..t as received, except closed spans: one block at their first step."""
        cover = cover_map(spans) if spans else {}
        for i in range(b + 1, t + 1):
            span = cover.get(i)
            if span is None:
                msgs += self._received[i - 1][0]
                origins += self._received[i - 1][1]
            elif i == span.begin:  # a span straddling the boundary has its block behind it
                msg, origin = self._block(h, span)
                msgs.append(msg)
                origins.append(origin)

    def _note_fold_costs(self, t: int, messages: list[Message]) -> None:
        for span in reversed(self._spans.closed):
            if span.end != t:
                break
            self.fold_costs.setdefault(span.id, fold_cost(span, t, self._last, messages))
        self._last, self._last_t = messages, t
        if self.ledger_policy.budget_tokens:
            self._last_chars = sum(len(content_text(m.get("content"))) for m in messages)

    def _add_budget_line(self, step: Step) -> None:
        msgs, _ = self._received[-1]
        if len(msgs) < 2:
            return
        size = self._last_chars + sum(len(content_text(m.get("content"))) for m in msgs)
        line = budget_line(size, self.ledger_policy)
        msgs[-1] = _with_content(step.observations[-1], content_text(msgs[-1].get("content")) + "\n" + line)

    # ---- building blocks ------------------------------------------------------------------

    def _build_prefix(self, history: History) -> None:
        prefix = [clean(m) for m in history.prefix]
        origins = [Origin(None, "system" if m.get("role") in _SYSTEM_ROLES else "task", Shown.PREFIX) for m in prefix]
        if self.policy.protocol:
            section = system_section(self.policy.k, reversible=self.policy.reversible, include_format=self.format_in_system)
            if self.span_policy.prompt:
                section += span_section(min_chars=self.span_policy.min_chars)
            if self.ledger_policy.prompt:
                budget = self.ledger_policy.budget_tokens
                section += ledger_section(budget_line(0, self.ledger_policy).rsplit(" of ", 1)[1] if budget else None)
            if prefix and prefix[0].get("role") in _SYSTEM_ROLES:  # OpenAI's newer models say "developer"
                prefix[0] = with_text(prefix[0], content_text(prefix[0].get("content")) + section)
            else:
                prefix.insert(0, {"role": "system", "content": section.lstrip()})
                origins.insert(0, Origin(None, "system", Shown.PREFIX))
        self._prefix, self._prefix_origins = prefix, origins

    def _received_form(self, step: Step, note: str | None = None) -> tuple[list[Message], list[Origin]]:
        p = self.policy
        msgs: list[Message] = [clean(step.reply)]
        origins = [Origin(step.index, "reply", Shown.RECEIVED)]
        shown = Shown.RESTORED if step.restore_of else Shown.RECEIVED
        last = len(step.observations) - 1
        for j, obs in enumerate(step.observations):
            text = content_text(obs.get("content"))
            if p.protocol:
                text = label(step.index, text)
                if p.reminders and j == last and not step.has_protocol:
                    text = f"{text}\n{reminder()}"
            if note and j == last:
                text = f"{text}\n{note}"
            msgs.append(_with_content(obs, text))
            origins.append(Origin(step.index, "output", shown, step.restore_of))
        return msgs, origins

    def _advance_marks(self, history: History, t: int) -> None:
        if not self.policy.fold:
            self._t = t
            return
        if t < self._t:
            self._folded = set()
            self._t = 0
        for s in history.steps_between(self._t, t):
            self._folded.update(valid_marks(s, self.policy.k))
        self._t = t

    def _push_behind(self, step: Step) -> None:
        """Compute the final form of a step that just crossed the boundary."""
        infos = [analyze(a.command, a.tool) for a in step.actions]
        for info in infos:
            self._dedup.note_writes(step.index, info)
        closed = self._spans.closed
        while self._span_retired < len(closed) and (closed[self._span_retired].end or 0) < step.index:
            for i in closed[self._span_retired].covers:  # folded into a span: no longer shown
                self._dedup.retire(i)
            self._span_retired += 1
        if step.index in self._folded:
            self._behind_folded.add(step.index)
            self._forms.append(None)
            return
        msgs, origins = self._received[step.index - 1]
        form = _Form(list(msgs), list(origins), set())
        if self.policy.dedup:
            fallback = infos[0] if infos else None
            for j, obs in enumerate(step.observations):
                body = content_text(obs.get("content"))
                result = self._dedup.process(step.index, body, infos[j] if j < len(infos) else fallback)
                if result.kind == "received":
                    continue
                text = label(step.index, result.text) if self.policy.protocol else result.text
                form.msgs[1 + j] = _with_content(obs, text)
                shown = Shown.STUB if result.kind == "stub" else Shown.TRIMMED
                form.origins[1 + j] = Origin(step.index, "output", shown, tuple(dict.fromkeys((step.index, *result.sources))))
                form.sources.update(result.sources)
        self._forms.append(form)

    def _boundaries_between(self, lo: int, hi: int) -> list[int]:
        """Boundary positions in (lo, hi]: multiples of k with chunking, every step without."""
        if not self.policy.chunk:
            return list(range(lo + 1, hi + 1))
        k = self.policy.k
        return [*range((lo // k + 1) * k, hi, k), hi]

    def _apply_masking(self, b: int) -> None:
        n = self.policy.mask_after
        if n is None:
            return

        def size_of(i: int) -> int | None:
            form = self._forms[i - 1]
            return None if form is None else sum(len(content_text(m.get("content"))) for m in form.msgs[1:])

        def sources_of(j: int) -> set[int] | None:
            form = self._forms[j - 1]
            return None if form is None else form.sources

        for i in newly_masked(
            b=b, n=n, scanned=self._mask_scanned, masked=self._masked,
            size_of=size_of, sources_of=sources_of, min_chars=self.policy.mask_min_chars,
        ):
            self._masked.add(i)
            self._dedup.retire(i)
        self._mask_scanned = max(self._mask_scanned, b - n)

    def _assemble_behind(self, history: History, b: int, spans: list[Span], hidden: _Hidden) -> None:
        """Lay out steps 1..b: spans are blocks, folded runs share one note, masked and ledger-hidden
        outputs become notes; a step whose stubs cite a hidden output is shown as received."""
        p = self.policy
        msgs: list[Message] = []
        origins: list[Origin] = []
        counts = {"stubs": 0, "trimmed": 0, "folded": 0, "notes": 0}
        group: list[Step] = []
        cover = cover_map(spans)
        gone = {(s, j): kind for s, j, kind in hidden}
        gone_steps = {s for s, _, _ in hidden} | self._masked

        def flush() -> None:
            if group:
                covers = tuple(s.index for s in group)
                key = (covers[0], covers[-1])  # a run of adjacent steps: its ends name it
                text = self._notes.get(key)
                if text is None:
                    text = self._notes[key] = note_text(group, reversible=p.reversible, lines_cache=self._note_lines)
                msgs.append({"role": "user", "content": text})
                origins.append(Origin(covers[0], "note", Shown.NOTE, covers))
                counts["notes"] += 1
                group.clear()

        for i, step in enumerate(history.steps_between(0, b), start=1):
            span = cover.get(i)
            if span is not None:
                flush()
                if i == span.begin:
                    msg, origin = self._block(history, span)
                    msgs.append(msg)
                    origins.append(origin)
                continue
            form = self._forms[i - 1]
            if form is None:
                group.append(step)
                counts["folded"] += 1
                continue
            flush()
            if i in self._masked:
                msgs.append(form.msgs[0])
                origins.append(form.origins[0])
                for obs in step.observations:
                    msgs.append(_with_content(obs, mask_text(step, reversible=p.reversible)))
                    origins.append(Origin(i, "output", Shown.NOTE, (i,)))
                continue
            shown, shown_origins = form.msgs, form.origins
            if form.sources & gone_steps:  # its stubs would point at what is no longer shown
                shown, shown_origins = self._received[i - 1]
            if i in gone_steps:
                shown, shown_origins = list(shown), list(shown_origins)
                for j, text in hidden_outputs(step, gone, self._hidden_texts, reversible=p.reversible):
                    shown[1 + j] = _with_content(step.observations[j], text)
                    shown_origins[1 + j] = Origin(i, "output", Shown.NOTE, (i,))
            msgs += shown
            origins += shown_origins
            for o in shown_origins[1:]:
                if o.shown is Shown.STUB:
                    counts["stubs"] += 1
                elif o.shown is Shown.TRIMMED:
                    counts["trimmed"] += 1
        flush()
        self._behind, self._behind_origins, self._counts = msgs, origins, counts


def _seen_key(history: History, n: int) -> tuple[int, str] | None:
    """What identifies the first ``n`` steps of a history by content (digests chain the prefix)."""
    if n > len(history):
        return None
    return n, history.step(n).digest if n else history.digest


class _Form:
    """A step's messages as shown behind the boundary (dedup applied) and the steps its stubs cite."""

    __slots__ = ("msgs", "origins", "sources")

    def __init__(self, msgs: list[Message], origins: list[Origin], sources: set[int]) -> None:
        self.msgs = msgs
        self.origins = origins
        self.sources = sources


# ``restore`` lives in refold.restore; re-exported because callers import it from here
# (imported last: it needs Renderer).
from .restore import restore_text as restore_text  # noqa: E402

"""Agent-chosen span folding (seed 001): ``begin_span "<question>"`` ... ``fold_span "<conclusion>"``.

A closed span is shown, in place, as one collapsed block: the question, the steps covered, the
conclusion (with inner spans' conclusions) and the artefacts kept (edits with their text, files
created, commits, the last test results). Nothing is deleted: every covered step still restores.

The ``SpanBook`` replays the commands of a history in order; the renderer and the command
answers (``refold.context``) use the same book, so an answer and a rendering can never disagree.
A recorded outcome (``Step.outcomes``) wins over re-validation.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import ClassVar, Literal, NamedTuple

from pydantic import Field, field_validator

from ..policy import Settings
from ..prompts import span_reminder
from ..protocol import CM, ContextCommand
from ..types import Answer, Message, Origin, Outcome, Step, content_text
from .artefacts import artefacts
from .guardrail import missing

SPAN_COMMANDS = ("begin_span", "fold_span", "fold_steps")
_STEP_RANGE = re.compile(r"^\s*\[?(?:steps?\s*)?(\d{1,9})\s*(?:-|–|—|\.\.|to|\s)\s*(\d{1,9})\]?[\s,:]*(.*)$", re.DOTALL | re.IGNORECASE)
RATIONALE = (
    r"\b(because|since|so|therefore|due to|hence|thus|as a result|caused by|which means|in order to)\b"
    r"|[\w./-]+\.\w{1,8}:\d+|\blines? \d+"
)
_SPAN_ID = re.compile(r"^\s*\[?(?:span\s*)?[Ss](\d{1,9})\]?\s*$")


class SpanPolicy(Settings):
    """Switches and guardrails of span folding."""

    section: ClassVar[str] = "spans"

    enabled: bool = True
    """Honor begin_span/fold_span in the rendering (off: they stay ordinary steps)."""
    min_chars: int = Field(default=40, ge=0)
    """A conclusion shorter than this is refused."""
    require_rationale: bool = True
    """A conclusion must carry the why (see ``guardrail``)."""
    guardrail: Literal["substance", "keywords"] = "substance"
    """``substance``: a concrete anchor and a reason, filler taken out (``mechanisms.guardrail``);
    ``keywords``: any word matching ``rationale`` or a file:line reference (refold 0.1)."""
    rationale: str = RATIONALE
    """``keywords`` guardrail: a regular expression (case-insensitive) a conclusion must match."""
    remind_after: int | None = Field(default=8, ge=1)
    """Remind the agent of an open span every this many steps (None: never)."""
    edit_chars: int = Field(default=600, ge=40)
    """Characters of each kept edit shown in a collapsed block."""
    prompt: bool = False
    """Add the span section to the system prompt (``protocol.span_section``)."""
    fold_steps: bool = False
    """Teach ``fold_steps A-B "<conclusion>"`` (a span after the fact) and offer it as a tool; the
    command is answered either way."""
    chars_per_token: float = Field(4.0, gt=0)
    """How a fold's reported cost estimates tokens from characters."""

    @field_validator("rationale")
    @classmethod
    def _a_pattern(cls, pattern: str) -> str:
        try:
            re.compile(pattern)
        except re.error as e:  # compiled when a session starts: a traceback there, one line here
            raise ValueError(f"not a regular expression ({e})") from None
        return pattern


DEFAULT_SPANS = SpanPolicy()


@dataclass(slots=True)
class Span:
    id: str
    question: str
    begin: int
    parent: str | None
    depth: int
    end: int | None = None
    conclusion: str | None = None
    children: list[str] = field(default_factory=list)
    after: int | None = None
    """The step that folded it after the fact (``fold_steps``), None for begin_span/fold_span."""

    @property
    def covers(self) -> tuple[int, ...]:
        return tuple(range(self.begin, (self.end or self.begin) + 1))

    @property
    def closed_at(self) -> int | None:
        """The step whose command closed it (the first call that may show its block)."""
        return self.after or self.end


def parse_span_id(text: str) -> int | None:
    m = _SPAN_ID.match(text)
    return int(m.group(1)) if m else None


def take_recorded(records: list[Outcome], name: str) -> Outcome | None:
    """The first recorded outcome of a command called ``name`` (removed from ``records``)."""
    for i, r in enumerate(records):
        if r.name == name:
            return records.pop(i)
    return None


def answer(name: str, ok: bool, text: str, target: str | None = None) -> Answer:
    return Answer(text, Outcome(name, ok, target))


class SpanBook:
    """The spans of a history after its first ``t`` steps (fed in order with ``observe``)."""

    def __init__(self, policy: SpanPolicy = DEFAULT_SPANS) -> None:
        self.policy = policy
        self.spans: dict[str, Span] = {}
        self.stack: list[str] = []  # open spans, innermost last
        self.closed: list[Span] = []  # in closing order
        self.t = 0
        self.chars: list[int] = []  # characters each step added when it was new (a fold's cost)
        self._rationale = re.compile(policy.rationale, re.IGNORECASE)

    # ---- replay -----------------------------------------------------------------------------

    @classmethod
    def replay(cls, steps: list[Step], policy: SpanPolicy = DEFAULT_SPANS) -> SpanBook:
        """The book after ``steps`` (cheap when none of them mentions a span)."""
        book = cls(policy)
        if policy.enabled and any(
            a.context is not None and a.context.name in ("begin_span", "fold_steps") for s in steps for a in s.actions
        ):
            for s in steps:
                book.observe(s)
        elif steps:
            book.t = steps[-1].index
        return book

    def observe(self, step: Step) -> None:
        if self.policy.enabled:
            records = list(step.outcomes)
            for action in step.actions:
                cmd = action.context
                if cmd is not None and cmd.name in SPAN_COMMANDS:
                    self.apply(cmd, step.index, take_recorded(records, cmd.name))
        self.chars.append(len(step.reply_text) + sum(map(len, step.output_texts)))
        self.t = step.index

    def apply(self, cmd: ContextCommand, step: int, recorded: Outcome | None = None) -> Answer:
        """Run ``begin_span`` / ``fold_span`` issued at ``step``; the answer's text is for the agent."""
        forced = recorded.ok if recorded else None
        if cmd.name == "fold_steps":
            return self._fold_steps(cmd, step, forced)
        if cmd.name == "begin_span":
            question = " ".join(cmd.argument.split())
            if forced is False or (not question and forced is not True):
                return answer(cmd.name, False, f'{CM} begin_span needs a question: `begin_span "<what you want to find out>"`.')
            parent = self.stack[-1] if self.stack else None
            span = Span(f"S{len(self.spans) + 1}", question, step, parent, len(self.stack))
            self.spans[span.id] = span
            self.stack.append(span.id)
            if parent:
                self.spans[parent].children.append(span.id)
            inner = f", inside span {parent}" if parent else ""
            return answer(
                cmd.name,
                True,
                f'{CM} Span {span.id} opened at step {step}{inner}: "{question}". When it is answered, '
                f'close it with `fold_span "<conclusion, with the why>"`.',
                span.id,
            )
        if not self.stack:
            return answer(cmd.name, False, f"{CM} fold_span refused: no span is open; open one with `begin_span \"<question>\"`.")
        span = self.spans[self.stack[-1]]
        missing = self.refusal(cmd.argument)
        if forced is False or (missing and forced is not True):
            why = missing or "it was refused when issued"
            return answer(
                cmd.name,
                False,
                f"{CM} fold_span refused, span {span.id} (\"{span.question}\") stays open: {why}. "
                'Try again with `fold_span "<what you found, and why>"`.',
                span.id,
            )
        self.stack.pop()
        span.end, span.conclusion = step, " ".join(cmd.argument.split())
        self.closed.append(span)
        return answer(cmd.name, True, folded_text(span), span.id)

    def refusal(self, conclusion: str) -> str | None:
        """What a conclusion lacks, or None when it may close a span."""
        text = " ".join(conclusion.split())
        if not text:
            return "the conclusion is empty"
        if len(text) < self.policy.min_chars:
            return f"the conclusion is too short ({len(text)} characters, at least {self.policy.min_chars})"
        if self.policy.require_rationale and self.policy.guardrail == "substance":
            return missing(text, min_chars=self.policy.min_chars)
        if self.policy.require_rationale and not self._rationale.search(text):
            return (
                "the conclusion says what but not why; add the reason (because, since, so, therefore, "
                "due to ...) or a file:line reference"
            )
        return None

    def _fold_steps(self, cmd: ContextCommand, step: int, forced: bool | None) -> Answer:
        """``fold_steps A-B "<conclusion>"``: steps A..B, already taken, become one closed span."""
        usage = 'use `fold_steps 12-18 "<what you found, and why>"`'
        m = _STEP_RANGE.match(cmd.argument)
        if m is None:
            return answer(cmd.name, False, f"{CM} fold_steps refused: name the steps and the conclusion; {usage}.")
        lo, hi = int(m.group(1)), int(m.group(2))
        conclusion = " ".join(m.group(3).strip().strip("'\"").split())
        error = self._range_error(lo, hi, step)
        missing_ = error is None and self.refusal(conclusion)
        if forced is False or ((error or missing_) and forced is not True):
            why = error or missing_ or "it was refused when issued"
            return answer(cmd.name, False, f"{CM} fold_steps {lo}-{hi} refused: {why}. Try again: {usage}.")
        parent = next((sid for sid in reversed(self.stack) if self.spans[sid].begin < lo), None)
        depth = self.spans[parent].depth + 1 if parent else 0
        span = Span(f"S{len(self.spans) + 1}", f"steps {lo}-{hi}, folded after the fact", lo, parent, depth, hi, conclusion, after=step)
        for inner in self.closed:
            if lo <= inner.begin and (inner.end or 0) <= hi and (inner.parent is None or self.spans[inner.parent].end is None
                                                               or inner.parent == parent):
                inner.parent = span.id
                span.children.append(inner.id)
        self.spans[span.id] = span
        if parent:
            self.spans[parent].children.append(span.id)
        self.closed.append(span)
        tokens = round(sum(self.chars[lo - 1 :]) / self.policy.chars_per_token)
        return answer(cmd.name, True, folded_text(span, tokens), span.id)

    def _range_error(self, lo: int, hi: int, step: int) -> str | None:
        if lo < 1 or hi < lo:
            return f"{lo}-{hi} is no range of steps"
        if hi >= step:
            return f"only steps taken before this one can be folded (1-{step - 1})"
        for s in self.closed:
            a, b = s.begin, s.end or s.begin
            inside = lo <= a and b <= hi
            if not inside and not (b < lo or hi < a):
                return f"steps {lo}-{hi} cut across span {s.id} (steps {a}-{b}); fold a range that holds it whole or lies outside it"
        for sid in self.stack:
            if lo <= self.spans[sid].begin <= hi:
                return f"span {sid} opened at step {self.spans[sid].begin} is still open; close it with fold_span first"
        return None

    # ---- queries ----------------------------------------------------------------------------

    def reminder(self, step: int) -> str | None:
        """The reminder to show with step ``step`` (its span state is the book's, at that step)."""
        n = self.policy.remind_after
        if not self.stack or n is None:
            return None
        span = self.spans[self.stack[-1]]
        turns = step - span.begin
        if turns <= 0 or turns % n:
            return None
        return span_reminder(span.id, span.question, turns)

    def outermost_closed(self) -> list[Span]:
        """Closed spans not inside another closed span, by first step."""
        out = [s for s in self.closed if s.parent is None or self.spans[s.parent].end is None]
        return sorted(out, key=lambda s: s.begin)

    def closed_by(self, step: int) -> list[Span]:
        """The spans closed at or before ``step``, in closing order (``closed`` as the book stood
        after that step: closing steps only grow along ``closed``)."""
        n = bisect.bisect_right(self.closed, step, key=lambda s: s.closed_at or 0)
        return self.closed if n == len(self.closed) else self.closed[:n]

    def get(self, ident: str) -> Span | None:
        n = parse_span_id(ident)
        return self.spans.get(f"S{n}") if n is not None else None


class FoldCost(NamedTuple):
    """What a span fold cost the prefix cache: the prompt after its common prefix with the last one."""

    span: str
    step: int  # the render (t) at which the fold applied
    begin: int  # the span's first step
    kept_messages: int
    recomputed_messages: int
    recomputed_chars: int


def folded_text(span: Span, tokens: int | None = None, *, deferred_calls: int | None = None) -> str:
    """The answer to a fold that closed ``span``: folded now, or (``deferred_calls``) at the next
    cache-boundary move, at most that many calls later; ``tokens``: what folding now recomputes."""
    what = f"Span {span.id} folded after the fact" if span.after else f"Span {span.id} folded"
    hint = f"`expand {span.id}` shows the steps; `restore <step>` shows any step."
    if deferred_calls is not None:
        return (
            f"{CM} {what}: steps {span.begin}-{span.end} become one block with your conclusion and the artefacts "
            f"kept at the next cache-boundary move (within {deferred_calls} call{'s' if deferred_calls != 1 else ''}); "
            f"folding now would recompute "
            f"~{tokens or 0:,} tokens. {hint}"
        )
    if tokens is None:  # a span opened with begin_span (refold 0.1's answer)
        return (
            f"{CM} {what}: steps {span.begin}-{span.end} are now shown as one block with your "
            f"conclusion and the artefacts kept. `expand {span.id}` shows them; `restore <step>` shows any step."
        )
    return (
        f"{CM} {what}: steps {span.begin}-{span.end} are now shown as one block with your conclusion and the "
        f"artefacts kept. Cost: the prompt changes from step {span.begin} on, so about {tokens:,} tokens after "
        f"it are recomputed once (folding sooner costs less). {hint}"
    )


def fold_effect(messages: Iterable[Message], origins: Iterable[Origin], span: Span, block_chars: int) -> tuple[int, int, int]:
    """What folding ``span`` into a block of ``block_chars`` does to a prompt: (its size, the
    characters from the first message it changes on, the characters it removes); in characters
    of content, as the cost rule counts."""
    lo, hi = span.begin, span.end or span.begin
    size = recomputed = inside = 0
    changed = False
    for m, o in zip(messages, origins, strict=True):
        c = m.get("content")
        n = len(c) if type(c) is str else len(content_text(c))  # the common case without a call
        size += n
        step = o.step
        if step is None:
            if changed:
                recomputed += n
            continue
        covers = o.covers
        last = step if not covers or (len(covers) == 1 and covers[0] <= step) else max(step, *covers)
        if changed or last >= lo:
            changed = True
            recomputed += n
            if lo <= step and last <= hi and o.part != "pin":
                inside += n
    return size, recomputed, inside - block_chars


def fold_cost(span: Span, t: int, last: list[Message], messages: list[Message]) -> FoldCost:
    kept = 0
    for old, new in zip(last, messages, strict=False):
        if old is not new and old != new:
            break
        kept += 1
    chars = sum(len(content_text(m.get("content"))) for m in messages[kept:])
    return FoldCost(span.id, t, span.begin, kept, len(messages) - kept, chars)


def cover_map(spans: list[Span]) -> dict[int, Span]:
    """Each step covered by one of ``spans`` -> that span."""
    return {i: s for s in spans for i in s.covers}


# ---- the collapsed block ----------------------------------------------------------------------


def block_text(span: Span, steps: list[Step], book: SpanBook, *, reversible: bool = True) -> str:
    """The collapsed block of a closed span (``steps`` are the ones it covers, in order)."""
    lines = [
        f"{CM} Span {span.id} folded: steps {span.begin}-{span.end} are omitted here "
        "(its searches and dead ends); question, conclusion and artefacts kept."
        + (f" `expand {span.id}` shows it one level deep; `restore <step>` shows any step." if reversible else ""),
        f"Question: {span.question}",
        f"Conclusion: {span.conclusion}",
    ]
    for cid in span.children:
        child = book.spans[cid]
        if child.end is not None:
            lines.append(f"Inner span {child.id} (steps {child.begin}-{child.end}): {child.question} -> {child.conclusion}")
    kept = artefacts(steps, book.policy.edit_chars)
    if kept:
        lines.append("Kept:")
        lines += kept
    return "\n".join(lines)

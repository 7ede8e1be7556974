"""One dispatcher for every context command, answered from the history; nothing is ever run.

    answer_command(history, command, policy, spans=..., ledger=..., t=None) -> Answer(text, meta)

``history`` holds the steps before the one issuing the command (or pass ``t``: the command is
step t+1). ``Answer.meta`` goes into the answering observation's ``extra``: ``restore_of``
(steps shown again) and ``refold_result`` (``{"name", "ok", "target"}``), which the history
reads back into the step's meta so a replay renders exactly what the agent was told.

Commands: ``restore <steps>``, ``begin_span "<question>"``, ``fold_span "<conclusion>"``,
``fold <id>``, ``drop <id>``, ``expand <id | span id>``, ``search_ledger "<query>"``; the same
as function tools in ``TOOL_SCHEMAS`` (``command_from_tool_call`` reads their arguments).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .config import Config
from .history import History
from .mechanisms.ledger import (
    DEFAULT_LEDGER,
    LedgerBook,
    LedgerObject,
    LedgerPolicy,
    best_line,
    bm25,
    last_touched,
    objects_of,
    parse_ids,
    summary,
)
from .mechanisms.spans import DEFAULT_SPANS, Outcome, Span, SpanBook, SpanPolicy, block_text, parse_span_id
from .policy import DEFAULT, Policy
from .protocol import CM, COMMAND_NAMES, ContextCommand, command_of, parse_command, parse_restore_args
from .render import Renderer
from .restore import restore_text
from .types import Step, content_text

if TYPE_CHECKING:
    from .integrations.commands import CommandContext, CommandResult

__all__ = [
    "TOOL_SCHEMAS",
    "Answer",
    "answer_command",
    "command_from_tool_call",
    "handle",
    "intercept",
    "ledger_view",
]


@dataclass(frozen=True, slots=True)
class Answer:
    """The observation text for the agent, and fields for that observation's ``extra``."""

    text: str
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return bool(self.meta.get("refold_result", {}).get("ok", False))


def _tool(name: str, description: str, arg: str, arg_doc: str) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {arg: {"type": "string", "description": arg_doc}},
                "required": [arg],
            },
        },
    }


TOOL_SCHEMAS: list[dict[str, Any]] = [
    _tool("restore", "Show earlier steps again exactly as first shown, without running anything.", "steps", "e.g. '3', '3 5' or '3-5'"),
    _tool("begin_span", "Open a span before an investigation; fold it with fold_span when answered.", "question", "what you want to find out"),
    _tool(
        "fold_span",
        "Close the innermost open span: its steps become one block with this conclusion and the artefacts kept.",
        "conclusion",
        "what you found AND why (because/since/so/..., or a file:line reference)",
    ),
    _tool("fold", "Replace an output by its one-line summary from the next context refresh.", "id", "output id, e.g. '7' or '7.2'"),
    _tool("drop", "Remove an output (a marker stays; expand brings it back).", "id", "output id, e.g. '7' or '7.2'"),
    _tool("expand", "Show an output or a folded span again as first shown (one level deep).", "id", "output id ('7', '7.2') or span id ('S1')"),
    _tool("search_ledger", "Search every output and span, folded or not; lists matching ids ('*' lists the whole ledger).", "query", "words to look for, or * for the whole ledger"),
]


def command_from_tool_call(name: str, arguments: str) -> ContextCommand | None:
    """The context command a function call is (``fold_span`` with ``{"conclusion": ...}``), else None."""
    return command_of(name, arguments) if name in COMMAND_NAMES else None


def intercept(command: str) -> ContextCommand | None:
    """The context command a shell action is, or None to run it; ``fold -w 80 f`` and ``expand f``
    (coreutils) pass through because their arguments are not ids."""
    cmd = parse_command(command)
    if cmd is None:
        return None
    if cmd.name in ("fold", "drop") and not parse_ids(cmd.argument):
        return None
    if cmd.name == "expand" and not parse_ids(cmd.argument) and parse_span_id(cmd.argument) is None:
        return None
    return cmd


def answer_command(
    history: History,
    command: ContextCommand,
    policy: Policy = DEFAULT,
    *,
    spans: SpanPolicy = DEFAULT_SPANS,
    ledger: LedgerPolicy = DEFAULT_LEDGER,
    t: int | None = None,
) -> Answer:
    """Answer ``command`` issued at step t+1 (default: after the whole history)."""
    t = len(history) if t is None else t
    if not 0 <= t <= len(history):
        raise ValueError(f"t={t} is outside 0..{len(history)}")
    steps = history.steps_between(0, t)
    name = command.name
    if name == "restore":
        found, error = parse_restore_args(command.argument, t)
        if error is not None:
            return _answer(Outcome(name, False, error))
        return _restore(history, found, policy, spans, name)
    if name in ("begin_span", "fold_span"):
        book = SpanBook(spans)
        for s in steps:
            book.observe(s)
        return _answer(book.apply(command, t + 1))
    if name in ("fold", "drop"):
        lbook = LedgerBook(ledger)
        for s in steps:
            lbook.observe(s)
        return _answer(lbook.apply(command, t + 1))
    if name == "expand":
        return _expand(history, command.argument, t, policy, spans)
    if name == "search_ledger":
        return _answer(Outcome(name, True, search_text(history, command.argument, t, spans, ledger)))
    return _answer(Outcome(name, False, f"{CM} unknown context command '{name}'."))


def handle(command: ContextCommand, ctx: CommandContext) -> CommandResult:
    """A ``refold.integrations.commands`` handler: ``register(name, handle)`` for each name."""
    from .integrations.commands import CommandResult

    answer = answer_command(ctx.history, command, ctx.policy, t=ctx.step - 1)
    return CommandResult(answer.text, {"refold_command": command.name, **answer.meta})


# ---- answers --------------------------------------------------------------------------------


def _answer(outcome: Outcome, restore_of: list[int] | None = None) -> Answer:
    meta: dict[str, Any] = {"refold_result": outcome.record()}
    if restore_of:
        meta["restore_of"] = restore_of
    return Answer(outcome.text, meta)


def _restore(history: History, steps: list[int], policy: Policy, spans: SpanPolicy, name: str) -> Answer:
    text = restore_text(history, steps, policy, spans=spans)
    return _answer(Outcome(name, policy.reversible, text, " ".join(map(str, steps))), steps if policy.reversible else None)


def _span_book(history: History, t: int, policy: SpanPolicy) -> SpanBook:
    book = SpanBook(policy)
    for s in history.steps_between(0, t):
        book.observe(s)
    return book


def _expand(history: History, argument: str, t: int, policy: Policy, spans: SpanPolicy) -> Answer:
    if not policy.reversible:
        return _answer(Outcome("expand", False, restore_text(history, [], policy)))
    if parse_span_id(argument) is not None:
        book = _span_book(history, t, spans)
        span = book.get(argument)
        if span is None or span.end is None:
            known = ", ".join(s.id for s in book.closed) or "none yet"
            return _answer(Outcome("expand", False, f"{CM} expand: {argument.strip()} is not a folded span (folded: {known})."))
        return _expand_span(history, span, book, policy, spans)
    ids = parse_ids(argument)
    if not ids:
        return _answer(Outcome("expand", False, f"{CM} expand needs an output id (`expand 7`, `expand 7.2`) or a span id (`expand S1`)."))
    parts: list[str] = []
    shown: list[int] = []
    for step_no, sub in ids:
        if not 1 <= step_no <= t:
            return _answer(Outcome("expand", False, f"{CM} expand: there is no step {step_no}; steps 1-{t} exist."))
        step = history.step(step_no)
        if sub is None:
            parts.append(restore_text(history, [step_no], policy, spans=spans))
        else:
            objs = objects_of(step)
            if not 0 <= sub < len(objs):
                return _answer(Outcome("expand", False, f"{CM} expand: step {step_no} has {len(objs)} output(s)."))
            received = Renderer(Config(policy=policy, spans=spans)).received(history, step_no)
            parts.append(f"{CM} Output {objs[sub].id} restored from history (nothing was run again), as first shown:")
            parts.append(content_text(received[1 + sub].get("content")))
        shown.append(step_no)
    return _answer(Outcome("expand", True, "\n".join(parts), argument.strip()), list(dict.fromkeys(shown)))


def _expand_span(history: History, span: Span, book: SpanBook, policy: Policy, spans: SpanPolicy) -> Answer:
    """One level: the span's own steps as first shown, its inner spans as their collapsed blocks."""
    parts = [
        f"{CM} Span {span.id} expanded one level (steps {span.begin}-{span.end}), from history; nothing was run again.",
        f"Question: {span.question}",
        f"Conclusion: {span.conclusion}",
    ]
    children = [book.spans[c] for c in span.children if book.spans[c].end is not None]
    own: list[int] = []
    i = span.begin
    while i <= (span.end or span.begin):
        child = next((c for c in children if c.begin == i), None)
        if child is not None:
            steps = history.steps_between(child.begin - 1, child.end or child.begin)
            parts.append(block_text(child, steps, book, reversible=policy.reversible))
            i = (child.end or i) + 1
            continue
        parts.append(restore_text(history, [i], policy, spans=spans))
        own.append(i)
        i += 1
    return _answer(Outcome("expand", True, "\n".join(parts), span.id), own)


# ---- search and the ledger view ---------------------------------------------------------------


def _status(obj: LedgerObject, book: LedgerBook, cover: dict[int, Span]) -> str:
    state = ""
    for op in book.ops:
        if op.step == obj.step and op.sub in (None, obj.sub):
            state = f"{op.kind}ed".replace("droped", "dropped")
    if obj.step in cover:
        state = (state + ", " if state else "") + f"in span {cover[obj.step].id}"
    return state or "shown"


def _books(history: History, t: int, spans: SpanPolicy, ledger: LedgerPolicy) -> tuple[list[Step], SpanBook, LedgerBook]:
    steps = history.steps_between(0, t)
    sbook, lbook = SpanBook(spans), LedgerBook(ledger)
    for s in steps:
        sbook.observe(s)
        lbook.observe(s)
    return steps, sbook, lbook


def search_text(history: History, query: str, t: int, spans: SpanPolicy = DEFAULT_SPANS, ledger: LedgerPolicy = DEFAULT_LEDGER) -> str:
    """``search_ledger``: BM25 over every output's summary and body and every span, folded or not.

    ``search_ledger *`` (or an empty query) answers with the whole ledger view instead.
    """
    if query.strip() in ("", "*"):
        return ledger_view(history, t, spans, ledger)
    steps, sbook, lbook = _books(history, t, spans, ledger)
    cover = {i: s for s in sbook.closed for i in s.covers}
    objs = [o for s in steps for o in objects_of(s) if o.kind != "context"]
    docs = [f"{summary(o)}\n{o.body}" for o in objs]
    closed = list(sbook.closed)
    docs += [f"{s.question}\n{s.conclusion}" for s in closed]
    hits = bm25(docs, query)[: ledger.search_results]
    total = len(docs)
    if not hits:
        return f'{CM} search_ledger "{query}": no match among {total} outputs and spans.'
    lines = [f'{CM} search_ledger "{query}": {len(hits)} best of {total} outputs and spans (nothing was run again):']
    for _, i in hits:
        if i < len(objs):
            o = objs[i]
            lines.append(f"{o.id} [{_status(o, lbook, cover)}] {summary(o)}")
            line = best_line(o.body, query)
            if line:
                lines.append(f"    > {line}")
        else:
            s = closed[i - len(objs)]
            lines.append(f"{s.id} [span, steps {s.begin}-{s.end}] {s.question} -> {s.conclusion}")
    lines.append("`expand <id>` shows one as first shown.")
    return "\n".join(lines)


def ledger_view(history: History, t: int | None = None, spans: SpanPolicy = DEFAULT_SPANS, ledger: LedgerPolicy = DEFAULT_LEDGER) -> str:
    """The ledger as one message: id, status, created and last-touched steps, summary, per output."""
    t = len(history) if t is None else t
    steps, sbook, lbook = _books(history, t, spans, ledger)
    cover = {i: s for s in sbook.closed for i in s.covers}
    lines = [f"{CM} Ledger after step {t} (id [status] created/last touched: summary):"]
    for s in steps:
        for o in objects_of(s):
            if o.kind != "context":
                lines.append(f"{o.id} [{_status(o, lbook, cover)}] {o.step}/{last_touched(steps, o)}: {summary(o)}")
    for span in sbook.closed:
        lines.append(f"{span.id} [span, steps {span.begin}-{span.end}]: {span.question} -> {span.conclusion}")
    for sid in sbook.stack:
        span = sbook.spans[sid]
        lines.append(f"{span.id} [open since step {span.begin}]: {span.question}")
    return "\n".join(lines)

"""Context commands answered from the history; nothing is ever run.

    Answerer(history, config, t=None).answer(command) -> Answer(text, outcome, restore_of)

``history`` holds the steps before the one issuing the commands (or pass ``t``: they are step
t+1). One ``Answerer`` answers the commands of one reply in order, each seeing what the ones
before it did (two ``begin_span`` open S1 and S2 inside it; a fold then a search finds the fold,
pending), which is how the rendering replays that step, so an answer and a rendering never
disagree. ``search_ledger`` gives each output's status as the prompt of call t showed it.
``refold.wire.answer_record`` puts an answer into its observation's ``extra``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..config import DEFAULT, Config
from ..history import History
from ..mechanisms.boundary import defers_folds, fold_deadline
from ..mechanisms.ledger import LedgerBook, objects_of, parse_ids
from ..mechanisms.objects import reply_id
from ..mechanisms.pins import PinBook
from ..mechanisms.spans import Span, SpanBook, block_text, folded_text, parse_span_id
from ..protocol import CM, ContextCommand, parse_restore_args
from ..render import Renderer
from ..render.folds import fold_timing
from ..render.received import demo_text, message_chars
from ..restore import CallLines, restore_text
from ..types import Answer, Message, Origin, Outcome, content_text
from .search import ledger_view, objects_view, prompt_states, search_text


def refused(name: str, text: str) -> Answer:
    """A command not carried out: ``text`` says why; the outcome records it as failed."""
    return Answer(text, Outcome(name, False, None))


class Answerer:
    """Answers the context commands issued at step t+1 (default: after the whole history)."""

    def __init__(
        self, history: History, config: Config = DEFAULT, t: int | None = None, *, call_lines: CallLines | None = None
    ) -> None:
        t = len(history) if t is None else t
        self.call_lines = call_lines
        """How the recorder shows a restored reply's calls as sent (``restore.CallLines``)."""
        if not 0 <= t <= len(history):
            raise ValueError(f"t={t} is outside 0..{len(history)}")
        self.history, self.config, self.t = history, config, t
        self._spans: SpanBook | None = None
        self._ledger: LedgerBook | None = None
        self._pins: PinBook | None = None
        self._last: tuple[list[Message], list[Origin]] | None = None  # the prompt of call t, once asked
        self._plain = False  # that prompt was the plain history (``prompt.deferred``)

    @property
    def spans(self) -> SpanBook:
        if self._spans is None:
            self._spans = SpanBook(self.config.spans)
            for s in self.history.steps_between(0, self.t):
                self._spans.observe(s)
        return self._spans

    @property
    def ledger(self) -> LedgerBook:
        if self._ledger is None:
            self._ledger = LedgerBook(self.config.ledger)
            for s in self.history.steps_between(0, self.t):
                self._ledger.observe(s)
        return self._ledger

    @property
    def pins(self) -> PinBook:
        if self._pins is None:
            self._pins = PinBook(plans=self.config.ledger.pin_plans, protect=self.config.policy.protect)
            for s in self.history.steps_between(0, self.t):
                self._pins.observe(s)
        return self._pins

    def answer(self, command: ContextCommand) -> Answer:
        name, arg, t = command.name, command.argument, self.t
        if name == "restore" and arg.strip().lower() in ("demo", "demonstration"):
            return self._restore_demo()
        if name == "restore":
            found, error = parse_restore_args(arg, t)
            if error is not None:
                return refused(name, error)
            return self._restore(found)
        if name in ("begin_span", "fold_span", "fold_steps"):
            done = self.spans.apply(command, t + 1)
            return self._when_folded(done) if name != "begin_span" else done
        if name in ("fold", "drop"):
            return self.ledger.apply(command, t + 1)
        if name in ("pin", "unpin"):
            return self.pins.apply(command, t + 1)
        if name == "expand":
            return self._expand(arg)
        if name == "search_ledger":
            steps = self.history.steps_between(0, t)
            objects = self.config.ledger.objects or self.config.ledger.view
            # each output's status as the prompt this command was issued from showed it
            states = prompt_states(steps, self._prompt(), self.ledger)
            if arg.strip() in ("", "*"):
                view = (
                    objects_view(steps, t, self.spans, self.ledger, self.pins.pinned(t, self.history.pins), states)
                    if objects
                    else ledger_view(steps, t, self.spans, self.ledger, states)
                )
            else:
                limit = self.config.ledger.search_results
                view = search_text(steps, arg, self.spans, self.ledger, limit, replies=objects, states=states)
            return Answer(view, Outcome(name, True))
        return refused(name, f"{CM} unknown context command '{name}'.")

    def _when_folded(self, done: Answer) -> Answer:
        """Under the cost rule, say whether the fold shows now or waits for the next boundary move,
        as the render at the next call decides it (``render.folds``)."""
        span = self.spans.spans.get(done.outcome.target or "") if done.ok and done.outcome else None
        if span is None or span.end is None or not defers_folds(self.config):
            return done
        self._prompt()
        messages, origins = self._last or ([], [])
        t = self.t + 1
        if self._plain:  # the plain history was sent: the protocol's prompt replaces all after the prefix
            now, chars = True, sum(message_chars(m) for m in messages[len(self.history.prefix) :])
            tokens = round(chars / self.config.spans.chars_per_token)
        else:
            now, tokens = fold_timing(self.config, self.history, t, span, self.spans, messages, origins)
        later = None if now else fold_deadline(self.config, t) - t
        return Answer(folded_text(span, tokens, deferred_calls=later), done.outcome, done.restore_of)

    def _prompt(self) -> tuple[list[Message], list[Origin]] | None:
        """The prompt of call t (the one whose reply issued these commands), rendered once; None when
        that call was sent the plain history (``prompt.deferred``)."""
        if self._last is None:
            renderer = Renderer(self.config)
            last = renderer.render(self.history, self.t)
            self._last = (last.messages, last.origins)
            self._plain = renderer.sent_plain
        return None if self._plain else self._last

    # ---- restore and expand ------------------------------------------------------------------

    def _restored(self, steps: list[int]) -> str:
        return restore_text(self.history, steps, self.config, call_lines=self.call_lines)

    def _restore(self, steps: list[int]) -> Answer:
        policy = self.config.policy
        text = self._restored(steps)
        ok = policy.reversible
        return Answer(text, Outcome("restore", ok, " ".join(map(str, steps))), tuple(steps) if ok else ())

    def _restore_demo(self) -> Answer:
        """``restore demo``: the prefix's demonstration byte-exact (``prompt.hide_demos``)."""
        text = demo_text(self.history)
        if text is None:
            return refused("restore", f"{CM} restore: this session has no demonstration; use e.g. `restore 3`.")
        if not self.config.policy.reversible:
            return refused("restore", self._restored([]))
        return Answer(f"{CM} The demonstration, restored from history:\n{text}", Outcome("restore", True, "demo"))

    def _expand(self, argument: str) -> Answer:
        policy, t = self.config.policy, self.t
        if not policy.reversible:
            return refused("expand", self._restored([]))
        if parse_span_id(argument) is not None:
            span = self.spans.get(argument)
            if span is None or span.end is None:
                known = ", ".join(s.id for s in self.spans.closed) or "none yet"
                return refused("expand", f"{CM} expand: {argument.strip()} is not a folded span (folded: {known}).")
            return self._expand_span(span)
        ids = parse_ids(argument)
        if not ids:
            return refused("expand", f"{CM} expand needs an output id (`expand 7`, `expand 7.2`) or a span id (`expand S1`).")
        parts: list[str] = []
        shown: list[int] = []
        for step_no, sub in ids:
            if not 1 <= step_no <= t:
                return refused("expand", f"{CM} expand: there is no step {step_no}; steps 1-{t} exist.")
            step = self.history.step(step_no)
            if sub is None:
                parts.append(self._restored([step_no]))
            elif sub == -1:
                parts.append(f"{CM} Reply {reply_id(step_no)} restored from history, byte for byte:")
                parts.append(step.reply_text)
            else:
                objs = objects_of(step)
                if not 0 <= sub < len(objs):
                    return refused("expand", f"{CM} expand: step {step_no} has {len(objs)} output(s).")
                received = Renderer(self.config).received(self.history, step_no)
                parts.append(f"{CM} Output {objs[sub].id} restored from history (nothing was run again), as first shown:")
                parts.append(content_text(received[1 + sub].get("content")))
            shown.append(step_no)
        return Answer("\n".join(parts), Outcome("expand", True, argument.strip()), tuple(dict.fromkeys(shown)))

    def _expand_span(self, span: Span) -> Answer:
        """One level: the span's own steps as first shown, its inner spans as their collapsed blocks."""
        book, policy, h = self.spans, self.config.policy, self.history
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
                steps = h.steps_between(child.begin - 1, child.end or child.begin)
                parts.append(block_text(child, steps, book, reversible=policy.reversible))
                i = (child.end or i) + 1
                continue
            parts.append(self._restored([i]))
            own.append(i)
            i += 1
        return Answer("\n".join(parts), Outcome("expand", True, span.id), tuple(own))


def answer(history: History, command: ContextCommand, config: Config = DEFAULT, *, t: int | None = None) -> Answer:
    """Answer one ``command`` issued at step t+1 (default: after the whole history)."""
    return Answerer(history, config, t).answer(command)


# ---- custom answers (mini's ``refold_commands``) ------------------------------------------------


@dataclass(frozen=True, slots=True)
class Request:
    """What a custom handler may read: the history before the step issuing the command."""

    history: History
    config: Config
    step: int  # the step issuing the command (len(history) + 1)


Handler = Callable[[ContextCommand, Request], Answer]
"""Answers one context command in place of refold (``refold_commands: {name: dotted.path}``)."""

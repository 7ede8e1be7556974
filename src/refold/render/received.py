"""Stage 1 of the render path: the prefix and every step as the model first received it.

A received form is final once computed: the reply, then each output labeled ``[step N]``, with
the notes that went with the last output when it was new (the PROGRESS/STALE reminder, an open
span's reminder, the budget line). Later stages replace outputs but keep those notes (``suffix``),
except the reminder once the step is behind the boundary (``kept_notes``): answered, it is spent.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..config import Config
from ..history import History
from ..mechanisms.boundary import plain_first
from ..mechanisms.ledger import budget_line
from ..messages import clean, label, with_content, with_text
from ..prompts import ledger_section, reminder, span_section, system_section
from ..protocol import CM
from ..types import Message, Origin, Shown, Step, content_text

SYSTEM_ROLES = ("system", "developer")


@dataclass(slots=True)
class Received:
    """One step as received: its messages, their origins, and the notes after its last output."""

    msgs: list[Message]
    origins: list[Origin]
    suffix: str  # "" or "\n<note>\n<note>" appended to the last output
    chars: int  # characters of the contents (what the budget line and the cost rule count)

    @property
    def chars_of_reply(self) -> int:
        return message_chars(self.msgs[0])


def prefix_messages(history: History, config: Config) -> tuple[list[Message], list[Origin]]:
    """System prompt and task, as recorded, with refold's protocol section joined to the system prompt
    (``prompt.deferred``: a message after them, as the protocol's prompt first arrives mid-session)."""
    policy = config.policy
    prefix = [clean(m) for m in history.prefix]
    origins = [Origin(None, "system" if m.get("role") in SYSTEM_ROLES else "task", Shown.PREFIX) for m in prefix]
    if policy.protocol and plain_first(config) and config.prompt.hide_demos and policy.reversible:
        prefix, origins = _demos_as_notes(history.prefix, prefix, origins)
    if policy.protocol:
        section = system_section(
            policy.k, reversible=policy.reversible, include_format=config.prompt.format_in_system,
            masking=policy.mask_after is not None, chunk=fixed_cadence(config),
        )
        if config.spans.prompt:
            section += span_section(min_chars=config.spans.min_chars, fold_steps=config.spans.fold_steps)
        if config.ledger.prompt:
            budget = config.ledger.budget_tokens
            section += ledger_section(
                budget_line(0, config.ledger).rsplit(" of ", 1)[1] if budget else None,
                objects=config.ledger.objects, view=config.ledger.view,
            )
        if plain_first(config):  # sent only from the first omission on: after the prefix, which stays cached
            prefix.append({"role": "user", "content": f"{CM}{section}"})
            origins.append(Origin(None, "system", Shown.PREFIX))
        elif prefix and prefix[0].get("role") in SYSTEM_ROLES:  # OpenAI's newer models say "developer"
            prefix[0] = with_text(prefix[0], content_text(prefix[0].get("content")) + section)
        else:
            prefix.insert(0, {"role": "system", "content": section.lstrip()})
            origins.insert(0, Origin(None, "system", Shown.PREFIX))
    return prefix, origins


def fixed_cadence(config: Config) -> bool:
    """Whether the shown forms change only every k steps: the seed's chunked rule. Under the cost
    rule a move that did not pay at one multiple of k may pay a call or two later, so the protocol
    makes no such promise."""
    return config.policy.chunk and config.boundary.rule == "fixed"


def _demos_as_notes(
    recorded: Sequence[Message], prefix: list[Message], origins: list[Origin]
) -> tuple[list[Message], list[Origin]]:
    """``prefix`` with each run of demonstration messages (shown by the plain history) as one note: a
    demonstration put in the history (SWE-agent ``put_demos_in_history``) is several user and
    assistant messages, which are one demonstration, not one each (nor a note in the assistant's voice)."""
    msgs: list[Message] = []
    shown: list[Origin] = []
    run: list[Message] = []
    for m, p, o in [*zip(recorded, prefix, origins, strict=True), (None, None, None)]:
        if m is not None and m.get("is_demo"):
            run.append(m)
            continue
        if run:
            role = run[0].get("role", "user")
            text = "\n".join(content_text(d.get("content")) for d in run)
            msgs.append({"role": "user" if role == "assistant" else role, "content": demo_note(text, len(run))})
            shown.append(Origin(None, "task", Shown.NOTE))
            run = []
        if p is not None and o is not None:
            msgs.append(p)
            shown.append(o)
    return msgs, shown


def demo_note(text: str, messages: int = 1) -> str:
    """What the protocol's prompt shows in place of a demonstration in the prefix (``prompt.hide_demos``)."""
    lines = len(text.splitlines())
    size = f"{lines} lines" if messages == 1 else f"{messages} messages, {lines} lines"
    return (
        f"{CM} A demonstration ({size}) was shown here while you started; it is hidden now that "
        "your own steps show the format. `restore demo` shows it again."
    )


def demo_text(history: History) -> str | None:
    """The demonstrations of the prefix as first shown (the answer to ``restore demo``), if any."""
    demos = [content_text(m.get("content")) for m in history.prefix if m.get("is_demo")]
    return "\n".join(demos) if demos else None


def received_form(step: Step, config: Config, span_note: str | None = None) -> Received:
    """``step`` as first shown: labeled outputs, the reminder if its reply lacked the protocol."""
    policy = config.policy
    reply = clean(step.reply)
    msgs: list[Message] = [reply]
    origins = [Origin(step.index, "reply", Shown.RECEIVED)]
    chars = message_chars(reply)
    observations = step.observations
    if not observations:
        return Received(msgs, origins, "", chars)
    notes = []
    if policy.protocol and policy.reminders and not step.has_protocol:
        notes.append(reminder())
    if span_note:
        notes.append(span_note)
    suffix = "\n" + "\n".join(notes) if notes else ""
    last = len(observations) - 1
    # one Origin for every output: it is frozen, and this runs once per step of every call
    origin = Origin(step.index, "output", Shown.RESTORED if step.restores else Shown.RECEIVED, step.restore_of)
    protocol, index = policy.protocol, step.index
    for j, obs in enumerate(observations):
        content = obs.get("content")
        text = label(index, content_text(content)) if protocol else content_text(content)
        if j == last:
            text += suffix
        if type(content) is str:  # what with_content does for text, without its checks
            m = clean(obs)
            m["content"] = text
            chars += len(text)
        else:
            m = with_content(obs, text)
            chars += len(text) if not isinstance(content, list) else message_chars(m)
        msgs.append(m)
        origins.append(origin)
    return Received(msgs, origins, suffix, chars)


SPENT = "\n" + reminder()
"""The PROGRESS/STALE reminder as it opens a suffix: behind the boundary it has been answered."""


def without_reminder(text: str) -> str:
    """An output's text without the reminder among the notes at its end (what ``restore`` shows)."""
    head, sep, rest = text.rpartition(SPENT)
    if sep and all(ln.startswith(CM) for ln in rest.split("\n")[1:]) and (not rest or rest.startswith("\n" + CM)):
        return head + rest
    return text


def kept_notes(rec: Received) -> str:
    """The notes after a step's last output that stay behind the boundary: all but the reminder
    (a span note, the budget line the ledger's prompt promises on every output)."""
    return rec.suffix.removeprefix(SPENT)


def message_chars(m: Message) -> int:
    return len(content_text(m.get("content")))


class ReceivedLog:
    """Every step as first shown, in order, with running totals: a tail of plain steps is one slice
    of ``msgs``/``origins`` and its size one subtraction, whatever the history's length."""

    __slots__ = ("at", "cum", "forms", "msgs", "notes", "origins", "restores", "times")

    def __init__(self) -> None:
        self.forms: list[Received] = []  # per step, index i-1
        self.cum = [0]  # characters of steps 1..i
        self.msgs: list[Message] = []  # every step's messages in order, and their origins
        self.origins: list[Origin] = []
        self.at = [0]  # messages of steps 1..i
        self.times: list[float | None] = []  # when each step was complete (recorded)
        self.notes: list[str | None] = []  # the span reminder shown with each step
        self.restores: list[int] = []  # restore steps, ascending

    def __len__(self) -> int:
        return len(self.forms)

    def add(self, step: Step, form: Received, note: str | None, time: float | None) -> None:
        self.forms.append(form)
        self.msgs += form.msgs
        self.origins += form.origins
        self.at.append(len(self.msgs))
        self.cum.append(self.cum[-1] + form.chars)
        self.times.append(time)
        self.notes.append(note)
        if step.restores:
            self.restores.append(step.index)

    def chars(self, b: int, t: int) -> int:
        """Characters of steps b+1..t as received."""
        return self.cum[t] - self.cum[b]

    def extend_plain(self, b: int, t: int, msgs: list[Message], origins: list[Origin]) -> None:
        """Steps b+1..t as received, appended."""
        at = self.at
        msgs += self.msgs[at[b] : at[t]]
        origins += self.origins[at[b] : at[t]]

    def idle(self, t: int) -> float | None:
        """Seconds between calls t and t+1 (``boundary.idle_s``), from the steps' recorded times."""
        if t < 2:
            return None
        now, before = self.times[t - 1], self.times[t - 2]
        return None if now is None or before is None else now - before

    def add_line(self, t: int, line: str, history: History) -> Message:
        """Step t (the newest) shown from now on with ``line`` (its budget line) after its last
        output: its form, running total and message log; returns its new last message."""
        form = self.forms[t - 1]
        msgs = form.msgs[:]
        last = msgs[-1]
        content = last.get("content")
        line = "\n" + line
        if type(content) is str:  # already clean: a copy with the longer text (keys in the same order)
            new = msgs[-1] = {**last, "content": content + line}
        else:
            new = msgs[-1] = with_content(history.step(t).observations[-1], content_text(content) + line)
        n = len(line)
        self.forms[t - 1] = Received(msgs, form.origins, form.suffix + line, form.chars + n)
        self.cum[t] += n
        self.msgs[self.at[t] - 1] = new
        return new

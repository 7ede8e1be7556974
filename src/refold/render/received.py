"""Stage 1 of the render path: the prefix and every step as the model first received it.

A received form is final once computed: the reply, then each output labeled ``[step N]``, with
the notes that went with the last output when it was new (the PROGRESS/STALE reminder, an open
span's reminder, the budget line). Later stages replace outputs but keep those notes (``suffix``).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config import Config
from ..history import History
from ..mechanisms.ledger import budget_line
from ..messages import clean, label, with_content, with_text
from ..prompts import ledger_section, reminder, span_section, system_section
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
    """System prompt and task, as recorded, with refold's protocol section joined to the system prompt."""
    policy = config.policy
    prefix = [clean(m) for m in history.prefix]
    origins = [Origin(None, "system" if m.get("role") in SYSTEM_ROLES else "task", Shown.PREFIX) for m in prefix]
    if policy.protocol:
        section = system_section(
            policy.k, reversible=policy.reversible, include_format=config.prompt.format_in_system,
            masking=policy.mask_after is not None, chunk=policy.chunk,
        )
        if config.spans.prompt:
            section += span_section(min_chars=config.spans.min_chars, fold_steps=config.spans.fold_steps)
        if config.ledger.prompt:
            budget = config.ledger.budget_tokens
            section += ledger_section(
                budget_line(0, config.ledger).rsplit(" of ", 1)[1] if budget else None,
                objects=config.ledger.objects, view=config.ledger.view,
            )
        if prefix and prefix[0].get("role") in SYSTEM_ROLES:  # OpenAI's newer models say "developer"
            prefix[0] = with_text(prefix[0], content_text(prefix[0].get("content")) + section)
        else:
            prefix.insert(0, {"role": "system", "content": section.lstrip()})
            origins.insert(0, Origin(None, "system", Shown.PREFIX))
    return prefix, origins


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
    suffix = "".join("\n" + n for n in notes)
    last = len(observations) - 1
    # one Origin for every output: it is frozen, and this runs once per step of every call
    origin = Origin(step.index, "output", Shown.RESTORED if step.restore_of else Shown.RECEIVED, step.restore_of)
    for j, obs in enumerate(observations):
        content = obs.get("content")
        text = content_text(content)
        if policy.protocol:
            text = label(step.index, text)
        if j == last:
            text += suffix
        m = with_content(obs, text)
        msgs.append(m)
        origins.append(origin)
        chars += len(text) if not isinstance(content, list) else message_chars(m)
    return Received(msgs, origins, suffix, chars)


def with_budget_line(form: Received, step: Step, line: str) -> Received:
    """The received form with the budget line after its last output (computed when the step is new)."""
    if len(form.msgs) < 2:
        return form
    msgs = list(form.msgs)
    msgs[-1] = with_content(step.observations[-1], content_text(msgs[-1].get("content")) + "\n" + line)
    return Received(msgs, form.origins, form.suffix + "\n" + line, form.chars + len(line) + 1)


def message_chars(m: Message) -> int:
    return len(content_text(m.get("content")))

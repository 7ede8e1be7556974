"""Frozen value types shared by the core: steps of history and pieces of a rendered prompt."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from .protocol import ContextCommand
from .shell_info import CommandInfo

Message = dict[str, Any]
"""An OpenAI-style chat message (role, content, optional tool_calls / tool_call_id / name)."""


class Shown(StrEnum):
    """How a piece of history appears in a rendered prompt."""

    PREFIX = "prefix"  # system prompt and task, always as received
    RECEIVED = "received"  # sent exactly as it happened (plus the [step N] label)
    STUB = "stub"  # the whole output replaced by a pointer to an earlier step
    TRIMMED = "trimmed"  # repeated lines cut, new lines kept
    NOTE = "note"  # folded steps replaced by one [context-manager] note
    RESTORED = "restored"  # a restore answered from history
    PINNED = "pinned"  # pinned by the user or the agent (or the latest plan): as received, never hidden
    HIDDEN = "hidden"  # in the history only (used by viewers)


@dataclass(frozen=True, slots=True)
class Action:
    """One command the agent issued in a reply (a ```bash block or a tool call), with its facts.

    ``context`` is the context command it is (answered from the history, never run), ``effects``
    what it reads and writes; both are computed once, by ``refold.wire``, when the step is appended.
    """

    command: str
    tool: str = "bash"
    tool_call_id: str | None = None
    context: ContextCommand | None = field(default=None, kw_only=True)
    effects: CommandInfo = field(kw_only=True)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a context command did when it was answered: whether it took effect, and on what."""

    name: str
    ok: bool
    target: str | None = None


@dataclass(frozen=True, slots=True)
class Answer:
    """The answer to a context command: the text the agent reads, its outcome, the steps shown again."""

    text: str
    outcome: Outcome | None = None
    restore_of: tuple[int, ...] = ()

    @property
    def ok(self) -> bool:
        return self.outcome is not None and self.outcome.ok


@dataclass(frozen=True, slots=True)
class Facts:
    """What a step's messages say beyond their text: its actions, and the recorded outcomes and
    restores of the context commands among them (``refold.wire`` reads and writes them)."""

    actions: tuple[Action, ...] = ()
    outcomes: tuple[Outcome, ...] = ()
    restore_of: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Step:
    """Turn ``index`` (1-based): the agent's reply and what came back for it.

    ``reply`` and ``observations`` are the messages as recorded; they are never edited.
    """

    index: int
    reply: Message
    observations: tuple[Message, ...]
    actions: tuple[Action, ...]
    progress: str | None
    stale: tuple[int, ...]
    has_protocol: bool
    digest: str
    outcomes: tuple[Outcome, ...] = ()
    """Recorded outcomes of the step's context commands, in order (a recorded refusal stays one)."""
    restore_of: tuple[int, ...] = ()
    """Steps this step showed again (a restore or expand answered from history)."""
    user_messages: tuple[int, ...] = ()
    """Observations (by index) that are messages to the agent, not outputs of its calls: what a
    person typed mid-session, or a harness's note (``refold.wire.user_messages``). Never hidden."""
    meta: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    """Facts outside the digest: provider usage, the proxy's internal flag, and ``time`` (when the step was
    complete, ``refold.wire.step_time``), from which render reads idle gaps against the cache lifetime."""

    @property
    def reply_text(self) -> str:
        c = self.reply.get("content")
        return c if type(c) is str else content_text(c)  # read a few times per call: no call for text

    @property
    def output_texts(self) -> tuple[str, ...]:
        obs = self.observations
        if len(obs) == 1:  # the usual step: one output, no comprehension
            c = obs[0].get("content")
            return (c if type(c) is str else content_text(c),)
        return tuple([c if type(c := m.get("content")) is str else content_text(c) for m in obs])

    @property
    def restores(self) -> bool:
        """Whether its output answers a restore from history (of steps, or ``restore demo``): shown
        as answered, never stubbed, held visible like any restore."""
        return bool(self.restore_of) or any(o.name == "restore" and o.ok and o.target == "demo" for o in self.outcomes)


def content_text(content: Any) -> str:
    """The text of a message content: a string, or the text parts of a content list."""
    if type(content) is str:  # the usual case first
        return content
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts: list[str] = []
        for part in content:
            if isinstance(part, dict):
                text = part.get("text")
                if isinstance(text, str):
                    parts.append(text)
            elif isinstance(part, str):
                parts.append(part)
        return "".join(parts)
    return str(content)


def message_digest(messages: list[Message] | tuple[Message, ...], parent: str = "") -> str:
    """A content hash over messages, chained to ``parent`` so equal prefixes share digests."""
    h = hashlib.sha256(parent.encode())
    h.update("".join(map(_DIGEST_JSON.encode, messages)).encode())  # one update: the same digest
    return h.hexdigest()[:16]


_DIGEST_JSON = json.JSONEncoder(sort_keys=True, ensure_ascii=False, default=str)  # what json.dumps would build per call


@dataclass(frozen=True, slots=True)
class Origin:
    """Provenance of one rendered message: which step it came from and how it is shown."""

    step: int | None
    part: str  # "system" | "task" | "reply" | "output" | "note" | "notice"
    shown: Shown
    covers: tuple[int, ...] = ()  # steps whose content this message stands for (notes, stubs)


@dataclass(frozen=True, slots=True)
class RenderStats:
    """What one render did: the call (``t`` steps), where the boundary stood, and how many outputs were
    stubbed, trimmed, folded or restored."""

    t: int
    boundary: int
    stubs: int = 0
    trimmed: int = 0
    folded_steps: int = 0
    notes: int = 0
    """Notes of folded steps (adjacent folded steps share one). Masked outputs and condensed replies
    are notes too but not counted here: count ``Shown.NOTE`` in ``Rendered.origins`` for every note."""
    restores: int = 0
    render_ms: float = 0.0
    stable: int = 0
    """Leading messages identical to the previous call's prompt (0: unknown, when t-1 was not rendered
    just before): a cache breakpoint after them hits what the provider wrote last time."""


@dataclass(frozen=True, slots=True)
class Rendered:
    """A rendered prompt. ``messages`` are shared with the renderer's cache: treat them as read-only."""

    messages: list[Message]
    origins: list[Origin]
    stats: RenderStats

    def serialized(self) -> str:
        """The prompt as one string (what prefix caching sees, up to the chat template)."""
        return "".join(_serialize_message(m) for m in self.messages)


def _serialize_message(m: Message) -> str:
    body = json.dumps(
        {k: m[k] for k in ("content", "tool_calls", "tool_call_id", "name") if k in m},
        sort_keys=True,
        ensure_ascii=False,
    )
    return f"<|{m.get('role', '')}|>{body}\n"

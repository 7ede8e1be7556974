"""The append-only history of an agent run (files are read by ``refold.loaders``).

A ``History`` is a prefix (system prompt, task) followed by steps. Steps are only ever
appended; rendering reads them and never changes them.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, NoReturn

from .errors import TrajectoryError
from .mechanisms.pins import Pin, check_target
from .protocol import parse_head
from .scrub import scrub_value
from .types import Facts, Message, Step, content_text, message_digest
from .wire import facts_record, made_calls, read_facts, step_time, user_messages

CHAT_ROLES = ("system", "developer", "user", "assistant", "tool", "function")
RECORD_ROLES = ("exit",)
"""Roles of records a trajectory keeps beside the conversation (mini's closing ``exit``): never sent."""
KEPT = "kept"
"""``extra[KEPT]`` on an assistant message: the harness kept it in the prompt, but no call of this
context wrote it (an answer a Codex compaction kept): part of the prefix, as a demonstration is."""


def is_kept(message: Mapping[str, Any]) -> bool:
    extra = message.get("extra")
    return message.get("role") == "assistant" and isinstance(extra, dict) and bool(extra.get(KEPT))


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


class History:
    """Append-only: ``append`` adds a step, nothing removes or edits one."""

    __slots__ = ("_prefix", "_steps", "_pins", "_calls", "source", "meta")

    def __init__(self, prefix: Sequence[Message], *, source: str = "", meta: dict[str, Any] | None = None):
        self._prefix: tuple[Message, ...] = tuple(copy.deepcopy(list(prefix)))
        try:
            message_digest(self._prefix)
        except UnicodeEncodeError:  # lone surrogates become U+FFFD (see append)
            self._prefix = tuple(map(scrub_value, self._prefix))
        self._steps: list[Step] = []
        self._pins: list[Pin] = []
        self._calls = False  # whether a step so far called tools (``wire.user_messages``)
        self.source = source
        self.meta: dict[str, Any] = dict(meta or {})

    @property
    def prefix(self) -> tuple[Message, ...]:
        return self._prefix

    @property
    def steps(self) -> tuple[Step, ...]:
        return tuple(self._steps)

    def steps_between(self, start: int, stop: int) -> list[Step]:
        """Steps start+1 .. stop (a slice by 0-based offsets), without copying the whole list."""
        return self._steps[start:stop]

    def __len__(self) -> int:
        return len(self._steps)

    def __iter__(self) -> Iterator[Step]:
        return iter(list(self._steps))

    def step(self, index: int) -> Step:
        """Step ``index`` (1-based)."""
        if index >= 1:  # the render asks this a few times per call: no len() on the way
            try:
                return self._steps[index - 1]
            except IndexError:
                pass
        raise IndexError(f"no step {index}; the history has steps 1-{len(self._steps)}")

    @property
    def digest(self) -> str:
        return self._steps[-1].digest if self._steps else message_digest(self._prefix)

    def append(
        self,
        reply: Message,
        observations: Sequence[Message] = (),
        *,
        facts: Facts | None = None,
        meta: dict[str, Any] | None = None,
    ) -> Step:
        """Add the next step: the agent's reply and the messages that answered it.

        Its facts (actions, context commands, outcomes, restores) are read from the messages
        (``refold.wire``) unless given. The digest covers the messages, and the facts too when
        they are not the ones the messages say, so equal digests always render equally.
        ``meta`` is for what no rendering reads (usage, flags).
        """
        observations = _check_messages(reply, observations)
        reply = _copy(reply)
        obs = tuple(_copy(observations))
        given = facts
        try:
            facts, digest = self._facts(reply, obs, given)
        except UnicodeEncodeError:  # a lone surrogate (output decoded with surrogateescape): U+FFFD,
            reply, obs = scrub_value(reply), tuple(map(scrub_value, obs))  # as the loaders and proxy store it
            facts, digest = self._facts(reply, obs, given)
        head = parse_head(content_text(reply.get("content")))
        step = Step(
            index=len(self._steps) + 1,
            reply=reply,
            observations=obs,
            actions=facts.actions,
            progress=head.progress,
            stale=head.stale,
            has_protocol=head.has_protocol,
            digest=digest,
            outcomes=facts.outcomes,
            restore_of=facts.restore_of,
            user_messages=user_messages(reply, obs, self._calls),
            meta=dict(meta or {}),
        )
        self._calls = self._calls or made_calls(reply)
        self._steps.append(step)
        return step

    def _facts(self, reply: Message, obs: tuple[Message, ...], given: Facts | None) -> tuple[Facts, str]:
        """The step's facts and its digest, which covers the facts too when they are not the recorded ones."""
        recorded = read_facts(reply, obs)
        facts = recorded if given is None else given
        covered: list[Message] = [reply, *obs]
        if facts != recorded:
            covered.append(facts_record(facts))
        return facts, message_digest(covered, parent=self.digest)

    # ---- pins (the user's; the agent's are its pin/unpin commands) -----------------------------

    @property
    def pins(self) -> tuple[Pin, ...]:
        """The user's pins and unpins in the order set; each is in effect from the call after
        ``at`` steps, so ``render(history, config, t)`` stays a function of the value."""
        return tuple(self._pins)

    def pin(self, target: str, *, on: bool = True) -> Pin:
        """Pin an object (``"7"``, ``"7.2"``, ``"r7"``) from the next call on: it is then never masked,
        folded or compacted away. Raises ``ValueError`` with one line when no such object exists."""
        _, error = check_target(target, [len(s.observations) for s in self._steps], len(self._steps))
        if error:
            raise ValueError(f"{'pin' if on else 'unpin'} {target!r}: {error}")
        pin = Pin(" ".join(target.split()), len(self._steps), on)
        self._pins.append(pin)
        return pin

    def unpin(self, target: str) -> Pin:
        """Release a pin set by ``pin`` (or the agent) from the next call on."""
        return self.pin(target, on=False)

    def load_pins(self, records: Iterable[Mapping[str, Any]]) -> None:
        """Pins saved with ``Pin.record()`` (a restart): appended as they were, in order."""
        for r in records:
            target, at = r.get("target"), r.get("at")
            if not isinstance(target, str) or not isinstance(at, int) or isinstance(at, bool) or at < 0:
                raise ValueError(f"pin record {dict(r)!r}: needs a target id and a step count 'at'")
            self._pins.append(Pin(target, at, r.get("on", True) is not False))

    def messages(self) -> list[Message]:
        """The full message list as recorded (a deep copy)."""
        out = list(self._prefix)
        for s in self._steps:
            out.append(s.reply)
            out.extend(s.observations)
        return copy.deepcopy(out)

    # ---- construction -------------------------------------------------------------------

    @staticmethod
    def required(value: object) -> NoReturn:
        """The TypeError for a render given something other than a History (a message list, a path)."""
        hint = "History.from_messages(messages)" if isinstance(value, list) else "refold.load(path)"
        raise TypeError(f"render takes a refold.History, got {type(value).__name__}: build one with {hint}")

    @classmethod
    def from_messages(cls, messages: Iterable[Message], *, source: str = "", meta: dict[str, Any] | None = None) -> History:
        """Split a chat message list into prefix and steps (one step per assistant message)."""
        prefix: list[Message] = []
        pending: tuple[Message, list[Message]] | None = None
        steps: list[tuple[Message, list[Message]]] = []
        if isinstance(messages, dict | str | bytes) or not isinstance(messages, Iterable):
            raise TrajectoryError(
                source or "<messages>", f"messages must be a list of dict messages, not {type(messages).__name__}"
            )
        for i, m in enumerate(messages):
            if not isinstance(m, dict):
                hint = "; pass message.model_dump()" if hasattr(m, "model_dump") else ""
                raise TrajectoryError(source or "<messages>", f"message {i} is not an object{hint}")
            role = m.get("role")
            if role in RECORD_ROLES:
                continue  # mini's final {"role": "exit"} record is not sent to the model
            if not isinstance(role, str) or role not in CHAT_ROLES:
                raise TrajectoryError(
                    source or "<messages>", f"message {i}: role {_shown(role)} is not one of {', '.join(CHAT_ROLES)}"
                )
            if pending is None and (m.get("is_demo") or is_kept(m)):
                prefix.append(m)  # SWE-agent demonstrations, kept answers: part of the prompt, not model calls
            elif role == "assistant":
                if pending:
                    steps.append(pending)
                pending = (m, [])
            elif pending is None:
                prefix.append(m)
            else:
                pending[1].append(m)
        if pending:
            steps.append(pending)
        h = cls(prefix, source=source, meta=meta)
        for i, (reply, obs) in enumerate(steps):
            h.append(reply, obs, meta=_step_meta(reply, obs, steps[i + 1][0] if i + 1 < len(steps) else None))
        return h

    def extend_from_messages(self, messages: Sequence[Message]) -> int:
        """Append the steps of ``messages`` not yet in the history (for live agents). Returns how many.

        ``messages`` must start with the same prefix and steps; only the tail is read. The last
        step is only appended once an assistant message follows it or the list ends with observations.
        """
        known = len(self._prefix) + sum(1 + len(s.observations) for s in self._steps)
        chat = [m for m in messages if isinstance(m, dict) and m.get("role") in CHAT_ROLES]
        tail = chat[known:]
        if not tail:
            return 0
        if tail[0].get("role") != "assistant":
            if not self._steps:
                raise ValueError("messages do not extend this history (prefix changed)")
            raise ValueError(
                f"step {len(self._steps)} gained messages after it was recorded; "
                "an agent's earlier turns must not change"
            )
        added = 0
        pending: tuple[Message, list[Message]] | None = None
        for m in tail:
            if m.get("role") == "assistant":
                if pending:
                    self.append(pending[0], pending[1], meta=_step_meta(*pending, m))
                    added += 1
                pending = (m, [])
            elif pending:
                pending[1].append(m)
        if pending and pending[1]:  # a reply whose observations have not come yet waits for them
            self.append(pending[0], pending[1], meta=_step_meta(*pending))
            added += 1
        return added


_ATOMS = frozenset((str, int, float, bool, type(None)))  # immutable: shared, not copied


def _check_messages(reply: Any, observations: Any) -> list[Message]:
    """Messages as dicts (an SDK's message object, or one observation not in a list, was an
    AttributeError from deep inside)."""
    if not isinstance(reply, dict):
        hint = "; pass message.model_dump()" if hasattr(reply, "model_dump") else ""
        raise TypeError(f"History.append: the reply must be a dict message, not {type(reply).__name__}{hint}")
    if reply.get("role") != "assistant":  # a step is one model call: its reply is what the model said
        role = f"role {_shown(reply['role'])}" if "role" in reply else "no role"
        raise ValueError(f"History.append: the reply has {role}; a reply is the model's message, role 'assistant'")
    if isinstance(observations, dict | str | bytes) or not isinstance(observations, Iterable):
        raise TypeError(f"History.append: observations must be a list of dict messages, not {type(observations).__name__}")
    out = list(observations)
    for i, m in enumerate(out):
        if not isinstance(m, dict):
            hint = "; pass message.model_dump()" if hasattr(m, "model_dump") else ""
            raise TypeError(f"History.append: observation {i} must be a dict message, not {type(m).__name__}{hint}")
    return out


def _copy(value: Any) -> Any:
    """A deep copy of a JSON-like value (what messages are) at a fraction of ``copy.deepcopy``'s
    cost: no memo, since nothing in a message refers to itself; anything else goes to deepcopy.
    Atoms inside a dict or list are taken without a call (most of a message is strings)."""
    t = type(value)
    if t is dict:
        if _ATOMS.issuperset(map(type, value.values())):  # atoms only (tested in C): a shallow copy is deep
            return value.copy()
        return {k: v if type(v) in _ATOMS else _copy(v) for k, v in value.items()}
    if t is list:
        if _ATOMS.issuperset(map(type, value)):
            return value.copy()
        return [v if type(v) in _ATOMS else _copy(v) for v in value]
    if t in _ATOMS or isinstance(value, str):
        return value
    return copy.deepcopy(value)


def _step_meta(reply: Message, obs: Sequence[Message], next_reply: Message | None = None) -> dict[str, Any]:
    """What a recorded step carries besides its facts: refold's call record, provider usage, its time."""
    meta: dict[str, Any] = {}
    at = step_time(reply, obs, next_reply)
    if at is not None:
        meta["time"] = at
    extra = _dict(reply.get("extra"))
    if "refold" in extra:
        meta["refold"] = extra["refold"]
    usage = _dict(extra.get("response")).get("usage")
    if isinstance(usage, dict):
        details = _dict(usage.get("prompt_tokens_details"))
        meta["usage"] = {
            "prompt_tokens": usage_count(usage.get("prompt_tokens")),
            "cached_tokens": usage_count(details.get("cached_tokens")),
            "completion_tokens": usage_count(usage.get("completion_tokens")),
        }
    return meta


MAX_COUNT = 1 << 24
"""No model reads or writes 16M tokens in one call: a larger count is a mangled record."""


def usage_count(value: Any) -> int | None:
    """A provider's token count as recorded, or None when the record holds no count ("abc", -5,
    true, NaN, 1e400): every reader (replay, view, simulate) then treats it as not reported."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_COUNT:
        return value
    return None


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}

"""Map a client's full message list onto a session's stored branches.

Clients resend the whole conversation on every call. Each list is split into prefix and steps
(one step = an assistant message and what followed it) and compared, in a normalized form that
ignores fields SDKs add or drop (``refusal: null``, ``content: null`` vs ``""``, argument
whitespace), against the visible steps of a branch. Steps the proxy answered itself (internal
context-command rounds) are skipped: the client never saw them.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import ProxyError
from ..types import Message, content_text
from .records import StoredStep

ROLES = ("system", "developer", "user", "assistant", "tool", "function")
INTERNAL = "internal"  # step meta key: answered by the proxy, not seen by the client

Norm = tuple[Any, ...]
ClientStep = tuple[Message, list[Message]]


def normalize(m: Message) -> Norm:
    calls = []
    for c in m.get("tool_calls") or []:
        fn = (c or {}).get("function") or {}
        args = fn.get("arguments")
        if isinstance(args, str):
            with contextlib.suppress(ValueError):
                args = json.loads(args)
        calls.append((c.get("id"), fn.get("name"), json.dumps(args, sort_keys=True, ensure_ascii=False)))
    return (
        m.get("role"),
        content_text(m.get("content")),
        tuple(calls),
        m.get("tool_call_id"),
        m.get("name") or None,
    )


def validate(messages: Any) -> list[Message]:
    """The request's ``messages`` checked for shape; a 400 naming the first problem otherwise."""
    if not isinstance(messages, list) or not messages:
        raise ProxyError(
            400, "'messages' must be a non-empty array of message objects", code="invalid_messages"
        )
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise ProxyError(400, f"messages[{i}] is not an object", code="invalid_messages")
        if m.get("role") not in ROLES:
            raise ProxyError(
                400, f"messages[{i}].role must be one of {', '.join(ROLES)}", code="invalid_messages"
            )
        content = m.get("content")
        if content is not None and not isinstance(content, str | list):
            raise ProxyError(
                400, f"messages[{i}].content must be a string, an array or null", code="invalid_messages"
            )
        calls = m.get("tool_calls")
        if calls is not None and not (isinstance(calls, list) and all(isinstance(c, dict) for c in calls)):
            raise ProxyError(
                400, f"messages[{i}].tool_calls must be an array of objects", code="invalid_messages"
            )
    return messages


def split(messages: Sequence[Message]) -> tuple[list[Message], list[ClientStep]]:
    prefix: list[Message] = []
    steps: list[ClientStep] = []
    for m in messages:
        if m.get("role") == "assistant":
            steps.append((m, []))
        elif steps:
            steps[-1][1].append(m)
        else:
            prefix.append(m)
    return prefix, steps


@dataclass(frozen=True, slots=True)
class Match:
    matched: int  # visible steps of the branch the client's list agrees with
    base: str  # digest to append the client's new steps onto
    new: list[ClientStep]
    full: bool  # the branch is extended (or equal), not forked


def match(
    prefix: Sequence[Message],
    steps: Sequence[ClientStep],
    prefix_digest: str,
    stored_prefix: Sequence[Message],
    chain: Sequence[StoredStep],
    norm: Callable[[StoredStep], tuple[Norm, tuple[Norm, ...]]],
) -> Match | None:
    """How ``prefix``+``steps`` continue (or fork from) ``chain``; None if the prefixes differ."""
    if [normalize(m) for m in prefix] != [normalize(m) for m in stored_prefix]:
        return None
    base = last_visible = prefix_digest
    j = 0
    for s in chain:
        if s.meta.get(INTERNAL):
            base = s.digest
            continue
        if j >= len(steps):
            return Match(j, last_visible, [], False)  # the client went back: fork before s
        reply, obs = steps[j]
        n_reply, n_obs = norm(s)
        if normalize(reply) != n_reply:
            return Match(j, last_visible, list(steps[j:]), False)
        if tuple(normalize(o) for o in obs) != n_obs:
            return Match(j, s.parent, list(steps[j:]), False)
        base = last_visible = s.digest
        j += 1
    return Match(j, base, list(steps[j:]), True)

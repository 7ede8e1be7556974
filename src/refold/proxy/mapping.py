"""Map a client's full message list onto a session's stored branches.

Clients resend the whole conversation on every call. Each list is split into prefix and steps
(one step = an assistant message and what followed it) and compared, in a normalized form that
ignores fields SDKs add or drop (``refusal: null``, ``content: null`` vs ``""``, argument
whitespace), against the visible steps of a branch. Steps the proxy answered itself (internal
context-command rounds) are skipped: the client never saw their commands. A reply also matches
in the form the client was shown it: without its PROGRESS/STALE head (``--strip-protocol``) and
after the text of internal rounds streamed before it (kept in their meta as ``SHOWN``).

Internal rounds that end a branch belong to the request that ran them. A resend of that request
(the client retrying, or sampling the same turn again) reuses them while its answer never reached
the client (a retry after a failure: the restore is not asked again); once an answer was delivered
(``Delivered``, stored with the session) the resend starts where that request began, without the
earlier attempt's rounds, and a reply the client sends after them continues that branch only if it
is the reply delivered there.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..history import is_kept
from ..types import Message, content_text
from .records import StoredStep
from .stream import strip_head
from .validate import check_messages

INTERNAL = "internal"  # step meta key: answered by the proxy, not seen by the client
SHOWN = "shown"  # internal step meta key: the text of that round the client was streamed
SETTLES = "settles"  # internal step meta key: it answers calls left out of the reply the client holds

Norm = tuple[Any, ...]
_MORE = ("function_call", "refusal", "audio")
ClientStep = tuple[Message, list[Message]]


def normalize(m: Message) -> Norm:
    calls = []
    raw_calls = m.get("tool_calls")
    for c in raw_calls if isinstance(raw_calls, list) else []:
        c = c if isinstance(c, dict) else {}  # stores written before validation may hold anything
        fn = c.get("function")
        fn = fn if isinstance(fn, dict) else {"name": fn}
        args = fn.get("arguments")
        if isinstance(args, str):
            with contextlib.suppress(ValueError):
                args = json.loads(args)
        calls.append((c.get("id"), fn.get("name"), json.dumps(args, sort_keys=True, ensure_ascii=False)))
    norm: Norm = (
        m.get("role"),
        content_text(m.get("content")),
        tuple(calls),
        m.get("tool_call_id"),
        m.get("name") or None,
    )
    # a legacy call, a refusal, an audio reference tell replies apart (absent and null alike, so
    # the norm of every other message, and the session names made from them, stay as they were)
    more = tuple((k, _dumped(m[k], k == "function_call")) for k in _MORE if m.get(k) is not None)
    parts = _parts(m.get("content"))
    if parts is not None:  # an image, file or audio part tells messages with the same text apart
        more += (("parts", parts),)
    items = _server_items(m) if m.get("role") == "assistant" else None
    if items is not None:  # so do a reply's server-side tool items (a web search, an MCP call, an image)
        more += (("items", items),)
    return norm + more if more else norm


_READ_ITEMS = frozenset({
    "text", "thinking", "redacted_thinking", "tool_use",  # Messages blocks the norm reads (or ignores: thinking)
    "message", "reasoning", "function_call", "custom_tool_call", "local_shell_call",  # Responses items
})


def _server_items(m: Message) -> str | None:
    """A surface reply's native blocks or items that neither its text nor its calls show (Anthropic
    ``server_tool_use``/``web_search_tool_result``/``mcp_tool_use``, Responses ``web_search_call``,
    ``mcp_call``, ``image_generation_call``, ...): their types and ids, which a client sends back
    as it got them; None when there are none."""
    extra = m.get("extra")
    if not isinstance(extra, dict):
        return None
    found = []
    for key in ("anthropic", "responses"):  # anthropic_wire.KEY, responses_wire.KEY
        native = extra.get(key)
        for b in native if isinstance(native, list) else []:
            if isinstance(b, dict) and b.get("type") not in _READ_ITEMS:
                found.append([b.get("type"), b.get("id"), b.get("call_id"), b.get("tool_use_id")])
    return json.dumps(found) if found else None


_TEXT_PARTS = frozenset({"text", "input_text", "output_text"})


def _parts(content: Any) -> str | None:
    """The content's parts that are not text (images, files, audio, documents), as canonical JSON
    without their ``cache_control``; None when there are none (a message of text alone)."""
    if not isinstance(content, list):
        return None
    other = [
        {k: v for k, v in p.items() if k != "cache_control"} if isinstance(p, dict) else p
        for p in content
        if not isinstance(p, str)
        and not (isinstance(p, dict) and p.get("type", "text") in _TEXT_PARTS and isinstance(p.get("text"), str))
    ]
    return json.dumps(other, sort_keys=True, ensure_ascii=False) if other else None


def _dumped(value: Any, call: bool) -> str:
    """``value`` as canonical JSON; a call's arguments read as JSON when they are (whitespace aside)."""
    if call and isinstance(value, dict) and isinstance(value.get("arguments"), str):
        with contextlib.suppress(ValueError):
            value = {**value, "arguments": json.loads(value["arguments"])}
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def validate(messages: Any) -> list[Message]:
    """The request's ``messages`` checked for shape; a 400 naming the first problem otherwise."""
    return check_messages(messages)


def _agrees(client: Norm, stored: Message, n_stored: Norm, before: str) -> bool:
    """Whether the client's reply is ``stored`` as sent, or as the client was shown it."""
    if client == n_stored:
        return True
    if client[0] != n_stored[0] or client[2:] != n_stored[2:]:
        return False
    text = n_stored[1]
    seen = client[1].strip()
    return any((before + form).strip() == seen for form in dict.fromkeys((text, strip_head(text))))


def split(messages: Sequence[Message]) -> tuple[list[Message], list[ClientStep]]:
    prefix: list[Message] = []
    steps: list[ClientStep] = []
    for m in messages:
        if m.get("role") == "assistant" and not (is_kept(m) and not steps):  # a kept answer: prefix
            steps.append((m, []))
        elif steps:
            steps[-1][1].append(m)
        else:
            prefix.append(m)
    return prefix, steps


@dataclass(frozen=True, slots=True)
class Delivered:
    """A final reply that reached the client after internal rounds: its text and call ids."""

    text: str
    ids: tuple[str, ...]

    @classmethod
    def of(cls, reply: Message) -> Delivered:
        calls = reply.get("tool_calls")
        ids = [c.get("id") for c in calls if isinstance(c, dict)] if isinstance(calls, list) else []
        return cls(content_text(reply.get("content")), tuple(i for i in ids if isinstance(i, str)))

    def record(self) -> dict[str, Any]:
        return {"text": self.text, "ids": list(self.ids)}

    @classmethod
    def read(cls, record: Any) -> Delivered | None:
        if not isinstance(record, dict) or not isinstance(record.get("text"), str):
            return None
        ids = record.get("ids")
        return cls(record["text"], tuple(i for i in ids if isinstance(i, str)) if isinstance(ids, list) else ())

    def agrees(self, reply: Message, before: str) -> bool:
        """Whether the client's ``reply`` is this one, in any form it was shown (after internal
        rounds' text ``before``, without its PROGRESS/STALE head, without calls left out of it)."""
        other = Delivered.of(reply)
        if not set(other.ids) <= set(self.ids):  # another sample's calls have other ids
            return False
        seen = other.text.strip()
        forms = dict.fromkeys((self.text, strip_head(self.text)))
        return any(f.strip() == seen or (before + f).strip() == seen for f in forms)


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
    delivered: Mapping[str, Sequence[Delivered]] | None = None,
) -> Match | None:
    """How ``prefix``+``steps`` continue (or fork from) ``chain``; None if the prefixes differ.
    ``delivered``: per internal tip, the final replies that reached the client after it."""
    if [normalize(m) for m in prefix] != [normalize(m) for m in stored_prefix]:
        return None
    base = last_visible = start = prefix_digest  # start: where the request that ran trailing rounds began
    j = 0
    before = ""  # text streamed to the client by internal rounds since the last visible step
    for s in chain:
        if s.meta.get(INTERNAL):
            base = s.digest
            if s.meta.get(SETTLES):  # answers the client's held reply: every later attempt needs it
                start = s.digest
            shown = s.meta.get(SHOWN)
            before += shown if isinstance(shown, str) else ""
            continue
        if j >= len(steps):
            return Match(j, last_visible, [], False)  # the client went back: fork before s
        reply, obs = steps[j]
        n_reply, n_obs = norm(s)
        if not _agrees(normalize(reply), s.reply, n_reply, before):
            return Match(j, last_visible, list(steps[j:]), False)
        before = ""
        if tuple(normalize(o) for o in obs) != n_obs:
            return Match(j, s.parent, list(steps[j:]), False)
        base = last_visible = start = s.digest
        j += 1
    sent = (delivered or {}).get(base, ()) if base != start else ()
    if sent:  # the rounds since ``start`` led to an answer the client got
        if j >= len(steps):
            return Match(j, start, [], True)  # a resend: a new attempt, without those rounds
        if not any(d.agrees(steps[j][0], before) for d in sent):
            return Match(j, start, list(steps[j:]), False)  # another attempt's reply
    return Match(j, base, list(steps[j:]), True)

"""A variant's prompts recorded once, at a cost proportional to what changes from call to call.

A prompt of call t repeats most of call t-1's: the viewer stores it as a delta and never keeps
every call's whole message list (that is quadratic in the run's length, in memory and in the
garbage collector's work). Per call:

* the messages it shares with the last call (the same objects, found at C speed) keep their
  piece ids; only the rest are looked up,
* a message is looked up by its content (what the chat template and the page show of it) and
  its origin, so a policy that rebuilds an equal message at every call (masking) costs a dict
  lookup, not a new piece, tokenization or copy: the first such message stands for all of them,
* what is stored to replay the prompts (for the cache simulation) is the canonical messages'
  delta against the last call, rebuilt one call at a time when replayed.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator, Sequence
from itertools import islice
from typing import Any

from ... import prompt_tokens
from ...history import History
from ...types import Message, Origin
from ..cache import common_prefix_len
from ..replay import Projector, Prompt
from ..replay.recorded_calls import has_trailing_calls

Key = tuple[Any, ...]


def same_prefix(a: Sequence[Any], b: Sequence[Any], c: Sequence[Any], d: Sequence[Any]) -> int:
    """How many leading positions hold the very same objects in ``a`` and ``b`` and in ``c`` and ``d``."""
    n = prompt_tokens.same_prefix(a, b)
    return prompt_tokens.same_prefix(c[:n], d[:n])


def content_key(message: Message) -> Key:
    """What the chat template tokenizes and the page shows of a message (``chat_tokens``' cache key)."""
    content = message.get("content")
    calls = message.get("tool_calls")
    return (
        message.get("role"),
        content if content is None or isinstance(content, str) else json.dumps(content, sort_keys=True),
        json.dumps(calls, sort_keys=True, default=str) if calls else None,
        message.get("name"),
        message.get("tool_call_id"),
    )


class Canon:
    """Equal messages with equal origins, shared by every variant: the first one seen and its piece."""

    def __init__(self, piece: Callable[[Message, Origin], int]) -> None:
        self._piece = piece
        self._seen: dict[tuple[Key, Origin], tuple[Message, Origin, int]] = {}

    def get(self, message: Message, origin: Origin) -> tuple[Message, Origin, int]:
        key = (content_key(message), origin)
        hit = self._seen.get(key)
        if hit is None:
            hit = self._seen[key] = (message, origin, self._piece(message, origin))
        return hit


class Recorded:
    """A variant's prompts, rendered once: per call its piece-id delta (``calls``), stats and
    compaction; ``prompts`` replays them (canonical messages) for the cache simulation."""

    def __init__(self, projector: Projector, history: History, canon: Canon) -> None:
        self.name = projector.name
        self.calls: list[list[Any]] = []
        self.stats: list[list[int] | None] = []
        self.events: list[list[int] | None] = []
        self._deltas: list[tuple[int, list[Message], list[Origin], Prompt]] = []
        raw_m: Sequence[Message] = []
        raw_o: Sequence[Origin] = []
        msgs: list[Message] = []
        origins: list[Origin] = []
        ids: list[int] = []
        self._final: Prompt | None = None
        """The prompt after the last step, when calls were made after the last stored reply
        (replayed for their cost, not shown: the page has one column per stored call)."""
        n = len(history)
        for p in projector.prompts(history, final=has_trailing_calls(history)):
            if p.t == n:
                self._final = p
                break
            k = same_prefix(raw_m, p.messages, raw_o, p.origins)
            new_m, new_o, new_ids = msgs[:k], origins[:k], ids[:k]
            for m, o in zip(islice(p.messages, k, None), islice(p.origins, k, None), strict=True):
                cm, co, pid = canon.get(m, o)
                new_m.append(cm)
                new_o.append(co)
                new_ids.append(pid)
            keep = k + common_prefix_len(ids[k:], new_ids[k:])
            self.calls.append([keep, new_ids[keep:]])
            same = k + same_prefix(msgs[k:], new_m[k:], origins[k:], new_o[k:])
            stub = dataclasses.replace(p, messages=[], origins=[])
            self._deltas.append((same, new_m[same:], new_o[same:], stub))
            raw_m, raw_o, msgs, origins, ids = p.messages, p.origins, new_m, new_o, new_ids
            st = p.stats
            self.stats.append(
                [st.boundary, st.stubs, st.trimmed, st.folded_steps, st.notes, st.restores] if st else None
            )
            c = p.compaction
            self.events.append([c.summary_tokens, c.covers[0], c.covers[1]] if c else None)

    def key(self) -> str:
        """Equal keys = the same prompts at every call (and the same compactions)."""
        return repr((self.calls, self.events))

    def prompts(self, history: History, final: bool = False) -> Iterator[Prompt]:
        msgs: list[Message] = []
        origins: list[Origin] = []
        for same, tail_m, tail_o, stub in self._deltas:
            msgs = msgs[:same] + tail_m
            origins = origins[:same] + tail_o
            yield dataclasses.replace(stub, messages=msgs, origins=origins)
        if final and self._final is not None:
            yield self._final

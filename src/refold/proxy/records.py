"""What a session store holds, and the protocol every backend (``sqlite_store``, ``redis_store``) implements."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..types import Message

SCHEMA_VERSION = 6
"""The store layout this refold writes; older stores are migrated on open, newer ones refused."""


def held_key(record: dict[str, Any] | None) -> str:
    """A short digest of a held record ("" for none): how a replica notices another one's write."""
    if record is None:
        return ""
    return hashlib.sha256(json.dumps(record, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:16]


def one_line(e: BaseException) -> str:
    """An exception as one short line (the store's drivers put tracebacks-worth in messages)."""
    text = " ".join(str(e).split()) or type(e).__name__
    return text if len(text) <= 200 else text[:197] + "..."


@dataclass(frozen=True, slots=True)
class StoredStep:
    digest: str
    parent: str
    reply: Message
    observations: tuple[Message, ...]
    meta: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(
            {
                "parent": self.parent,
                "reply": self.reply,
                "observations": list(self.observations),
                "meta": self.meta,
            },
            ensure_ascii=False,
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, digest: str, text: str | bytes) -> StoredStep:
        d = json.loads(text)
        return cls(digest, d["parent"], d["reply"], tuple(d["observations"]), d.get("meta") or {})


@dataclass(frozen=True, slots=True)
class SessionRecord:
    sid: str
    name: str
    owner: str
    head: str
    created: float
    updated: float


@dataclass(frozen=True, slots=True)
class SessionData:
    record: SessionRecord
    prefixes: dict[str, list[Message]]
    steps: dict[str, StoredStep]
    heads: list[str]  # earlier branch heads, oldest first (the current head is record.head)
    pins: list[dict[str, Any]] = field(default_factory=list)  # the user's pins (``Pin.record()``), in order
    held: dict[str, Any] | None = None
    """Context calls left out of the reply the client holds, answered before the next upstream call
    (``deferred.Deferred``): stored so a restart between the two requests loses none."""
    delivered: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    """Per internal tip, the final replies (``mapping.Delivered`` records) that reached the client
    after its rounds: a resend then starts a new attempt instead of reusing them."""


@dataclass(frozen=True, slots=True)
class Commit:
    """One atomic change to a session: new content plus a head move from ``expected`` to ``head``."""

    sid: str
    name: str
    owner: str
    expected: str | None  # None: the session must not exist yet
    head: str
    prefix: tuple[str, list[Message]] | None = None  # (digest, messages) when new
    steps: tuple[StoredStep, ...] = ()
    retire: str | None = None  # the old head, kept as a branch when the new head does not extend it
    settle: bool = False  # the session's held context calls are answered by these steps: forget them


@dataclass(frozen=True, slots=True)
class Health:
    """What ``/readyz`` reports: whether a write and a read just worked, and why not."""

    ok: bool
    backend: str
    detail: str
    schema: int | None = None
    sessions: int | None = None


class Store(Protocol):
    url: str

    async def load(self, sid: str) -> SessionData | None: ...

    async def head(self, sid: str) -> str | None: ...

    async def state(self, sid: str) -> tuple[str, int, str, int] | None:
        """(head, number of pin records, key of the held calls or "", number of delivered
        records): what a cached copy of the session must match."""
        ...

    async def put_delivered(self, sid: str, tip: str, record: dict[str, Any]) -> bool:
        """Remember that ``record`` (a final reply) reached the client after internal tip ``tip``
        (False: no such session)."""
        ...

    async def put_held(self, sid: str, record: dict[str, Any] | None) -> bool:
        """Keep (or, None, forget) the session's held context calls (False: no such session)."""
        ...

    async def add_pin(self, sid: str, record: dict[str, Any]) -> bool:
        """Append one pin record to an existing session (False: no such session)."""
        ...

    async def commit(self, c: Commit) -> None: ...

    async def put_response(self, owner: str, rid: str, parent: str | None, items: list[dict[str, Any]]) -> None:
        """Remember a Responses API response: the items it adds to its parent's conversation
        (the new input and its output); its ancestors count as used now (pruning)."""
        ...

    async def response_items(self, owner: str, rid: str) -> list[dict[str, Any]] | None:
        """The whole conversation up to and including response ``rid`` of ``owner`` (its chain
        of items from the first response), or None when it or an ancestor is unknown."""
        ...

    async def sessions(self, owner: str) -> list[SessionRecord]: ...

    async def all_sessions(self, limit: int = 1000) -> list[SessionRecord]:
        """Every owner's sessions, most recently updated first (the operator's view)."""
        ...

    async def prune(self, before: float) -> int:
        """Delete sessions not updated since ``before`` (epoch seconds); returns how many."""
        ...

    async def check(self) -> Health:
        """Probe the store (a small write and a read); never raises."""
        ...

    def known_fault(self) -> str | None:
        """Why the store is failing as far as is known without a round trip, or None."""
        ...

    async def close(self) -> None: ...

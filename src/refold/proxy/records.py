"""What a session store holds, and the protocol every backend (``store``, ``redis_store``) implements."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..types import Message


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


class Store(Protocol):
    url: str

    async def load(self, sid: str) -> SessionData | None: ...

    async def head(self, sid: str) -> str | None: ...

    async def commit(self, c: Commit) -> None: ...

    async def sessions(self, owner: str) -> list[SessionRecord]: ...

    async def close(self) -> None: ...

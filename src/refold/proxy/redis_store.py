"""The Redis backend: several proxy replicas share sessions through one Redis.

Keys (``refold:`` namespace): ``s:{sid}`` hash (name, owner, head, created, updated),
``p:{sid}`` and ``st:{sid}`` hashes of prefixes and steps by digest, ``h:{sid}`` list of retired
branch heads, ``o:{owner}`` sorted set of the owner's sessions. Content is written first
(idempotent); the head moves in one Lua script that checks the expected head.
Durability across a Redis restart is Redis's own (``appendonly yes``).
"""

from __future__ import annotations

import json
import time
from typing import Any

from ..errors import ConfigError, StoreConflict
from ..types import Message
from .records import Commit, SessionData, SessionRecord, StoredStep

_CAS = """
local cur = redis.call('HGET', KEYS[1], 'head')
if ARGV[1] == '' then
  if cur then return 0 end
  redis.call('HSET', KEYS[1], 'name', ARGV[3], 'owner', ARGV[4], 'created', ARGV[5])
elseif cur ~= ARGV[1] then
  return 0
end
redis.call('HSET', KEYS[1], 'head', ARGV[2], 'updated', ARGV[5])
if ARGV[6] ~= '' then redis.call('RPUSH', KEYS[2], ARGV[6]) end
redis.call('ZADD', KEYS[3], ARGV[5], ARGV[7])
return 1
"""


class RedisStore:
    def __init__(self, url: str, *, namespace: str = "refold") -> None:
        try:
            import redis.asyncio as aioredis
        except ImportError:  # pragma: no cover - the serve extra installs it
            raise ConfigError(
                "--store redis:// needs the 'redis' package (pip install 'refold[serve]')"
            ) from None
        self.url = url
        self._ns = namespace
        self._r: Any = aioredis.from_url(url)
        self._cas = self._r.register_script(_CAS)

    def _k(self, kind: str, key: str) -> str:
        return f"{self._ns}:{kind}:{key}"

    async def load(self, sid: str) -> SessionData | None:
        pipe = self._r.pipeline(transaction=True)
        pipe.hgetall(self._k("s", sid))
        pipe.hgetall(self._k("p", sid))
        pipe.hgetall(self._k("st", sid))
        pipe.lrange(self._k("h", sid), 0, -1)
        rec, prefixes, steps, heads = await pipe.execute()
        if not rec or b"head" not in rec:
            return None
        r = {k.decode(): v.decode() for k, v in rec.items()}
        record = SessionRecord(
            sid, r["name"], r["owner"], r["head"], float(r["created"]), float(r["updated"])
        )
        return SessionData(
            record,
            {d.decode(): _json_list(b) for d, b in prefixes.items()},
            {d.decode(): StoredStep.from_json(d.decode(), b) for d, b in steps.items()},
            [h.decode() for h in heads],
        )

    async def head(self, sid: str) -> str | None:
        value = await self._r.hget(self._k("s", sid), "head")
        return value.decode() if value is not None else None

    async def commit(self, c: Commit) -> None:
        pipe = self._r.pipeline(transaction=False)
        if c.prefix is not None:
            pipe.hsetnx(
                self._k("p", c.sid), c.prefix[0], json.dumps(c.prefix[1], ensure_ascii=False, sort_keys=True)
            )
        for s in c.steps:
            pipe.hsetnx(self._k("st", c.sid), s.digest, s.to_json())
        if c.prefix is not None or c.steps:
            await pipe.execute()
        ok = await self._cas(
            keys=[self._k("s", c.sid), self._k("h", c.sid), self._k("o", c.owner)],
            args=[c.expected or "", c.head, c.name, c.owner, repr(time.time()), c.retire or "", c.sid],
        )
        if not ok:
            raise StoreConflict(c.sid)

    async def sessions(self, owner: str) -> list[SessionRecord]:
        sids = await self._r.zrevrange(self._k("o", owner), 0, 999)
        out = []
        for raw in sids:
            sid = raw.decode()
            rec = await self._r.hgetall(self._k("s", sid))
            if rec:
                r = {k.decode(): v.decode() for k, v in rec.items()}
                out.append(
                    SessionRecord(
                        sid, r["name"], r["owner"], r["head"], float(r["created"]), float(r["updated"])
                    )
                )
        return out

    async def close(self) -> None:
        await self._r.aclose()


def _json_list(raw: bytes) -> list[Message]:
    value = json.loads(raw)
    return value if isinstance(value, list) else []

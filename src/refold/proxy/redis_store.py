"""The Redis backend: several proxy replicas share sessions through one Redis.

Keys (``refold:`` namespace): ``s:{sid}`` hash (name, owner, head, created, updated, and the
held context calls ``held``/``held_key`` while there are any),
``p:{sid}`` and ``st:{sid}`` hashes of prefixes and steps by digest, ``h:{sid}`` list of retired
branch heads, ``pin:{sid}`` list of the user's pins (JSON, in order), ``d:{sid}`` list of the
final replies delivered after internal rounds (JSON ``{"tip", "record"}``),
``r:{owner}\x1f{id}`` hash of a Responses API response (its items, its parent) with ``r:all``
sorted by last use, ``o:{owner}`` sorted set of the owner's sessions, ``all`` sorted set of every
session by last update (listing, pruning), ``schema`` the layout version. Content is written first
(idempotent); the head moves in one Lua script that checks the expected head. Durability across a
Redis restart is Redis's own (``appendonly yes``). A Redis error is a ``StoreUnavailable`` (503).
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from ..errors import ConfigError, StoreConflict, StoreUnavailable
from ..types import Message
from .config import redact
from .records import (
    SCHEMA_VERSION,
    Commit,
    Health,
    SessionData,
    SessionRecord,
    StoredStep,
    held_key,
    one_line,
)

T = TypeVar("T")

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
redis.call('ZADD', KEYS[4], ARGV[5], ARGV[7])
if ARGV[8] == '1' then redis.call('HDEL', KEYS[1], 'held', 'held_key') end
return 1
"""

# Keep (ARGV[1] a record) or forget (ARGV[1] '') the session's held context calls, if it exists.
_HELD = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if ARGV[1] == '' then
  redis.call('HDEL', KEYS[1], 'held', 'held_key')
else
  redis.call('HSET', KEYS[1], 'held', ARGV[1], 'held_key', ARGV[2])
end
return 1
"""

# Remember a reply delivered after internal rounds (ARGV[1]), if the session exists.
_DELIVERED = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('RPUSH', KEYS[2], ARGV[1])
return 1
"""

# Delete one session if it was not updated since ARGV[1] (a write racing the prune wins).
_PRUNE = """
local updated = redis.call('HGET', KEYS[1], 'updated')
if updated and tonumber(updated) >= tonumber(ARGV[1]) then return 0 end
local owner = redis.call('HGET', KEYS[1], 'owner')
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[7])
redis.call('ZREM', KEYS[6], ARGV[2])
if owner then redis.call('ZREM', ARGV[3] .. owner, ARGV[2]) end
return updated and 1 or 0
"""

# Append a pin to an existing session and mark it updated (a pin on a pruned session fails).
_PIN = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('RPUSH', KEYS[2], ARGV[1])
redis.call('HSET', KEYS[1], 'updated', ARGV[2])
local owner = redis.call('HGET', KEYS[1], 'owner')
redis.call('ZADD', KEYS[3], ARGV[2], ARGV[3])
if owner then redis.call('ZADD', ARGV[4] .. owner, ARGV[2], ARGV[3]) end
return 1
"""


# A response's items and parent; its chain counts as used now (ARGV: key prefix, owner + 0x1f, id,
# parent or '', items, now).
_RESP_PUT = """
redis.call('DEL', ARGV[1] .. ARGV[2] .. ARGV[3])
if ARGV[4] == '' then
  redis.call('HSET', ARGV[1] .. ARGV[2] .. ARGV[3], 'items', ARGV[5])
else
  redis.call('HSET', ARGV[1] .. ARGV[2] .. ARGV[3], 'items', ARGV[5], 'parent', ARGV[4])
end
redis.call('ZADD', KEYS[1], ARGV[6], ARGV[2] .. ARGV[3])
local id, n = ARGV[4], 0
while id ~= '' and n < 100000 do
  local k = ARGV[1] .. ARGV[2] .. id
  if redis.call('EXISTS', k) == 0 then break end
  redis.call('ZADD', KEYS[1], ARGV[6], ARGV[2] .. id)
  id = redis.call('HGET', k, 'parent') or ''
  n = n + 1
end
return 1
"""

# The items of a response's chain, newest first; false when a link is missing.
_RESP_GET = """
local out, id, n = {}, ARGV[3], 0
while id ~= '' do
  if n >= 100000 then return false end
  local v = redis.call('HMGET', ARGV[1] .. ARGV[2] .. id, 'items', 'parent')
  if not v[1] then return false end
  table.insert(out, v[1])
  id = v[2] or ''
  n = n + 1
end
return out
"""

_SEP = "\x1f"


class RedisStore:
    def __init__(self, url: str, *, namespace: str = "refold") -> None:
        try:
            import redis.asyncio as aioredis
        except ImportError:  # pragma: no cover - the serve extra installs it
            raise ConfigError(
                "--store redis:// needs the 'redis' package (pip install 'refold[serve]')"
            ) from None
        from redis.exceptions import RedisError

        self.url = url
        self._ns = namespace
        self._r: Any = aioredis.from_url(url, socket_connect_timeout=5, socket_timeout=10)
        self._cas = self._r.register_script(_CAS)
        self._prune = self._r.register_script(_PRUNE)
        self._pin = self._r.register_script(_PIN)
        self._held = self._r.register_script(_HELD)
        self._delivered = self._r.register_script(_DELIVERED)
        self._resp_put = self._r.register_script(_RESP_PUT)
        self._resp_get = self._r.register_script(_RESP_GET)
        self._errors: tuple[type[BaseException], ...] = (RedisError, OSError)
        self.schema: int | None = None
        self.fault: str | None = None

    def _k(self, kind: str, key: str) -> str:
        return f"{self._ns}:{kind}:{key}"

    async def _guard(self, fn: Callable[[], Awaitable[T]]) -> T:
        try:
            if self.schema is None:
                await self._migrate()
            out = await fn()
        except StoreUnavailable as e:
            self.fault = e.cause
            raise
        except self._errors as e:
            self.fault = f"redis at {redact(self.url)}: {one_line(e)}"
            raise StoreUnavailable(self.fault) from None
        self.fault = None
        return out

    async def _migrate(self) -> None:
        """v0/1 (no ``schema`` key) -> v2: index every session in ``all``; v3 adds ``pin:`` lists,
        v4 ``r:`` hashes, v5 the ``held`` fields of ``s:``, v6 ``d:`` lists (nothing to rewrite); newer is
        refused."""
        raw = await self._r.get(self._k("meta", "schema"))
        version = int(raw) if raw is not None else 0
        if version > SCHEMA_VERSION:
            raise StoreUnavailable(
                f"redis at {redact(self.url)} holds schema version {version}, newer than this "
                f"refold's {SCHEMA_VERSION}: upgrade refold"
            )
        if version < 2:
            async for key in self._r.scan_iter(match=self._k("s", "*"), count=500):
                updated = await self._r.hget(key, "updated")
                if updated is not None:
                    sid = key.decode().removeprefix(self._k("s", ""))
                    await self._r.zadd(self._k("all", "sessions"), {sid: float(updated)})
        if version < SCHEMA_VERSION:
            await self._r.set(self._k("meta", "schema"), str(SCHEMA_VERSION))
        self.schema = SCHEMA_VERSION

    async def load(self, sid: str) -> SessionData | None:
        return await self._guard(lambda: self._load(sid))

    async def _load(self, sid: str) -> SessionData | None:
        pipe = self._r.pipeline(transaction=True)
        pipe.hgetall(self._k("s", sid))
        pipe.hgetall(self._k("p", sid))
        pipe.hgetall(self._k("st", sid))
        pipe.lrange(self._k("h", sid), 0, -1)
        pipe.lrange(self._k("pin", sid), 0, -1)
        pipe.lrange(self._k("d", sid), 0, -1)
        rec, prefixes, steps, heads, pins, sent = await pipe.execute()
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
            [json.loads(p) for p in pins],
            json.loads(r["held"]) if r.get("held") else None,
            _delivered(sent),
        )

    async def head(self, sid: str) -> str | None:
        value = await self._guard(lambda: self._r.hget(self._k("s", sid), "head"))
        return value.decode() if value is not None else None

    async def state(self, sid: str) -> tuple[str, int, str, int] | None:
        return await self._guard(lambda: self._state(sid))

    async def _state(self, sid: str) -> tuple[str, int, str, int] | None:
        pipe = self._r.pipeline(transaction=True)
        pipe.hmget(self._k("s", sid), "head", "held_key")
        pipe.llen(self._k("pin", sid))
        pipe.llen(self._k("d", sid))
        (head, key), pins, sent = await pipe.execute()
        return (head.decode(), int(pins), key.decode() if key else "", int(sent)) if head is not None else None

    async def put_delivered(self, sid: str, tip: str, record: dict[str, Any]) -> bool:
        body = json.dumps({"tip": tip, "record": record}, ensure_ascii=False, sort_keys=True)
        ok = await self._guard(lambda: self._delivered(keys=[self._k("s", sid), self._k("d", sid)], args=[body]))
        return bool(ok)

    async def put_held(self, sid: str, record: dict[str, Any] | None) -> bool:
        body = "" if record is None else json.dumps(record, ensure_ascii=False, sort_keys=True)
        ok = await self._guard(lambda: self._held(keys=[self._k("s", sid)], args=[body, held_key(record)]))
        return bool(ok)

    async def add_pin(self, sid: str, record: dict[str, Any]) -> bool:
        return await self._guard(lambda: self._add_pin(sid, record))

    async def _add_pin(self, sid: str, record: dict[str, Any]) -> bool:
        ok = await self._pin(
            keys=[self._k("s", sid), self._k("pin", sid), self._k("all", "sessions")],
            args=[json.dumps(record, sort_keys=True), repr(time.time()), sid, self._k("o", "")],
        )
        return bool(ok)

    async def commit(self, c: Commit) -> None:
        await self._guard(lambda: self._commit(c))

    async def _commit(self, c: Commit) -> None:
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
            keys=[self._k("s", c.sid), self._k("h", c.sid), self._k("o", c.owner), self._k("all", "sessions")],
            args=[c.expected or "", c.head, c.name, c.owner, repr(time.time()), c.retire or "", c.sid,
                  "1" if c.settle else ""],
        )
        if not ok:
            raise StoreConflict(c.sid)

    async def put_response(self, owner: str, rid: str, parent: str | None, items: list[dict[str, Any]]) -> None:
        body = json.dumps(items, ensure_ascii=False)
        args = [self._k("r", ""), owner + _SEP, rid, parent or "", body, repr(time.time())]
        await self._guard(lambda: self._resp_put(keys=[self._k("r", "all")], args=args))

    async def response_items(self, owner: str, rid: str) -> list[dict[str, Any]] | None:
        got = await self._guard(lambda: self._resp_get(keys=[self._k("r", "all")], args=[self._k("r", ""), owner + _SEP, rid]))
        if not got:
            return None
        out: list[dict[str, Any]] = []
        for raw in reversed(got):
            out.extend(json.loads(raw))
        return out

    async def sessions(self, owner: str) -> list[SessionRecord]:
        return await self._guard(lambda: self._records(self._k("o", owner), 1000))

    async def all_sessions(self, limit: int = 1000) -> list[SessionRecord]:
        return await self._guard(lambda: self._records(self._k("all", "sessions"), limit))

    async def _records(self, index: str, limit: int) -> list[SessionRecord]:
        sids = await self._r.zrevrange(index, 0, limit - 1)
        pipe = self._r.pipeline(transaction=False)
        for raw in sids:
            pipe.hgetall(self._k("s", raw.decode()))
        out = []
        for raw, rec in zip(sids, await pipe.execute() if sids else [], strict=True):
            if rec and b"head" in rec:
                r = {k.decode(): v.decode() for k, v in rec.items()}
                out.append(
                    SessionRecord(
                        raw.decode(), r["name"], r["owner"], r["head"], float(r["created"]), float(r["updated"])
                    )
                )
        return out

    async def prune(self, before: float) -> int:
        return await self._guard(lambda: self._prune_all(before))

    async def _prune_all(self, before: float) -> int:
        n = 0
        for raw in await self._r.zrangebyscore(self._k("all", "sessions"), "-inf", f"({before!r}"):
            sid = raw.decode()
            keys = [self._k(kind, sid) for kind in ("s", "p", "st", "h", "pin")]
            keys += [self._k("all", "sessions"), self._k("d", sid)]
            n += int(await self._prune(keys=keys, args=[repr(before), sid, self._k("o", "")]))
        index = self._k("r", "all")
        for raw in await self._r.zrangebyscore(index, "-inf", f"({before!r}"):
            await self._r.delete(self._k("r", raw.decode()))
            await self._r.zrem(index, raw)
        return n

    def known_fault(self) -> str | None:
        """The last operation's failure (no I/O)."""
        return self.fault

    async def check(self) -> Health:
        async def probe() -> int:
            await self._r.set(self._k("meta", "probe"), repr(time.time()))
            return int(await self._r.zcard(self._k("all", "sessions")))

        try:
            count = await self._guard(probe)
        except StoreUnavailable as e:
            return Health(False, "redis", e.cause, self.schema)
        return Health(True, "redis", f"{redact(self.url)}: a write and a read succeeded", self.schema, count)

    async def close(self) -> None:
        await self._r.aclose()


def _delivered(raw: list[bytes]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for item in raw:
        value = json.loads(item)
        if isinstance(value, dict) and isinstance(value.get("tip"), str) and isinstance(value.get("record"), dict):
            out.setdefault(value["tip"], []).append(value["record"])
    return out


def _json_list(raw: bytes) -> list[Message]:
    value = json.loads(raw)
    return value if isinstance(value, list) else []

"""Durable session storage: content-addressed, parent-linked steps and one head per session.

A step is stored under its chained digest (``History`` computes it from the reply, the outputs and
the parent's digest), so a branch shares every step before its fork and a session's history is
re-derived by walking parents from its head. Writes are idempotent; moving a head is a
compare-and-set, which lets several proxy processes share one store safely.

Backends: SQLite in WAL mode (default, ``sqlite:///path`` or a plain path) and Redis
(``redis://...``, see ``redis_store``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from ..errors import ConfigError, StoreConflict
from .records import Commit, SessionData, SessionRecord, Store, StoredStep


def open_store(url: str) -> Store:
    """``redis://host:port/db``, ``sqlite:///path``, a plain path, or ``:memory:``."""
    if url.startswith(("redis://", "rediss://", "unix://")):
        from .redis_store import RedisStore

        return RedisStore(url)
    path = url.removeprefix("sqlite:///") if url.startswith("sqlite:///") else url.removeprefix("sqlite://")
    path, _, query = path.partition("?")
    sync = "normal"
    for item in filter(None, query.split("&")):
        key, _, value = item.partition("=")
        if key != "sync" or value.lower() not in ("normal", "full"):
            raise ConfigError(f"store URL '{url}': unknown option '{item}' (only sync=normal|full)")
        sync = value.lower()
    if not path:
        raise ConfigError(f"store URL '{url}' names no file")
    return SQLiteStore(path, sync=sync)


def check_store(url: str) -> None:
    """Open the store and read from it once (``refold serve`` startup): a path that cannot be
    opened or an unreachable Redis is a ConfigError before the server starts listening."""

    async def probe() -> None:
        st = open_store(url)
        try:
            await st.head("refold-startup-check")
        except ConfigError:
            raise
        except Exception as e:  # noqa: BLE001 - sqlite3 / redis / OS errors alike
            raise ConfigError(
                f"cannot use store {url}: {str(e).splitlines()[0] if str(e) else type(e).__name__}"
            ) from None
        finally:
            with contextlib.suppress(Exception):  # closing a store that never opened
                await st.close()

    asyncio.run(probe())


_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    sid TEXT PRIMARY KEY, name TEXT NOT NULL, owner TEXT NOT NULL, head TEXT NOT NULL,
    created REAL NOT NULL, updated REAL NOT NULL);
CREATE INDEX IF NOT EXISTS sessions_owner ON sessions(owner, updated);
CREATE TABLE IF NOT EXISTS prefixes (
    sid TEXT NOT NULL, digest TEXT NOT NULL, body TEXT NOT NULL, PRIMARY KEY (sid, digest));
CREATE TABLE IF NOT EXISTS steps (
    sid TEXT NOT NULL, digest TEXT NOT NULL, body TEXT NOT NULL, PRIMARY KEY (sid, digest));
CREATE TABLE IF NOT EXISTS heads (
    sid TEXT NOT NULL, head TEXT NOT NULL, retired REAL NOT NULL, PRIMARY KEY (sid, head));
"""


class SQLiteStore:
    """One connection behind a lock; calls run in a worker thread so the event loop never blocks.

    WAL mode. With ``synchronous=NORMAL`` (default) a commit is in the WAL file before the upstream
    call is made, so a killed process loses nothing; ``?sync=full`` also fsyncs every commit, so
    an OS crash or power cut loses nothing either (at one fsync per turn).
    """

    def __init__(self, path: str, *, sync: str = "normal") -> None:
        self.url = f"sqlite:///{path}"
        if path != ":memory:":
            path = str(Path(path).expanduser())
            try:
                Path(path).parent.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise ConfigError(f"cannot open store {path}: {e.strerror or e}") from None
        try:
            self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=30)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(f"PRAGMA synchronous={'FULL' if sync == 'full' else 'NORMAL'}")
            self._db.executescript(_SCHEMA)
        except sqlite3.Error as e:
            raise ConfigError(f"cannot open store {path}: {e}") from None
        self._lock = threading.Lock()

    async def _run(self, fn: Any, *args: Any) -> Any:
        return await asyncio.to_thread(self._locked, fn, *args)

    def _locked(self, fn: Any, *args: Any) -> Any:
        with self._lock:
            return fn(*args)

    async def load(self, sid: str) -> SessionData | None:
        result: SessionData | None = await self._run(self._load, sid)
        return result

    def _load(self, sid: str) -> SessionData | None:
        row = self._db.execute(
            "SELECT sid, name, owner, head, created, updated FROM sessions WHERE sid=?", (sid,)
        ).fetchone()
        if row is None:
            return None
        prefixes = {
            d: json.loads(b)
            for d, b in self._db.execute("SELECT digest, body FROM prefixes WHERE sid=?", (sid,))
        }
        steps = {
            d: StoredStep.from_json(d, b)
            for d, b in self._db.execute("SELECT digest, body FROM steps WHERE sid=?", (sid,))
        }
        heads = [
            h for (h,) in self._db.execute("SELECT head FROM heads WHERE sid=? ORDER BY retired", (sid,))
        ]
        return SessionData(SessionRecord(*row), prefixes, steps, heads)

    async def head(self, sid: str) -> str | None:
        result: str | None = await self._run(self._head, sid)
        return result

    def _head(self, sid: str) -> str | None:
        row = self._db.execute("SELECT head FROM sessions WHERE sid=?", (sid,)).fetchone()
        return row[0] if row else None

    async def commit(self, c: Commit) -> None:
        await self._run(self._commit, c)

    def _commit(self, c: Commit) -> None:
        now = time.time()
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            if c.expected is None:
                if db.execute("SELECT 1 FROM sessions WHERE sid=?", (c.sid,)).fetchone():
                    raise StoreConflict(c.sid)
                db.execute(
                    "INSERT INTO sessions VALUES (?,?,?,?,?,?)", (c.sid, c.name, c.owner, c.head, now, now)
                )
            else:
                cur = db.execute(
                    "UPDATE sessions SET head=?, updated=? WHERE sid=? AND head=?",
                    (c.head, now, c.sid, c.expected),
                )
                if cur.rowcount != 1:
                    raise StoreConflict(c.sid)
            if c.prefix is not None:
                db.execute(
                    "INSERT OR IGNORE INTO prefixes VALUES (?,?,?)",
                    (c.sid, c.prefix[0], json.dumps(c.prefix[1], ensure_ascii=False, sort_keys=True)),
                )
            db.executemany(
                "INSERT OR IGNORE INTO steps VALUES (?,?,?)",
                [(c.sid, s.digest, s.to_json()) for s in c.steps],
            )
            if c.retire:
                db.execute("INSERT OR IGNORE INTO heads VALUES (?,?,?)", (c.sid, c.retire, now))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    async def sessions(self, owner: str) -> list[SessionRecord]:
        result: list[SessionRecord] = await self._run(self._sessions, owner)
        return result

    def _sessions(self, owner: str) -> list[SessionRecord]:
        rows = self._db.execute(
            "SELECT sid, name, owner, head, created, updated FROM sessions WHERE owner=? ORDER BY updated DESC LIMIT 1000",
            (owner,),
        ).fetchall()
        return [SessionRecord(*r) for r in rows]

    async def close(self) -> None:
        await self._run(self._db.close)

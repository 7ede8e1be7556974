"""The SQLite session store (``sqlite:///path`` or a plain path): WAL mode, one writer and one
reader connection, each on its own thread, with the schema migrated on open (``migrations``).

Everything ``Store`` promises (content-addressed steps, a compare-and-set head) is one SQL
transaction here; a fault of the file or the database is a ``StoreUnavailable``, one line.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sqlite3
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from ..errors import ConfigError, StoreConflict, StoreUnavailable
from .migrations import end_transaction, migrate, refuse_foreign
from .records import Commit, Health, SessionData, SessionRecord, StoredStep, held_key, one_line

T = TypeVar("T")


_CHAIN = (
    "WITH RECURSIVE chain(id, parent, body, depth) AS ("
    "SELECT id, parent, body, 0 FROM responses WHERE owner=?1 AND id=?2 UNION ALL "
    "SELECT r.id, r.parent, r.body, c.depth + 1 FROM responses r JOIN chain c "
    "ON r.owner=?1 AND r.id=c.parent WHERE c.depth < 100000) "
)
"""A response and its ancestors (parameters: owner, response id)."""

_BUSY_TIMEOUT_S = 5.0  # a lock held elsewhere: 503 after this, not a 30 s stall


class SQLiteStore:
    """Two connections (one writes, one reads: WAL readers never wait for a writer), each on its
    own single-thread executor, so store calls never queue behind other work in the default pool.

    With ``synchronous=NORMAL`` (default) a commit is in the WAL file before the upstream call is
    made, so a killed process loses nothing; ``?sync=full`` also fsyncs every commit, so an OS
    crash or power cut loses nothing either (at one fsync per turn).
    """

    def __init__(self, path: str, *, sync: str = "normal", busy_timeout: float = _BUSY_TIMEOUT_S) -> None:
        self.url = f"sqlite:///{path}"
        self.path = path
        self.fault: str | None = None
        memory = path == ":memory:"
        if not memory:
            path = self.path = str(Path(path).expanduser())
            try:
                Path(path).parent.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise ConfigError(f"cannot open store {path}: {e.strerror or e}") from None
        try:
            self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=busy_timeout)
            refuse_foreign(self._db, path)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(f"PRAGMA synchronous={'FULL' if sync == 'full' else 'NORMAL'}")
            self.schema = migrate(self._db, path)
            # an in-memory database is private to its connection: read where we write
            self._rdb = self._db if memory else sqlite3.connect(
                path, check_same_thread=False, isolation_level=None, timeout=busy_timeout
            )
        except sqlite3.Error as e:
            raise ConfigError(f"cannot open store {path}: {one_line(e)}") from None
        self._identity = None if memory else _identity(path)
        self._write = ThreadPoolExecutor(1, thread_name_prefix="refold-store-w")
        self._read = self._write if memory else ThreadPoolExecutor(1, thread_name_prefix="refold-store-r")

    def _file_check(self) -> None:
        """The file we opened is still the one at ``path`` (else every write would go to a ghost)."""
        if self._identity is None:
            return
        now = _identity(self.path)
        if now is None:
            raise StoreUnavailable(f"the database file {self.path} was deleted while the proxy ran; restart refold serve")
        if now != self._identity:
            raise StoreUnavailable(f"the database file {self.path} was replaced while the proxy ran; restart refold serve")

    def _guarded(self, fn: Callable[..., T], *args: Any) -> T:
        try:
            self._file_check()
            out = fn(*args)
        except StoreUnavailable as e:
            self.fault = e.cause
            raise
        except (sqlite3.Error, OSError) as e:
            self.fault = one_line(e)
            raise StoreUnavailable(self.fault) from None
        self.fault = None
        return out

    async def _run(self, pool: ThreadPoolExecutor, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(pool, self._guarded, fn, *args)

    async def load(self, sid: str) -> SessionData | None:
        return await self._run(self._read, self._load, sid)

    def _load(self, sid: str) -> SessionData | None:
        db = self._rdb
        db.execute("BEGIN")  # one snapshot for the five reads
        try:
            row = db.execute(
                "SELECT sid, name, owner, head, created, updated FROM sessions WHERE sid=?", (sid,)
            ).fetchone()
            if row is None:
                return None
            prefixes = {
                d: json.loads(b) for d, b in db.execute("SELECT digest, body FROM prefixes WHERE sid=?", (sid,))
            }
            steps = {
                d: StoredStep.from_json(d, b)
                for d, b in db.execute("SELECT digest, body FROM steps WHERE sid=?", (sid,))
            }
            heads = [h for (h,) in db.execute("SELECT head FROM heads WHERE sid=? ORDER BY retired", (sid,))]
            pins = [json.loads(b) for (b,) in db.execute("SELECT body FROM pins WHERE sid=? ORDER BY seq", (sid,))]
            held = db.execute("SELECT body FROM held WHERE sid=?", (sid,)).fetchone()
            delivered: dict[str, list[dict[str, Any]]] = {}
            for tip, body in db.execute("SELECT tip, body FROM delivered WHERE sid=? ORDER BY rowid", (sid,)):
                delivered.setdefault(tip, []).append(json.loads(body))
        finally:
            end_transaction(db)
        return SessionData(
            SessionRecord(*row), prefixes, steps, heads, pins, json.loads(held[0]) if held else None, delivered
        )

    async def head(self, sid: str) -> str | None:
        return await self._run(self._read, self._head, sid)

    def _head(self, sid: str) -> str | None:
        row = self._rdb.execute("SELECT head FROM sessions WHERE sid=?", (sid,)).fetchone()
        return row[0] if row else None

    async def state(self, sid: str) -> tuple[str, int, str, int] | None:
        return await self._run(self._read, self._state, sid)

    def _state(self, sid: str) -> tuple[str, int, str, int] | None:
        row = self._rdb.execute(
            "SELECT head, (SELECT count(*) FROM pins WHERE sid=?1), (SELECT key FROM held WHERE sid=?1), "
            "(SELECT count(*) FROM delivered WHERE sid=?1) FROM sessions WHERE sid=?1",
            (sid,),
        ).fetchone()
        return (row[0], int(row[1]), row[2] or "", int(row[3])) if row else None

    async def put_delivered(self, sid: str, tip: str, record: dict[str, Any]) -> bool:
        return await self._run(self._write, self._put_delivered, sid, tip, record)

    def _put_delivered(self, sid: str, tip: str, record: dict[str, Any]) -> bool:
        db = self._db
        body = json.dumps(record, ensure_ascii=False, sort_keys=True)
        db.execute("BEGIN IMMEDIATE")
        try:
            if db.execute("SELECT 1 FROM sessions WHERE sid=?", (sid,)).fetchone() is None:
                return False
            db.execute("INSERT OR IGNORE INTO delivered VALUES (?,?,?,?)", (sid, tip, held_key(record), body))
            db.execute("COMMIT")
        finally:
            end_transaction(db)
        return True

    async def put_held(self, sid: str, record: dict[str, Any] | None) -> bool:
        return await self._run(self._write, self._put_held, sid, record)

    def _put_held(self, sid: str, record: dict[str, Any] | None) -> bool:
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            if db.execute("SELECT 1 FROM sessions WHERE sid=?", (sid,)).fetchone() is None:
                return False
            if record is None:
                db.execute("DELETE FROM held WHERE sid=?", (sid,))
            else:
                db.execute(
                    "INSERT OR REPLACE INTO held VALUES (?,?,?)",
                    (sid, held_key(record), json.dumps(record, ensure_ascii=False, sort_keys=True)),
                )
            db.execute("COMMIT")
        finally:
            end_transaction(db)
        return True

    async def add_pin(self, sid: str, record: dict[str, Any]) -> bool:
        return await self._run(self._write, self._add_pin, sid, record)

    def _add_pin(self, sid: str, record: dict[str, Any]) -> bool:
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            cur = db.execute("UPDATE sessions SET updated=? WHERE sid=?", (time.time(), sid))
            if cur.rowcount != 1:
                return False
            db.execute("INSERT INTO pins (sid, body) VALUES (?, ?)", (sid, json.dumps(record, sort_keys=True)))
            db.execute("COMMIT")
        finally:
            end_transaction(db)
        return True

    async def commit(self, c: Commit) -> None:
        await self._run(self._write, self._commit, c)

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
            if c.settle:
                db.execute("DELETE FROM held WHERE sid=?", (c.sid,))
            db.execute("COMMIT")
        finally:
            end_transaction(db)  # after a failed COMMIT (disk full) SQLite has already rolled back

    async def put_response(self, owner: str, rid: str, parent: str | None, items: list[dict[str, Any]]) -> None:
        await self._run(self._write, self._put_response, owner, rid, parent, items)

    def _put_response(self, owner: str, rid: str, parent: str | None, items: list[dict[str, Any]]) -> None:
        now = time.time()
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            db.execute(
                "INSERT OR REPLACE INTO responses VALUES (?,?,?,?,?)",
                (owner, rid, parent, json.dumps(items, ensure_ascii=False), now),
            )
            if parent is not None:
                db.execute(_CHAIN + "UPDATE responses SET used=?3 WHERE owner=?1 AND id IN (SELECT id FROM chain)",
                           (owner, parent, now))
            db.execute("COMMIT")
        finally:
            end_transaction(db)

    async def response_items(self, owner: str, rid: str) -> list[dict[str, Any]] | None:
        return await self._run(self._read, self._response_items, owner, rid)

    def _response_items(self, owner: str, rid: str) -> list[dict[str, Any]] | None:
        rows = self._rdb.execute(_CHAIN + "SELECT parent, body FROM chain ORDER BY depth DESC", (owner, rid)).fetchall()
        if not rows or rows[0][0] is not None:  # unknown, or an ancestor was pruned
            return None
        out: list[dict[str, Any]] = []
        for _, body in rows:
            out.extend(json.loads(body))
        return out

    async def sessions(self, owner: str) -> list[SessionRecord]:
        return await self._run(self._read, self._sessions, owner)

    def _sessions(self, owner: str) -> list[SessionRecord]:
        rows = self._rdb.execute(
            "SELECT sid, name, owner, head, created, updated FROM sessions WHERE owner=? "
            "ORDER BY updated DESC LIMIT 1000",
            (owner,),
        ).fetchall()
        return [SessionRecord(*r) for r in rows]

    async def all_sessions(self, limit: int = 1000) -> list[SessionRecord]:
        return await self._run(self._read, self._all, limit)

    def _all(self, limit: int) -> list[SessionRecord]:
        rows = self._rdb.execute(
            "SELECT sid, name, owner, head, created, updated FROM sessions ORDER BY updated DESC LIMIT ?",
            (limit,),
        ).fetchall()
        return [SessionRecord(*r) for r in rows]

    async def prune(self, before: float) -> int:
        return await self._run(self._write, self._prune, before)

    def _prune(self, before: float) -> int:
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            old = "SELECT sid FROM sessions WHERE updated < ?"
            for table in ("steps", "prefixes", "heads", "pins", "held", "delivered"):
                db.execute(f"DELETE FROM {table} WHERE sid IN ({old})", (before,))
            n = db.execute("DELETE FROM sessions WHERE updated < ?", (before,)).rowcount
            db.execute("DELETE FROM responses WHERE used < ?", (before,))
            db.execute("COMMIT")
        finally:
            end_transaction(db)
        return int(n)

    def known_fault(self) -> str | None:
        """The last operation's failure, or a deleted/replaced file (no I/O beyond one stat)."""
        try:
            self._file_check()
        except StoreUnavailable as e:
            return e.cause
        return self.fault

    async def check(self) -> Health:
        try:
            count = await self._run(self._write, self._probe)
        except StoreUnavailable as e:
            return Health(False, "sqlite", e.cause, self.schema)
        return Health(True, "sqlite", f"{self.path}: a write and a read succeeded", self.schema, count)

    def _probe(self) -> int:
        self._db.execute("INSERT OR REPLACE INTO meta VALUES ('probe', ?)", (repr(time.time()),))
        (n,) = self._rdb.execute("SELECT count(*) FROM sessions").fetchone()
        return int(n)

    async def close(self) -> None:
        for pool, db in ((self._read, self._rdb), (self._write, self._db)):
            with contextlib.suppress(Exception):
                await asyncio.get_running_loop().run_in_executor(pool, db.close)
        self._write.shutdown(wait=False)
        self._read.shutdown(wait=False)


def _identity(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino

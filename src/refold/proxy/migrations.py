"""The SQLite store's layout: named migrations applied in order, one transaction each.

``PRAGMA user_version`` counts the applied migrations (``records.SCHEMA_VERSION`` of them in this
refold); a store with a newer layout is refused rather than guessed at.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time

from ..errors import ConfigError
from .records import SCHEMA_VERSION

# Named migrations, applied in order; PRAGMA user_version counts the applied ones. A store
# written before versions existed has version 0 and the v1 tables already (CREATE IF NOT EXISTS).
MIGRATIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "001-sessions-prefixes-steps-heads",
        (
            "CREATE TABLE IF NOT EXISTS sessions (sid TEXT PRIMARY KEY, name TEXT NOT NULL, "
            "owner TEXT NOT NULL, head TEXT NOT NULL, created REAL NOT NULL, updated REAL NOT NULL)",
            "CREATE INDEX IF NOT EXISTS sessions_owner ON sessions(owner, updated)",
            "CREATE TABLE IF NOT EXISTS prefixes (sid TEXT NOT NULL, digest TEXT NOT NULL, "
            "body TEXT NOT NULL, PRIMARY KEY (sid, digest))",
            "CREATE TABLE IF NOT EXISTS steps (sid TEXT NOT NULL, digest TEXT NOT NULL, "
            "body TEXT NOT NULL, PRIMARY KEY (sid, digest))",
            "CREATE TABLE IF NOT EXISTS heads (sid TEXT NOT NULL, head TEXT NOT NULL, "
            "retired REAL NOT NULL, PRIMARY KEY (sid, head))",
        ),
    ),
    (
        "002-migrations-meta-updated-index",
        (
            "CREATE TABLE IF NOT EXISTS migrations (name TEXT PRIMARY KEY, applied REAL NOT NULL)",
            "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
            "CREATE INDEX IF NOT EXISTS sessions_updated ON sessions(updated)",
        ),
    ),
    (
        "003-pins",
        (
            # the user's pins, in the order set (seq); a session's rendering reads all of them
            "CREATE TABLE IF NOT EXISTS pins (seq INTEGER PRIMARY KEY AUTOINCREMENT, sid TEXT NOT NULL, "
            "body TEXT NOT NULL)",
            "CREATE INDEX IF NOT EXISTS pins_sid ON pins(sid, seq)",
        ),
    ),
    (
        "004-responses",
        (
            # previous_response_id: each response's items after its parent's, and when its chain was last used
            "CREATE TABLE IF NOT EXISTS responses (owner TEXT NOT NULL, id TEXT NOT NULL, parent TEXT, "
            "body TEXT NOT NULL, used REAL NOT NULL, PRIMARY KEY (owner, id))",
            "CREATE INDEX IF NOT EXISTS responses_used ON responses(used)",
        ),
    ),
    (
        "005-held",
        (
            # context calls left out of the reply a client holds, answered before its next call
            "CREATE TABLE IF NOT EXISTS held (sid TEXT PRIMARY KEY, key TEXT NOT NULL, body TEXT NOT NULL)",
        ),
    ),
    (
        "006-delivered",
        (
            # final replies that reached the client after internal rounds (a resend is a new attempt)
            "CREATE TABLE IF NOT EXISTS delivered (sid TEXT NOT NULL, tip TEXT NOT NULL, key TEXT NOT NULL, "
            "body TEXT NOT NULL, PRIMARY KEY (sid, tip, key))",
        ),
    ),
)
assert len(MIGRATIONS) == SCHEMA_VERSION


def refuse_foreign(db: sqlite3.Connection, path: str) -> None:
    """A database that holds tables but no refold layout (a mistyped ``--store`` naming another
    program's database), or a newer refold's layout, is refused before anything is written into
    it (WAL mode included)."""
    (version,) = db.execute("PRAGMA user_version").fetchone()
    tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
    # every refold layout, also one written before versions, holds sessions(sid, owner, head, ...);
    # another program's 'sessions' table (a web app's) does not, and its user_version may be anything
    columns = {r[1] for r in db.execute("PRAGMA table_info(sessions)")} if "sessions" in tables else set()
    if tables and not {"sid", "owner", "head"} <= columns:
        shown = ", ".join(tables[:3]) + (f" and {len(tables) - 3} more" if len(tables) > 3 else "")
        raise ConfigError(
            f"store {path} is an SQLite database refold did not write (tables {shown}): "
            "give --store a new file or one refold serve created"
        )
    _check_version(version, path)


def _check_version(version: int, path: str) -> None:
    if version > SCHEMA_VERSION:
        raise ConfigError(
            f"store {path} has schema version {version}, newer than this refold's {SCHEMA_VERSION}: "
            "upgrade refold or use another --store"
        )


def migrate(db: sqlite3.Connection, path: str) -> int:
    """Bring the store up to SCHEMA_VERSION, one named migration per transaction; the version."""
    (version,) = db.execute("PRAGMA user_version").fetchone()
    _check_version(version, path)
    for number, (name, statements) in enumerate(MIGRATIONS[version:], start=version + 1):
        db.execute("BEGIN IMMEDIATE")
        try:
            for sql in statements:
                db.execute(sql)
            if number >= 2:
                db.execute("INSERT OR IGNORE INTO migrations VALUES (?, ?)", (name, time.time()))
            if number == 2:  # record the first migration too, applied before there was a table for it
                db.execute("INSERT OR IGNORE INTO migrations VALUES (?, ?)", (MIGRATIONS[0][0], time.time()))
            db.execute(f"PRAGMA user_version = {number}")
            db.execute("COMMIT")
        finally:
            end_transaction(db)
    return SCHEMA_VERSION


def end_transaction(db: sqlite3.Connection) -> None:
    """Roll back whatever a failed statement left open (a failed COMMIT has already rolled back)."""
    if db.in_transaction:
        with contextlib.suppress(sqlite3.Error):
            db.execute("ROLLBACK")

"""Durable session storage: content-addressed, parent-linked steps and one head per session.

A step is stored under its chained digest (``History`` computes it from the reply, the outputs and
the parent's digest), so a branch shares every step before its fork and a session's history is
re-derived by walking parents from its head. Writes are idempotent; moving a head is a
compare-and-set, which lets several proxy processes share one store safely.

Backends, picked here by URL: SQLite in WAL mode (default, ``sqlite:///path`` or a plain path,
``sqlite_store``) and Redis (``redis://...``, ``redis_store``). Both carry a schema version and
migrate older layouts on open; a newer layout is refused. A store fault (disk full, a lock held elsewhere, Redis down, the
database file deleted or replaced under the proxy) is a ``StoreUnavailable`` (503, one line).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from pathlib import Path

from ..errors import ConfigError
from .config import redact
from .records import Store
from .sqlite_store import SQLiteStore

_REDIS_SCHEMES = ("redis://", "rediss://", "unix://")
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")


def check_store_url(url: str) -> None:
    """A URL of another kind (``mysql://...``, ``postgres://...``) is a mistake, not a file name:
    taken as a SQLite path it made a folder ``mysql:`` and served from a file in it."""
    m = _SCHEME.match(url)
    if m is not None and not url.startswith(("sqlite:", *_REDIS_SCHEMES)):
        raise ConfigError(
            f"store URL '{redact(url)}': unknown kind '{m.group(1)}://' "
            "(give a SQLite path, sqlite:///path or redis://host:port/db)"
        )


def open_store(url: str) -> Store:
    """``redis://host:port/db``, ``sqlite:///path``, a plain path, or ``:memory:``."""
    check_store_url(url)
    if url.startswith(_REDIS_SCHEMES):
        from .redis_store import RedisStore

        return RedisStore(url)
    path, sync = _sqlite_target(url)
    return SQLiteStore(path, sync=sync)


def _sqlite_target(url: str) -> tuple[str, str]:
    """A SQLite store URL's file and sync mode (``sqlite:///rel`` is relative, ``sqlite:////abs``
    absolute, as SQLAlchemy reads them)."""
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
    return path, sync


def store_where(url: str) -> str:
    """Where the store lives, for the start line: a SQLite store's absolute file (``sqlite:///tmp/x``
    is ``./tmp/x``, which the URL alone does not show), else the URL."""
    if url.startswith(_REDIS_SCHEMES) or url == ":memory:":
        return url
    path, sync = _sqlite_target(url)
    if path == ":memory:":
        return path
    where = str(Path(path).expanduser().absolute())
    return where + (", sync=full" if sync == "full" else "")


def check_store(url: str) -> None:
    """Open the store and read from it once (``refold serve`` startup): a path that cannot be
    opened or an unreachable Redis is a ConfigError before the server starts listening."""

    async def probe() -> None:
        st = open_store(url)
        try:
            health = await st.check()
            if not health.ok:
                raise ConfigError(f"cannot use store {redact(url)}: {health.detail}")
        finally:
            with contextlib.suppress(Exception):  # closing a store that never opened
                await st.close()

    asyncio.run(probe())

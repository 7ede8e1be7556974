"""Store faults are one-line 503s, health endpoints tell the truth, schemas migrate, old sessions
prune, branches are unlimited, views never hold up chat, and counters never go down."""

from __future__ import annotations

import asyncio
import gzip
import os
import sqlite3
import threading
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from refold.errors import ConfigError, StoreUnavailable
from refold.proxy import ProxyConfig, open_store
from refold.proxy.metrics import Metrics
from refold.proxy.records import SCHEMA_VERSION, Commit, Store, StoredStep
from refold.proxy.redis_store import RedisStore
from refold.proxy.sessions import SessionManager
from refold.proxy.sqlite_store import SQLiteStore
from refold.proxy.viewer_pool import Snapshot, ViewPool
from refold.render import Renderer
from refold.types import message_digest

from fake_upstream import AUTH, BASH_TOOLS, FakeUpstream, asgi_proxy, redis_server


def step(parent: str, n: int, size: int = 0) -> StoredStep:
    reply, obs = {"role": "assistant", "content": f"r{n}"}, ({"role": "tool", "content": f"o{n}" + "x" * size},)
    return StoredStep(message_digest([reply, *obs], parent=parent), parent, reply, obs, {})


PREFIX = [{"role": "user", "content": "p"}]
P = message_digest(PREFIX)


def first(sid: str, n: int = 1, owner: str = "o") -> tuple[Commit, StoredStep]:
    s = step(P, n)
    return Commit(sid, f"name-{sid}", owner, None, s.digest, (P, PREFIX), (s,)), s


# ---- SQLite faults -------------------------------------------------------------------------------


def test_disk_full_is_a_one_line_503_and_the_store_recovers(tmp_path: Path) -> None:
    async def go() -> None:
        store = SQLiteStore(str(tmp_path / "s.db"))
        c, s1 = first("a")
        await store.commit(c)
        pages = store._db.execute("PRAGMA page_count").fetchone()[0]
        store._db.execute(f"PRAGMA max_page_count = {pages}")  # the disk is full from now on
        big = step(s1.digest, 2, size=200_000)
        with pytest.raises(StoreUnavailable) as e:
            await store.commit(Commit("a", "name-a", "o", s1.digest, big.digest, None, (big,)))
        assert e.value.status == 503 and "full" in e.value.message and "rollback" not in e.value.message
        assert "\n" not in e.value.message and store.known_fault()
        assert await store.head("a") == s1.digest  # nothing half-written
        store._db.execute(f"PRAGMA max_page_count = {pages * 100}")
        await store.commit(Commit("a", "name-a", "o", s1.digest, big.digest, None, (big,)))
        assert await store.head("a") == big.digest and store.known_fault() is None
        await store.close()

    asyncio.run(go())


def test_a_lock_held_elsewhere_is_a_503_and_reads_go_on(tmp_path: Path) -> None:
    async def go() -> None:
        path = str(tmp_path / "s.db")
        store = SQLiteStore(path, busy_timeout=0.2)
        c, s1 = first("a")
        await store.commit(c)
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN EXCLUSIVE")  # another process holds the write lock
        try:
            s2 = step(s1.digest, 2)
            with pytest.raises(StoreUnavailable, match="locked"):
                await store.commit(Commit("a", "name-a", "o", s1.digest, s2.digest, None, (s2,)))
            assert await store.head("a") == s1.digest  # readers are not blocked by the writer
            assert (await store.load("a")) is not None
            assert not (await store.check()).ok
        finally:
            other.execute("ROLLBACK")
            other.close()
        await store.commit(Commit("a", "name-a", "o", s1.digest, s2.digest, None, (s2,)))
        assert (await store.check()).ok
        await store.close()

    asyncio.run(go())


@pytest.mark.parametrize("how", ["deleted", "replaced"])
def test_a_deleted_or_replaced_db_file_is_detected(tmp_path: Path, how: str) -> None:
    async def go() -> None:
        path = tmp_path / "s.db"
        store = SQLiteStore(str(path))
        c, s1 = first("a")
        await store.commit(c)
        for f in tmp_path.glob("s.db*"):
            f.unlink()
        if how == "replaced":
            sqlite3.connect(path).close()
        s2 = step(s1.digest, 2)
        with pytest.raises(StoreUnavailable, match=how):
            await store.commit(Commit("a", "name-a", "o", s1.digest, s2.digest, None, (s2,)))
        assert how in (store.known_fault() or "") and not (await store.check()).ok
        await store.close()

    asyncio.run(go())


def test_store_faults_through_the_app(upstream: tuple[FakeUpstream, str], tmp_path: Path) -> None:
    fake = upstream[0]

    async def go() -> None:
        path = tmp_path / "s.db"
        cfg = ProxyConfig(context_tools_beside_shell=True, upstream=upstream[1], store=str(path), tokenizer="off")
        async with asgi_proxy(cfg) as c:
            body = {"model": "m", "messages": [{"role": "user", "content": "task"}], "tools": BASH_TOOLS}
            assert (await c.post("/v1/chat/completions", json=body, headers=AUTH)).status_code == 200
            assert (await c.get("/healthz")).json() == {"status": "ok"}
            ready = (await c.get("/readyz")).json()
            assert ready["status"] == "ok" and ready["schema"] == SCHEMA_VERSION and ready["sessions"] == 1
            for f in tmp_path.glob("s.db*"):
                f.unlink()
            n = len(fake.requests)
            r = await c.post(
                "/v1/chat/completions", json={**body, "messages": [{"role": "user", "content": "another"}]}, headers=AUTH
            )
            assert r.status_code == 503, r.text
            err = r.json()["error"]
            assert err["code"] == "store_unavailable" and "deleted" in err["message"] and "\n" not in err["message"]
            assert len(fake.requests) == n  # not paid for: the turn was not stored, so not sent
            h = await c.get("/healthz")
            assert h.status_code == 503 and "deleted" in h.json()["store"]
            assert (await c.get("/readyz")).status_code == 503
            metrics = (await c.get("/metrics", headers=AUTH)).text
            assert "refold_store_errors_total 1.0" in metrics and "refold_store_up 0.0" in metrics

    asyncio.run(go())


# ---- Redis faults --------------------------------------------------------------------------------


def test_redis_down_is_a_503(upstream: tuple[FakeUpstream, str]) -> None:
    async def go(url: str, stop: Any) -> None:
        store = open_store(url)
        c, s1 = first("a")
        await store.commit(c)
        assert (await store.check()).ok
        stop()
        s2 = step(s1.digest, 2)
        with pytest.raises(StoreUnavailable, match="redis"):
            await store.commit(Commit("a", "name-a", "o", s1.digest, s2.digest, None, (s2,)))
        with pytest.raises(StoreUnavailable):
            await store.load("a")
        health = await store.check()
        assert not health.ok and "redis" in health.detail and store.known_fault()
        await store.close()

    cm = redis_server()
    url = cm.__enter__()
    stopped = threading.Event()

    def stop() -> None:
        cm.__exit__(None, None, None)
        stopped.set()

    try:
        asyncio.run(go(url, stop))
    finally:
        if not stopped.is_set():
            cm.__exit__(None, None, None)


# ---- schema versions and migrations --------------------------------------------------------------

OLD_SCHEMA = """
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


def test_an_unversioned_store_is_migrated_and_a_newer_one_refused(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    db.executescript(OLD_SCHEMA)
    s1 = step(P, 1)
    db.execute("INSERT INTO sessions VALUES ('a','n','o',?,1,2)", (s1.digest,))
    db.execute("INSERT INTO prefixes VALUES ('a',?, '[{\"role\": \"user\", \"content\": \"p\"}]')", (P,))
    db.execute("INSERT INTO steps VALUES ('a',?,?)", (s1.digest, s1.to_json()))
    db.commit()
    db.close()

    async def go() -> None:
        store = SQLiteStore(str(path))
        assert store.schema == SCHEMA_VERSION
        data = await store.load("a")
        assert data is not None and data.record.head == s1.digest and data.steps[s1.digest] == s1
        await store.close()

    asyncio.run(go())
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    names = [n for (n,) in db.execute("SELECT name FROM migrations ORDER BY name")]
    assert names == [
        "001-sessions-prefixes-steps-heads", "002-migrations-meta-updated-index", "003-pins", "004-responses", "005-held",
        "006-delivered",
    ]
    db.execute("PRAGMA user_version = 99")
    db.close()
    with pytest.raises(ConfigError, match="schema version 99, newer"):
        SQLiteStore(str(path))


def test_an_unversioned_redis_store_is_indexed() -> None:
    import redis

    async def go(url: str) -> None:
        r = redis.Redis.from_url(url)
        s1 = step(P, 1)
        r.hset("refold:s:a", mapping={"name": "n", "owner": "o", "head": s1.digest, "created": 1, "updated": 2})
        r.hset("refold:st:a", s1.digest, s1.to_json())
        r.hset("refold:p:a", P, '[{"role": "user", "content": "p"}]')
        store = RedisStore(url)
        assert [x.sid for x in await store.all_sessions()] == ["a"]
        assert r.get("refold:meta:schema") == str(SCHEMA_VERSION).encode()
        r.set("refold:meta:schema", "99")
        newer = RedisStore(url)
        with pytest.raises(StoreUnavailable, match="newer"):
            await newer.head("a")
        await store.close()
        await newer.close()
        r.close()

    with redis_server() as url:
        asyncio.run(go(url))


# ---- prune ---------------------------------------------------------------------------------------


async def _prune_contract(store: Store) -> None:
    c, _ = first("old")
    await store.commit(c)
    await asyncio.sleep(0.05)
    cutoff = time.time()
    await asyncio.sleep(0.05)
    c2, _ = first("new", 2)
    await store.commit(c2)
    assert [r.sid for r in await store.all_sessions()] == ["new", "old"]
    assert await store.prune(cutoff) == 1
    assert await store.load("old") is None and await store.load("new") is not None
    assert [r.sid for r in await store.all_sessions()] == ["new"]
    assert [r.sid for r in await store.sessions("o")] == ["new"]
    # a running proxy's in-memory session notices and starts over instead of failing
    manager = SessionManager(store, Renderer)
    s = await manager.get("o", "name-new")
    msgs = [{"role": "user", "content": "task"}, {"role": "assistant", "content": "r"}, {"role": "user", "content": "o"}]
    async with s.lock:
        await manager.turn(s, msgs)
    assert await store.prune(time.time() + 1) == 2
    async with s.lock:
        turn = await manager.turn(s, [*msgs, {"role": "assistant", "content": "r2"}, {"role": "user", "content": "o2"}])
    assert len(turn.view.history) == 2
    data = await store.load(s.sid)
    assert data is not None and len(data.steps) == 2
    await store.close()


def test_sqlite_prune(tmp_path: Path) -> None:
    asyncio.run(_prune_contract(SQLiteStore(str(tmp_path / "s.db"))))
    db = sqlite3.connect(tmp_path / "s.db")
    assert db.execute("SELECT count(*) FROM steps").fetchone()[0] == 2  # only the restarted session's


def test_redis_prune() -> None:
    with redis_server() as url:
        asyncio.run(_prune_contract(open_store(url)))


# ---- branches ------------------------------------------------------------------------------------


def test_any_number_of_branches_keeps_internal_rounds(upstream: tuple[FakeUpstream, str], tmp_path: Path) -> None:
    """40 forks (the old limit was 32 tips): continuing the oldest branch still shows the model the
    restore it was given on that branch, also after a restart."""
    fake = upstream[0]
    cfg = ProxyConfig(context_tools_beside_shell=True, upstream=upstream[1], store=str(tmp_path / "s.db"), tokenizer="off")
    hdr = {**AUTH, "X-Refold-Session": "pass-at-k"}

    async def turn(c: httpx.AsyncClient, msgs: list[Any], out: str) -> None:
        r = await c.post("/v1/chat/completions", json={"model": "m", "messages": msgs, "tools": BASH_TOOLS}, headers=hdr)
        assert r.status_code == 200, r.text
        m = r.json()["choices"][0]["message"]
        msgs += [m, {"role": "tool", "tool_call_id": m["tool_calls"][0]["id"], "content": out}]

    def restore_in_last_request() -> bool:
        sent = fake.requests[-1]["body"]["messages"]
        return any((tc.get("function") or {}).get("name") == "restore" for m in sent for tc in m.get("tool_calls") or [])

    async def go() -> None:
        base = [{"role": "system", "content": "sys"}, {"role": "user", "content": "task"}]
        a = list(base)
        async with asgi_proxy(cfg) as c:
            await turn(c, a, "out A1")
            await turn(c, a, "out A2 RESTORE:1")
            await turn(c, a, "out A3")  # this request made an internal restore round first
            assert restore_in_last_request()
            for i in range(40):  # reruns that saw another output at step 1
                await turn(c, [*base, a[2], {**a[3], "content": f"out B{i}"}], "next")
            await turn(c, a, "out A4")
            assert restore_in_last_request()
            view = (await c.get("/sessions/pass-at-k", headers=AUTH)).json()
            assert len(view["branches"]) == 41 and any(s["internal"] for s in view["steps"])
        async with asgi_proxy(cfg) as c:  # after a restart
            await turn(c, a, "out A5")
            assert restore_in_last_request()

    asyncio.run(go())


# ---- views ---------------------------------------------------------------------------------------


def test_views_never_hold_up_chat(upstream: tuple[FakeUpstream, str], tmp_path: Path) -> None:
    """Eight views stuck in their workers; another tenant's chat is answered meanwhile; a ninth view
    is told to retry; a built page is served from the cache."""
    release = threading.Event()
    started = threading.Semaphore(0)

    def slow_build(snap: Snapshot, title: str, tokenizer: str) -> tuple[bytes, bytes]:
        started.release()
        release.wait(60)
        html = f"<html>{title}: {len(snap.history())} steps</html>".encode()
        return html, gzip.compress(html)

    pool = ViewPool(Metrics(), max_pending=8, build=slow_build, executor=ThreadPoolExecutor(8))
    cfg = ProxyConfig(context_tools_beside_shell=True, upstream=upstream[1], store=str(tmp_path / "s.db"), tokenizer="off")

    async def go() -> None:
        async with asgi_proxy(cfg, views=pool) as c:
            body = {"model": "m", "messages": [{"role": "user", "content": "t"}], "tools": BASH_TOOLS}
            for i in range(9):
                h = {"Authorization": f"Bearer viewer-{i}", "X-Refold-Session": "s"}
                assert (await c.post("/v1/chat/completions", json=body, headers=h)).status_code == 200
            views = [
                asyncio.create_task(c.get("/sessions/s/view", headers={"Authorization": f"Bearer viewer-{i}"}))
                for i in range(8)
            ]
            for _ in range(8):
                await asyncio.to_thread(started.acquire, True, 30)
            busy = await c.get("/sessions/s/view", headers={"Authorization": "Bearer viewer-8"})
            assert busy.status_code == 503 and busy.json()["error"]["code"] == "views_busy"
            chat = await c.post(
                "/v1/chat/completions", json=body, headers={"Authorization": "Bearer chatter", "X-Refold-Session": "c"}
            )
            assert chat.status_code == 200 and not any(v.done() for v in views)  # answered while views wait
            release.set()
            pages = await asyncio.gather(*views)
            assert all(p.status_code == 200 and "refold session s: 0 steps" in p.text for p in pages), pages[0].text
            builds = pool.builds
            again = await c.get("/sessions/s/view", headers={"Authorization": "Bearer viewer-0"})
            assert again.status_code == 200 and pool.builds == builds  # from the cache

    asyncio.run(go())
    assert isinstance(ViewPool(Metrics()).executor(), ProcessPoolExecutor)  # production: off the GIL too


def test_a_real_view_builds_in_a_worker_process(upstream: tuple[FakeUpstream, str], tmp_path: Path) -> None:
    cfg = ProxyConfig(context_tools_beside_shell=True, upstream=upstream[1], store=str(tmp_path / "s.db"), tokenizer="off")

    async def go() -> None:
        async with asgi_proxy(cfg) as c:
            msgs: list[Any] = [{"role": "user", "content": "t"}]
            for i in range(3):
                r = await c.post(
                    "/v1/chat/completions",
                    json={"model": "m", "messages": msgs, "tools": BASH_TOOLS},
                    headers={**AUTH, "X-Refold-Session": "v"},
                )
                m = r.json()["choices"][0]["message"]
                msgs += [m, {"role": "tool", "tool_call_id": m["tool_calls"][0]["id"], "content": f"out {i}"}]
            page = await c.get("/sessions/v/view", headers=AUTH)
            assert page.status_code == 200 and "<html" in page.text.lower()

    asyncio.run(go())


def test_cached_views_are_bytes_with_etag_gzip_and_no_store_round_trip(
    upstream: tuple[FakeUpstream, str], tmp_path: Path
) -> None:
    """A reload is answered from the cache: gzip (the same page), a 304 for the browser's ETag, and
    within VIEW_FRESH_S no store call; a turn or a pin through the proxy shows at once."""
    states: list[str] = []

    def build(snap: Snapshot, title: str, tokenizer: str) -> tuple[bytes, bytes]:
        html = f"<html>{len(snap.history())} steps, pins {len(snap.pins)}</html>".encode()
        return html, gzip.compress(html)

    pool = ViewPool(Metrics(), build=build, executor=ThreadPoolExecutor(1), min_rebuild_s=0.0)
    store = SQLiteStore(str(tmp_path / "s.db"))
    real_state = store.state

    async def counted(sid: str) -> Any:
        states.append(sid)
        return await real_state(sid)

    store.state = counted  # type: ignore[method-assign]
    cfg = ProxyConfig(context_tools_beside_shell=True, upstream=upstream[1], store=":memory:", tokenizer="off")

    async def go() -> None:
        async with asgi_proxy(cfg, store=store, views=pool) as c:
            msgs: list[Any] = [{"role": "user", "content": "t"}]

            async def turn() -> None:
                r = await c.post("/v1/chat/completions", json={"model": "m", "messages": msgs, "tools": BASH_TOOLS},
                                 headers={**AUTH, "X-Refold-Session": "v"})
                m = r.json()["choices"][0]["message"]
                msgs.extend([m, {"role": "tool", "tool_call_id": m["tool_calls"][0]["id"], "content": "out " * 50}])

            for _ in range(3):
                await turn()
            await turn()  # the reply of turn 3 and its output are stored now: 3 steps
            first = await c.get("/sessions/v/view", headers={**AUTH, "Accept-Encoding": "gzip"})
            assert first.status_code == 200 and first.headers["content-encoding"] == "gzip"
            assert first.text == "<html>3 steps, pins 0</html>"  # httpx undid the gzip
            plain = await c.get("/sessions/v/view", headers={**AUTH, "Accept-Encoding": "identity"})
            assert "content-encoding" not in plain.headers and plain.content == first.content
            n = len(states)
            etag = first.headers["etag"]
            again = await c.get("/sessions/v/view", headers={**AUTH, "If-None-Match": etag})
            assert again.status_code == 304 and again.content == b"" and len(states) == n  # no store round trip
            assert pool.builds == 1
            await turn()
            fresh = await c.get("/sessions/v/view", headers={**AUTH, "If-None-Match": etag})
            assert fresh.status_code == 200 and fresh.text == "<html>4 steps, pins 0</html>"
            assert (await c.post("/sessions/v/pins", json={"item": "2"}, headers=AUTH)).status_code == 200
            pinned = await c.get("/sessions/v/view", headers=AUTH)
            assert pinned.text == "<html>4 steps, pins 1</html>" and pinned.headers["etag"] != fresh.headers["etag"]

    asyncio.run(go())


def test_a_view_lane_bounds_the_views_served_and_refuses_the_excess(
    upstream: tuple[FakeUpstream, str], tmp_path: Path
) -> None:
    def build(snap: Snapshot, title: str, tokenizer: str) -> tuple[bytes, bytes]:
        return b"<html></html>", gzip.compress(b"<html></html>")

    pool = ViewPool(Metrics(), build=build, executor=ThreadPoolExecutor(1), rate=2.0, max_waiting=3)
    cfg = ProxyConfig(context_tools_beside_shell=True, upstream=upstream[1], store=str(tmp_path / "s.db"), tokenizer="off")

    async def go() -> None:
        async with asgi_proxy(cfg, views=pool) as c:
            body = {"model": "m", "messages": [{"role": "user", "content": "t"}], "tools": BASH_TOOLS}
            await c.post("/v1/chat/completions", json=body, headers={**AUTH, "X-Refold-Session": "s"})
            got = await asyncio.gather(*(c.get("/sessions/s/view", headers=AUTH) for _ in range(8)))
            codes = sorted(r.status_code for r in got)
            assert codes == [200] * 4 + [503] * 4, codes  # one at once, three waiting, the rest told to retry
            assert all(r.json()["error"]["code"] == "views_busy" for r in got if r.status_code == 503)

    asyncio.run(go())


def test_a_session_builds_one_page_at_a_time_and_a_live_view_lags_by_one_build() -> None:
    gate = threading.Event()
    built: list[int] = []

    def build(snap: Snapshot, title: str, tokenizer: str) -> tuple[bytes, bytes]:
        gate.wait(30)
        built.append(len(snap.steps))
        return str(len(snap.steps)).encode(), b""

    def snap(n: int) -> Any:
        return lambda: Snapshot([], [({"role": "assistant", "content": "r"}, [], {})] * n, [], {}, "s")

    async def go() -> None:
        pool = ViewPool(Metrics(), build=build, executor=ThreadPoolExecutor(2), min_rebuild_s=0.0)
        key = lambda n: ("sid", f"head{n}", "0", "chars4")  # noqa: E731
        a = asyncio.create_task(pool.page(key(1), snap(1), "t", "chars4"))
        await asyncio.sleep(0.05)
        b = asyncio.create_task(pool.page(key(2), snap(2), "t", "chars4"))  # no page yet: shares the build
        other = asyncio.create_task(pool.page(("sid2", "h", "0", "chars4"), snap(5), "t", "chars4"))
        await asyncio.sleep(0.05)
        gate.set()
        assert (await a).html == (await b).html == b"1" and (await other).html == b"5"
        assert sorted(built) == [1, 5]
        assert (await pool.page(key(2), snap(2), "t", "chars4")).html == b"2"  # now its own build
        gate.clear()
        c = asyncio.create_task(pool.page(key(3), snap(3), "t", "chars4"))
        await asyncio.sleep(0.05)
        assert (await pool.page(key(4), snap(4), "t", "chars4")).html == b"2"  # at once: the last page
        assert not c.done()
        gate.set()
        assert (await c).html == b"3" and sorted(built) == [1, 2, 3, 5]
        assert pool.cached(key(2)) is None and pool.cached(key(3)) is not None  # one page per session kept
        pool.close()

    asyncio.run(go())


def test_a_session_being_written_is_rebuilt_at_most_every_min_rebuild_s() -> None:
    built: list[str] = []

    def build(snap: Snapshot, title: str, tokenizer: str) -> tuple[bytes, bytes]:
        built.append(snap.source)
        return snap.source.encode(), b""

    def snap(name: str) -> Any:
        return lambda: Snapshot([], [], [], {}, name)

    async def go() -> None:
        pool = ViewPool(Metrics(), build=build, executor=ThreadPoolExecutor(1), min_rebuild_s=3600.0)
        assert (await pool.page(("s", "h1", "0", "t"), snap("h1"), "t", "t")).html == b"h1"
        assert (await pool.page(("s", "h2", "0", "t"), snap("h2"), "t", "t")).html == b"h1"  # new turn: the last page
        assert (await pool.page(("s", "h2", "1", "t"), snap("h2 pinned"), "t", "t")).html == b"h2 pinned"  # a pin: at once
        assert (await pool.page(("o", "h2", "0", "t"), snap("other"), "t", "t")).html == b"other"
        assert built == ["h1", "h2 pinned", "other"]
        pool.close()

    asyncio.run(go())


def test_session_routes_build_off_the_event_loop(
    upstream: tuple[FakeUpstream, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A history replayed for /sessions/{id}, /expand or a pin, and the render of the JSON, run in
    a thread: while one is stuck, another tenant's chat is answered (on the loop it could not be)."""
    import refold.proxy.views as views
    from refold.proxy.sessions import Session

    gate = threading.Event()
    stuck = threading.Semaphore(0)
    build, describe = Session.build, views.describe

    def slow_build(self: Session, *a: Any) -> Any:
        if self.name == "big":
            stuck.release()
            gate.wait(60)
        return build(self, *a)

    def slow_describe(*a: Any) -> Any:
        stuck.release()
        gate.wait(60)
        return describe(*a)

    cfg = ProxyConfig(context_tools_beside_shell=True, upstream=upstream[1], store=str(tmp_path / "s.db"), tokenizer="off")
    body = {"model": "m", "messages": [{"role": "user", "content": "t"}], "tools": BASH_TOOLS}

    async def go() -> None:
        async with asgi_proxy(cfg) as c:
            await c.post("/v1/chat/completions", json=body, headers={**AUTH, "X-Refold-Session": "big"})
            for route in ("/sessions/big", "/sessions/big/expand?item=1", "pin", "describe"):
                c2 = httpx.AsyncClient(transport=c._transport, base_url="http://127.0.0.1:8077", timeout=60)
                app_state = c._transport.app.state.refold  # type: ignore[attr-defined]
                app_state["manager"]._sessions.clear()  # nothing replayed yet: the next view builds
                gate.clear()
                if route == "describe":
                    monkeypatch.setattr(Session, "build", build)
                    monkeypatch.setattr(views, "describe", slow_describe)
                    req = c2.get("/sessions/big", headers=AUTH)
                else:
                    monkeypatch.setattr(Session, "build", slow_build)
                    req = (c2.post("/sessions/big/pins", json={"item": "0"}, headers=AUTH) if route == "pin"
                           else c2.get(route, headers=AUTH))
                task = asyncio.create_task(req)
                assert await asyncio.to_thread(stuck.acquire, True, 30), route
                other = await c.post("/v1/chat/completions", json=body,
                                     headers={"Authorization": "Bearer other", "X-Refold-Session": "x"})
                assert other.status_code == 200 and not task.done(), route
                gate.set()
                assert (await task).status_code in (200, 400), route
                monkeypatch.setattr(views, "describe", describe)
                await c2.aclose()

    asyncio.run(go())


def test_view_workers_run_at_the_lowest_priority() -> None:
    pool = ViewPool(Metrics())
    try:
        ex = pool.executor()
        assert ex.submit(os.nice, 0).result(60) == 19
    finally:
        pool.close()


# ---- metrics -------------------------------------------------------------------------------------

ops = st.lists(
    st.one_of(
        st.tuples(st.just("inc"), st.sampled_from(["refold_a_total", "refold_b_total"]), st.floats(-5, 1e6)),
        st.tuples(st.just("gauge"), st.just("refold_g"), st.floats(-1e6, 1e6)),
        st.tuples(st.just("observe"), st.just("refold_h_ms"), st.floats(0, 1e5)),
    ),
    max_size=40,
)


def scrape(m: Metrics) -> dict[str, float]:
    out = {}
    for fam in text_string_to_metric_families(m.render()):
        for s in fam.samples:
            if fam.type in ("counter", "histogram") and not s.name.endswith("_bucket"):
                out[s.name] = s.value
    return out


@settings(max_examples=100, deadline=None)
@given(ops)
def test_counters_only_go_up(seq: list[tuple[str, str, float]]) -> None:
    m = Metrics()
    before = scrape(m)
    for kind, name, value in seq:
        if kind == "inc":
            if value < 0:
                with pytest.raises(ValueError):
                    m.inc(name, value)
            else:
                m.inc(name, value)
        elif kind == "gauge":
            m.gauge(name, value)  # a gauge may go anywhere
            assert m.value(name) == value
        else:
            m.observe(name, value)
        after = scrape(m)
        assert all(after.get(k, 0.0) >= v for k, v in before.items()), (kind, name, value)
        before = after


def test_file_identity_is_checked_cheaply(tmp_path: Path) -> None:
    store = SQLiteStore(str(tmp_path / "s.db"))
    assert store.known_fault() is None
    os.rename(tmp_path / "s.db", tmp_path / "moved.db")
    assert "deleted" in (store.known_fault() or "")
    asyncio.run(store.close())


def test_another_programs_database_is_refused_untouched(tmp_path: Path) -> None:
    """A mistyped --store naming another program's SQLite file: refused before refold's tables
    (or WAL mode) are written into it."""
    path = tmp_path / "notes.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE notes (x)")
    db.commit()
    db.close()
    with pytest.raises(ConfigError, match=r"notes.db is an SQLite database refold did not write \(tables notes\)"):
        SQLiteStore(str(path))
    db = sqlite3.connect(path)
    assert [n for (n,) in db.execute("SELECT name FROM sqlite_master")] == ["notes"]
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    db.execute("CREATE TABLE sessions (session_id TEXT, data TEXT)")  # a web app's sessions table
    db.commit()
    db.close()
    with pytest.raises(ConfigError, match=r"refold did not write \(tables notes, sessions\)"):
        SQLiteStore(str(path))
    for version in (1, 70):  # another program's user_version (Firefox's places.sqlite: 70) is no refold one
        db = sqlite3.connect(path)
        db.execute(f"PRAGMA user_version = {version}")
        db.close()
        with pytest.raises(ConfigError, match=r"refold did not write \(tables notes, sessions\)"):
            SQLiteStore(str(path))  # version 1 was migrated (WAL set, then 'no such table'), 70 'newer'
        db = sqlite3.connect(path)
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
        db.close()


def test_a_newer_refold_store_is_refused_before_wal_mode_is_set(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    asyncio.run(SQLiteStore(str(path)).close())
    db = sqlite3.connect(path)
    db.execute("PRAGMA journal_mode = DELETE")
    db.execute("PRAGMA user_version = 99")
    db.close()
    with pytest.raises(ConfigError, match="schema version 99, newer than this refold's"):
        SQLiteStore(str(path))
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    db.close()


def test_the_start_line_names_a_sqlite_stores_file_not_its_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--store sqlite:///tmp/x.db`` is ./tmp/x.db (three slashes: a relative path); the start
    line said 'store sqlite:///tmp/x.db', so the store seemed to be /tmp/x.db."""
    from refold.proxy.store import store_where

    monkeypatch.chdir(tmp_path)
    assert store_where("sqlite:///tmp/x.db?sync=full") == f"{tmp_path}/tmp/x.db, sync=full"
    assert store_where("sqlite:////srv/x.db") == "/srv/x.db"
    assert store_where("s.db") == f"{tmp_path}/s.db"
    assert store_where("redis://h:6379/0") == "redis://h:6379/0"

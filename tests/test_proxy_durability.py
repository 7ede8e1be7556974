"""Durability: SIGKILL and restart lose nothing; replicas share sessions through one Redis."""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from refold.errors import StoreConflict
from refold.proxy import ProxyConfig, create_app, open_store
from refold.proxy.records import Commit, Store, StoredStep
from test_proxy_clients import SYSTEM, TOOLS, run_tool_agent

from fake_upstream import FakeUpstream, ServeProcess, ServerThread, free_port, redis_server, start_serve

AUTH = {"Authorization": "Bearer sk-d"}


def start_proxy(upstream: str, store: str, port: int) -> ServeProcess:
    return start_serve(["--upstream", upstream, "--store", store, "--tokenizer", "off"], port)


def tool_turn(client: openai.OpenAI, messages: list[Any], session: str, note: str = "") -> None:
    msg = (
        client.chat.completions.create(
            model="m", messages=messages, tools=TOOLS, extra_headers={"X-Refold-Session": session}
        )
        .choices[0]
        .message
    )
    messages.append(msg.model_dump(exclude_none=True))
    messages.append(
        {
            "role": "tool",
            "tool_call_id": msg.tool_calls[0].id,
            "content": f"ran {msg.tool_calls[0].function.arguments} {note}",
        }
    )


def test_sigkill_and_restart_lose_nothing(tmp_path: Path) -> None:
    fake = FakeUpstream()
    store = str(tmp_path / "sessions.db")
    port = free_port()
    with ServerThread(fake.app) as up:
        proc = start_proxy(f"{up.url}/v1", store, port)
        try:
            client = openai.OpenAI(
                base_url=f"http://127.0.0.1:{port}/v1", api_key="sk-d", max_retries=0, timeout=60
            )
            messages: list[Any] = [SYSTEM, {"role": "user", "content": "durable task"}]
            for _ in range(4):
                tool_turn(client, messages, "crash")
            messages[-1]["content"] += " KILLED-HERE"  # the turn the proxy is killed during
            fake.script(("__hold__", {}))  # the next upstream call waits (for ``release``)
            failed: list[BaseException] = []

            def call() -> None:
                try:
                    client.chat.completions.create(
                        model="m", messages=messages, tools=TOOLS, extra_headers={"X-Refold-Session": "crash"}
                    )
                except BaseException as e:  # noqa: BLE001 - the connection dies with the proxy
                    failed.append(e)

            t = threading.Thread(target=call)
            t.start()
            assert fake.holding.wait(30), "the request never reached the upstream"
            assert "KILLED-HERE" in str(fake.requests[-1]["body"]["messages"][-1].get("content"))
            proc.send_signal(signal.SIGKILL)  # while the upstream holds its request
            proc.wait(timeout=20)
            fake.release.set()
            t.join(timeout=60)
            assert failed, "the client should have seen the connection drop"
        finally:
            if proc.poll() is None:
                proc.kill()
        proc = start_proxy(f"{up.url}/v1", store, port)
        try:
            view = httpx.get(f"http://127.0.0.1:{port}/sessions/crash", headers=AUTH).json()
            assert len(view["steps"]) == 4  # the turn sent just before the kill was already written
            assert "KILLED-HERE" in view["steps"][3]["observations"][0]["content"]
            messages[-1]["content"] = messages[-1]["content"].replace(
                " KILLED-HERE", ""
            )  # the client retries without it
            for _ in range(3):
                tool_turn(client, messages, "crash")
            view = httpx.get(f"http://127.0.0.1:{port}/sessions/crash", headers=AUTH).json()
            assert len(view["steps"]) == 6  # the 7th reply has no outputs yet
            assert [s["actions"][0] for s in view["steps"]] == [f"echo turn-{i}" for i in range(1, 7)]
            # nothing was lost: the killed attempt's version of step 4 is kept as a branch
            assert len(view["branches"]) == 2
            assert min(b["steps"] for b in view["branches"]) == 4
        finally:
            proc.kill()
            proc.wait(timeout=20)


@pytest.fixture()
def redis_url() -> Iterator[str]:
    with redis_server() as url:
        yield url


def test_two_replicas_share_sessions_through_redis(redis_url: str) -> None:
    fake = FakeUpstream()
    with ServerThread(fake.app) as up:
        cfg = ProxyConfig(upstream=f"{up.url}/v1", store=redis_url, tokenizer="off")
        with ServerThread(create_app(cfg)) as a, ServerThread(create_app(cfg)) as b:
            clients = [openai.OpenAI(base_url=f"{p.url}/v1", api_key="sk-d", max_retries=0) for p in (a, b)]
            messages: list[Any] = [SYSTEM, {"role": "user", "content": "replicated"}]
            for i in range(8):  # alternate replicas turn by turn; each must see the other's writes
                tool_turn(clients[i % 2], messages, "rep")
            views = [httpx.get(f"{p.url}/sessions/rep", headers=AUTH).json() for p in (a, b)]
            assert views[0]["head"] == views[1]["head"]
            assert len(views[0]["steps"]) == 7 and len(views[0]["branches"]) == 1
            # a restore answered by one replica is visible to the other
            messages[-1]["content"] += " RESTORE:2"
            tool_turn(clients[0], messages, "rep")
            tool_turn(clients[1], messages, "rep")
            view = httpx.get(f"{b.url}/sessions/rep", headers=AUTH).json()
            assert [s["internal"] for s in view["steps"]] == [False] * 8 + [True, False]
            # the same derived session from many concurrent requests on both replicas: no turn lost
            results = run_concurrently([clients[j % 2] for j in range(6)])
            assert all(len(r) == 2 + 2 * 3 for r in results)
            sessions = httpx.get(f"{a.url}/sessions", headers=AUTH).json()["sessions"]
            shared = [x["id"] for x in sessions if x["id"].startswith("auto-")]
            assert len(shared) == 1  # six identical conversations share one derived session ...
            view = httpx.get(f"{a.url}/sessions/{shared[0]}", headers=AUTH).json()
            # ... and every recorded turn is on one of its branches (identical turns are stored once)
            assert all(b["steps"] == 2 for b in view["branches"]) and len(view["steps"]) == 2


def run_concurrently(clients: list[openai.OpenAI]) -> list[list[Any]]:
    out: list[list[Any]] = [[] for _ in clients]

    def work(i: int) -> None:
        out[i] = run_tool_agent(clients[i], "parallel task", 3)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(clients))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return out


def _step(parent: str, n: int) -> StoredStep:
    from refold.types import message_digest

    reply, obs = {"role": "assistant", "content": f"r{n}"}, ({"role": "tool", "content": f"o{n}"},)
    return StoredStep(message_digest([reply, *obs], parent=parent), parent, reply, obs, {})


async def _cas_contract(store: Store) -> None:
    prefix = [{"role": "user", "content": "p"}]
    from refold.types import message_digest

    p = message_digest(prefix)
    s1 = _step(p, 1)
    await store.commit(Commit("sid", "n", "o", None, s1.digest, (p, prefix), (s1,)))
    with pytest.raises(StoreConflict):  # creating it twice
        await store.commit(Commit("sid", "n", "o", None, s1.digest, (p, prefix), (s1,)))
    s2 = _step(s1.digest, 2)
    with pytest.raises(StoreConflict):  # a stale expected head
        await store.commit(Commit("sid", "n", "o", p, s2.digest, None, (s2,)))
    await store.commit(Commit("sid", "n", "o", s1.digest, s2.digest, None, (s2,)))
    fork = _step(s1.digest, 3)
    await store.commit(Commit("sid", "n", "o", s2.digest, fork.digest, None, (fork,), retire=s2.digest))
    data = await store.load("sid")
    assert data is not None
    assert data.record.head == fork.digest and data.heads == [s2.digest]
    assert set(data.steps) == {s1.digest, s2.digest, fork.digest} and data.prefixes == {p: prefix}
    assert await store.head("sid") == fork.digest and await store.load("other") is None
    assert [r.sid for r in await store.sessions("o")] == ["sid"] and await store.sessions("x") == []
    await store.close()


def test_sqlite_store_contract(tmp_path: Path) -> None:
    asyncio.run(_cas_contract(open_store(f"sqlite:///{tmp_path / 'x.db'}")))


def test_redis_store_contract(redis_url: str) -> None:
    asyncio.run(_cas_contract(open_store(redis_url)))

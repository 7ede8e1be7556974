"""``previous_response_id`` lives in the session store: it survives a SIGKILL and restart (SQLite)
and is shared by replicas (Redis); an id the proxy does not know gets the OpenAI API's own 400."""

from __future__ import annotations

import asyncio
import signal
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from refold.proxy import open_store
from refold.proxy.records import SCHEMA_VERSION, Store
from test_proxy_durability import start_proxy
from test_proxy_responses import SHELL, FakeResponses, fcall, item_text

from fake_upstream import ServerThread, free_port, redis_server


@pytest.fixture()
def redis_url() -> Iterator[str]:
    with redis_server() as url:
        yield url


def _client(port: int, key: str = "sk-a") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=key, max_retries=0, timeout=30)


def _first_turn(client: openai.OpenAI, stream: bool) -> str:
    kwargs: dict[str, Any] = {"model": "m", "input": "List files", "tools": [SHELL]}
    if stream:
        with client.responses.stream(**kwargs) as s:
            return s.get_final_response().id
    return client.responses.create(**kwargs).id


def _continue(client: openai.OpenAI, rid: str, call_id: str) -> Any:
    out = [{"type": "function_call_output", "call_id": call_id, "output": "a.py b.py"}]
    return client.responses.create(model="m", previous_response_id=rid, tools=[SHELL], input=out)


@pytest.mark.parametrize("stream", [False, True])
def test_previous_response_id_survives_sigkill_and_restart(tmp_path: Path, stream: bool) -> None:
    fake = FakeResponses()
    store = f"sqlite:///{tmp_path / 's.db'}"
    with ServerThread(fake.app) as up:
        port = free_port()
        proc = start_proxy(f"{up.url}/v1", store, port)
        try:
            fake.script.append([fcall("call_a", "shell", {"command": ["ls"]})])
            rid = _first_turn(_client(port), stream)
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=20)
            proc = start_proxy(f"{up.url}/v1", store, port)
            r2 = _continue(_client(port), rid, "call_a")
            assert r2.output[0].type == "message"
            sent = fake.requests[-1]["body"]
            assert "previous_response_id" not in sent
            assert [i.get("type", "message") for i in sent["input"]] == ["message", "function_call", "function_call_output"]
            assert item_text(sent["input"][0]) == "List files"
            # a chain of three, after another restart
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=20)
            proc = start_proxy(f"{up.url}/v1", store, port)
            r3 = _client(port).responses.create(model="m", previous_response_id=r2.id, input="and now?")
            assert r3.status == "completed"
            kinds = [i.get("type", "message") for i in fake.requests[-1]["body"]["input"]]
            assert kinds == ["message", "function_call", "function_call_output", "message", "message"]
        finally:
            proc.terminate()
            proc.wait(timeout=20)


def test_replicas_share_previous_response_ids_through_redis(redis_url: str) -> None:
    fake = FakeResponses()
    with ServerThread(fake.app) as up:
        a, b = free_port(), free_port()
        pa = start_proxy(f"{up.url}/v1", redis_url, a)
        pb = start_proxy(f"{up.url}/v1", redis_url, b)
        try:
            fake.script.append([fcall("call_a", "shell", {"command": ["ls"]})])
            rid = _first_turn(_client(a), stream=True)
            r2 = _continue(_client(b), rid, "call_a")  # the other replica continues it
            assert r2.output[0].type == "message"
            assert len(fake.requests[-1]["body"]["input"]) == 3
            with pytest.raises(openai.BadRequestError):  # another key still cannot
                _client(b, "sk-other").responses.create(model="m", previous_response_id=rid, input="hi")
        finally:
            for p in (pa, pb):
                p.terminate()
                p.wait(timeout=20)


def test_an_unknown_previous_response_id_gets_the_openai_error(tmp_path: Path) -> None:
    fake = FakeResponses()
    with ServerThread(fake.app) as up:
        port = free_port()
        proc = start_proxy(f"{up.url}/v1", f"sqlite:///{tmp_path / 's.db'}", port)
        try:
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as h:
                auth = {"authorization": "Bearer sk-a"}
                for stream in (False, True):
                    body = {"model": "m", "input": "go on", "previous_response_id": "resp_elsewhere", "stream": stream}
                    r = h.post("/v1/responses", json=body, headers=auth)
                    assert r.status_code == 400
                    assert r.json() == {
                        "error": {
                            "message": "Previous response with id 'resp_elsewhere' not found.",
                            "type": "invalid_request_error",
                            "param": "previous_response_id",
                            "code": "previous_response_not_found",
                        }
                    }
                r = h.post("/v1/responses", json={"model": "m", "input": "x", "previous_response_id": 7}, headers=auth)
                assert r.status_code == 400 and r.json()["error"]["param"] == "previous_response_id"
                # an explicit pass-through still reaches the upstream as sent
                body = {"model": "m", "input": "go on", "previous_response_id": "resp_elsewhere"}
                r = h.post("/v1/responses", json=body, headers={**auth, "x-refold-passthrough": "1"})
                assert r.status_code == 200 and fake.requests[-1]["body"] == body
            assert len(fake.requests) == 1  # the refused ones never went upstream
            with pytest.raises(openai.BadRequestError) as e:
                _client(port).responses.create(model="m", previous_response_id="resp_nope", input="x")
            assert e.value.code == "previous_response_not_found"
        finally:
            proc.terminate()
            proc.wait(timeout=20)


async def _contract(store: Store) -> None:
    one = [{"type": "message", "role": "user", "content": "a"}, {"type": "message", "role": "assistant", "content": "b"}]
    two = [{"type": "message", "role": "user", "content": "c \u00e9"}]
    await store.put_response("o", "r1", None, one)
    await store.put_response("o", "r2", "r1", two)
    await store.put_response("o", "r2b", "r1", [{"type": "message", "role": "user", "content": "fork"}])
    assert await store.response_items("o", "r1") == one
    assert await store.response_items("o", "r2") == one + two
    assert (await store.response_items("o", "r2b") or [])[-1]["content"] == "fork"
    assert await store.response_items("other", "r2") is None and await store.response_items("o", "r9") is None
    await store.put_response("o", "orphan", "gone", two)
    assert await store.response_items("o", "orphan") is None  # a chain with a missing link is unknown
    # prune drops chains last used before the cutoff; using a chain keeps its ancestors
    await store.put_response("o", "old", None, one)
    cut = time.time()
    await asyncio.sleep(0.01)
    await store.put_response("o", "r3", "r2", two)
    await store.prune(cut)
    assert await store.response_items("o", "old") is None
    assert await store.response_items("o", "r3") == one + two + two
    await store.close()


def test_sqlite_response_contract(tmp_path: Path) -> None:
    asyncio.run(_contract(open_store(f"sqlite:///{tmp_path / 'x.db'}")))
    db = sqlite3.connect(tmp_path / "x.db")
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert ("004-responses",) in db.execute("SELECT name FROM migrations").fetchall()


def test_redis_response_contract(redis_url: str) -> None:
    asyncio.run(_contract(open_store(redis_url)))

"""Context calls the proxy held back from a reply the client already holds survive a restart
between the two requests: they are stored with the session (SQLite and Redis), the next request
answers them before its upstream call, and the prompt is exactly the one a proxy that never
restarted sends. The restart is in-process: the app is shut down (its store closed) and a new one
opens the same store."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from refold.proxy import ProxyConfig, create_app
from refold.proxy.migrations import MIGRATIONS
from refold.proxy.records import SCHEMA_VERSION, Commit, StoredStep, held_key
from refold.proxy.redis_store import RedisStore
from refold.proxy.sqlite_store import SQLiteStore
from refold.proxy.store import open_store
from refold.types import message_digest
from test_proxy_anthropic_rounds import bash as anthropic_bash
from test_proxy_anthropic_rounds import text as anthropic_text
from test_proxy_responses import fcall, message
from test_proxy_stream_early import BASH, SYSTEM
from test_proxy_surface_stream import BASH as ANTHROPIC_BASH
from test_proxy_surface_stream import EXEC, Paused

from fake_upstream import Scripted, ServerThread, call


def _client(cfg: ProxyConfig) -> TestClient:
    return TestClient(create_app(cfg), base_url="http://127.0.0.1")


def _sse_message(raw: str) -> dict[str, Any]:
    """A streamed chat completion added up (content and tool calls)."""
    content, calls = "", {}
    for line in raw.splitlines():
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        for ch in json.loads(line[6:]).get("choices") or []:
            d = ch.get("delta") or {}
            content += d.get("content") or ""
            for tc in d.get("tool_calls") or []:
                slot = calls.setdefault(tc["index"], {"id": None, "type": "function", "function": {"name": "", "arguments": ""}})
                slot["id"] = tc.get("id") or slot["id"]
                slot["function"]["name"] += (tc.get("function") or {}).get("name") or ""
                slot["function"]["arguments"] += (tc.get("function") or {}).get("arguments") or ""
    out: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        out["tool_calls"] = [calls[k] for k in sorted(calls)]
    return out


def _two_requests(
    cfg: ProxyConfig, restart: bool, first: Callable[[TestClient], Any], second: Callable[[TestClient, Any], None]
) -> None:
    c = _client(cfg)
    with c:
        got = first(c)
        if not restart:
            second(c, got)
            return
    with _client(cfg) as c2:  # a new process in all but name: nothing in memory, the same store
        second(c2, got)


# ---- chat completions: a later context call of a round relayed early ---------------------------------


def _chat(store: str, restart: bool, session: str) -> tuple[list[dict[str, Any]], list[bool]]:
    s = Scripted()
    s.replies.append(
        [{"content": "PROGRESS: two checks\n"}]
        + call(0, "bash", json.dumps({"command": "ls"}), "c0")
        + call(1, "bash", json.dumps({"command": "restore 1"}), "c1")
    )
    s.replies.append([{"content": "done"}])
    flags: list[bool] = []
    with ServerThread(s.app) as srv:
        cfg = ProxyConfig(context_tools_beside_shell=True, upstream=f"{srv.url}/v1", store=store, tokenizer="off")
        msgs: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": "task"}]
        body = {"model": "m", "messages": msgs, "tools": [BASH], "stream": True}
        h = {"X-Refold-Session": session}

        def first(c: TestClient) -> dict[str, Any]:
            r = c.post("/v1/chat/completions", json=body, headers=h)
            assert r.status_code == 200
            msg = _sse_message(r.text)
            assert [t["id"] for t in msg["tool_calls"]] == ["c0"]  # the restore never reaches the client
            return msg

        def second(c: TestClient, msg: dict[str, Any]) -> None:
            more = [*msgs, msg, {"role": "tool", "tool_call_id": "c0", "content": "a.py"}]
            r = c.post("/v1/chat/completions", json={**body, "messages": more}, headers=h)
            assert r.status_code == 200 and r.text.endswith("data: [DONE]\n\n")
            sess = c.get(f"/sessions/{session}").json()
            assert len(sess["branches"]) == 1
            flags.extend(st["internal"] for st in sess["steps"])

        _two_requests(cfg, restart, first, second)
    assert len(s.requests) == 2
    return s.requests[1]["messages"], flags


def test_chat_a_held_context_call_is_answered_after_a_restart(store_url: str) -> None:
    tag = "sqlite" if "://" not in store_url else "redis"
    kept, flags = _chat(store_url, False, f"chat-{tag}-kept")
    after, flags2 = _chat(store_url, True, f"chat-{tag}-restarted")
    assert after == kept  # exactly what the model was told without a restart
    calls = [tc["id"] for m in after for tc in m.get("tool_calls") or []]
    answered = [m["tool_call_id"] for m in after if m.get("role") == "tool"]
    assert calls == answered == ["c0", "c1"] and "Step 1 restored" in after[-1]["content"]
    assert flags == flags2 == [False, True]


def test_chat_a_held_call_after_an_internal_round_keeps_the_clients_form_across_a_restart(tmp_path: Path) -> None:
    """An internal round's text was streamed before the reply the calls were held from: the client
    holds both texts as one reply; after a restart it still maps back onto what the model wrote."""

    def run(restart: bool, name: str) -> list[dict[str, Any]]:
        s = Scripted()
        s.replies.append([{"content": "Looking back.\n"}, *call(0, "bash", json.dumps({"command": "restore 1"}), "cr")])
        s.replies.append([{"content": "Now both."}, *call(0, "bash", json.dumps({"command": "ls"}), "c0"),
                          *call(1, "restore", json.dumps({"steps": "1"}), "c1")])
        s.replies.append([{"content": "done"}])
        with ServerThread(s.app) as srv:
            cfg = ProxyConfig(context_tools_beside_shell=True, upstream=f"{srv.url}/v1", store=str(tmp_path / f"{name}.db"), tokenizer="off")
            msgs: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": "task"}]
            body = {"model": "m", "messages": msgs, "tools": [BASH], "stream": True}
            h = {"X-Refold-Session": name}

            def first(c: TestClient) -> dict[str, Any]:
                msg = _sse_message(c.post("/v1/chat/completions", json=body, headers=h).text)
                assert msg["content"] == "Looking back.\n\nNow both." and [t["id"] for t in msg["tool_calls"]] == ["c0"]
                return msg

            def second(c: TestClient, msg: dict[str, Any]) -> None:
                more = [*msgs, msg, {"role": "tool", "tool_call_id": "c0", "content": "a.py"}]
                assert c.post("/v1/chat/completions", json={**body, "messages": more}, headers=h).status_code == 200
                assert len(c.get(f"/sessions/{name}").json()["branches"]) == 1

            _two_requests(cfg, restart, first, second)
        return list(s.requests[2]["messages"])

    kept, after = run(False, "kept"), run(True, "restarted")
    assert after == kept
    assert [m["content"] for m in after if m["role"] == "assistant"][:2] == ["Looking back.\n", "Now both."]
    assert [m["tool_call_id"] for m in after if m["role"] == "tool"] == ["cr", "c0", "c1"]


# ---- messages and responses: a later context call of a round relayed early ----------------------------


def _surface(store: str, restart: bool, session: str, path: str, stream: bool) -> list[Any]:
    fake = Paused()
    if path == "/v1/messages":
        fake.script += [
            ([anthropic_text("Looking back."), anthropic_bash("toolu_x", "restore 1")], None),
            ([anthropic_text("Two things."), anthropic_bash("toolu_ls", "ls -la"), anthropic_bash("toolu_r", "restore 1")], None),
            ([anthropic_text("ok")], None),
        ]
    else:
        fake.script += [
            ([message("m0", "Looking back."), fcall("call_x", "restore", {"steps": "1"})], None),
            ([message("m1", "Two things."), fcall("call_0", "exec_command", {"cmd": "ls"}),
              fcall("call_r", "restore", {"steps": "1"})], None),
            ([message("m2", "ok")], None),
        ]
    with ServerThread(fake.app) as up:
        cfg = ProxyConfig(context_tools_beside_shell=True, upstream=f"{up.url}/v1", store=store, tokenizer="off")
        h = {"X-Refold-Session": session, "authorization": "Bearer k"}
        if path == "/v1/messages":
            body: dict[str, Any] = {"model": "m", "max_tokens": 64, "tools": [ANTHROPIC_BASH],
                                    "messages": [{"role": "user", "content": "fix it"}], "stream": stream}
        else:
            body = {"model": "m", "tools": [EXEC], "input": [{"role": "user", "content": "fix it"}], "stream": stream}

        def first(c: TestClient) -> dict[str, Any]:
            r = c.post(path, json=body, headers=h)
            assert r.status_code == 200, r.text
            if path == "/v1/messages":
                final = _anthropic_final(r.text) if stream else r.json()
                ids = [b["id"] for b in final["content"] if b["type"] == "tool_use"]
                assert ids == ["toolu_ls"]
                nxt = [*body["messages"], {"role": "assistant", "content": final["content"]},
                       {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_ls", "content": "a.py"}]}]
                return {**body, "messages": nxt, "stream": False}
            final = _responses_final(r.text) if stream else r.json()
            assert [o["call_id"] for o in final["output"] if o["type"] == "function_call"] == ["call_0"]
            items = [*body["input"], *final["output"], {"type": "function_call_output", "call_id": "call_0", "output": "x"}]
            return {**body, "input": items, "stream": False}

        def second(c: TestClient, nxt: dict[str, Any]) -> None:
            r = c.post(path, json=nxt, headers=h)
            assert r.status_code == 200, r.text
            assert len(c.get(f"/sessions/{session}", headers=h).json()["branches"]) == 1

        _two_requests(cfg, restart, first, second)
    assert len(fake.requests) == 3
    sent: list[Any] = fake.requests[2]["messages" if path == "/v1/messages" else "input"]
    return sent


def _events(raw: str) -> list[dict[str, Any]]:
    return [json.loads(b.split("data: ", 1)[1]) for b in raw.split("\n\n") if "data: " in b]


def _anthropic_final(raw: str) -> dict[str, Any]:
    blocks: dict[int, dict[str, Any]] = {}
    args: dict[int, str] = {}
    for d in _events(raw):
        if d.get("type") == "content_block_start":
            blocks[d["index"]] = dict(d["content_block"])
        elif d.get("type") == "content_block_delta":
            delta = d["delta"]
            if delta["type"] == "text_delta":
                blocks[d["index"]]["text"] = blocks[d["index"]].get("text", "") + delta["text"]
            elif delta["type"] == "input_json_delta":
                args[d["index"]] = args.get(d["index"], "") + delta["partial_json"]
    for i, a in args.items():
        blocks[i]["input"] = json.loads(a) if a else {}
    return {"content": [blocks[i] for i in sorted(blocks)]}


def _responses_final(raw: str) -> dict[str, Any]:
    done = [d for d in _events(raw) if d.get("type") == "response.completed"]
    assert done
    resp: dict[str, Any] = done[-1]["response"]
    return resp


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/responses"])
def test_surfaces_a_held_context_call_is_answered_after_a_restart(store_url: str, path: str) -> None:
    """An internal round (its text streamed), then a round whose first call is relayed early and
    whose later ``restore`` is held: the client holds both rounds' text as one reply."""
    tag = f"{'sqlite' if '://' not in store_url else 'redis'}-{path.rsplit('/', 1)[1]}"
    kept = _surface(store_url, False, f"{tag}-kept", path, True)
    after = _surface(store_url, True, f"{tag}-restarted", path, True)
    assert after == kept
    text = json.dumps(after)
    assert "Step 1 restored" in text and text.count("restore") >= 2


# ---- the store itself -----------------------------------------------------------------------------------


def _step(n: int, parent: str) -> StoredStep:
    reply = {"role": "assistant", "content": f"r{n}"}
    obs = ({"role": "user", "content": f"o{n}"},)
    return StoredStep(message_digest([reply, *obs], parent=parent), parent, reply, obs)


def test_a_held_record_is_kept_forgotten_with_its_answer_and_pruned(store_url: str) -> None:
    record = {"after": {"role": "assistant", "content": "r1"}, "calls": {"role": "assistant", "content": "", "tool_calls": []}}

    async def go() -> None:
        st = open_store(store_url)
        sid = f"held-{held_key(record)}-{id(st)}"
        p = message_digest([{"role": "user", "content": "p"}])
        s1 = _step(1, p)
        assert await st.put_held(sid, record) is False  # no such session
        await st.commit(Commit(sid, "n", "o", None, s1.digest, (p, [{"role": "user", "content": "p"}]), (s1,)))
        assert await st.state(sid) == (s1.digest, 0, "", 0)
        assert await st.put_held(sid, record) is True
        assert await st.state(sid) == (s1.digest, 0, held_key(record), 0)
        data = await st.load(sid)
        assert data is not None and data.held == record
        s2 = _step(2, s1.digest)
        await st.commit(Commit(sid, "n", "o", s1.digest, s2.digest, None, (s2,)))  # not the answer: kept
        assert (await st.state(sid) or ("", 0, "", 0))[2] == held_key(record)
        s3 = _step(3, s2.digest)
        await st.commit(Commit(sid, "n", "o", s2.digest, s3.digest, None, (s3,), settle=True))
        assert await st.state(sid) == (s3.digest, 0, "", 0)
        data = await st.load(sid)
        assert data is not None and data.held is None
        assert await st.put_held(sid, record) and await st.put_held(sid, None)
        assert (await st.state(sid) or ("", 0, "x", 0))[2] == ""
        await st.put_held(sid, record)
        assert await st.prune(10**12) >= 1 and await st.state(sid) is None and await st.load(sid) is None
        await st.close()

    asyncio.run(go())


def test_a_version_4_store_is_migrated_to_hold_calls(tmp_path: Path) -> None:
    """A store written by the refold before held calls were stored (schema 4) gets the ``held``
    table on open; its sessions load as they were and can hold calls from then on."""
    path = tmp_path / "v4.db"
    db = sqlite3.connect(path, isolation_level=None)
    for _, statements in MIGRATIONS[:4]:
        for sql in statements:
            db.execute(sql)
    db.execute("PRAGMA user_version = 4")
    p = message_digest([{"role": "user", "content": "p"}])
    s1 = _step(1, p)
    db.execute("INSERT INTO sessions VALUES ('a','n','o',?,1,2)", (s1.digest,))
    db.execute("INSERT INTO prefixes VALUES ('a',?, '[{\"role\": \"user\", \"content\": \"p\"}]')", (p,))
    db.execute("INSERT INTO steps VALUES ('a',?,?)", (s1.digest, s1.to_json()))
    assert db.execute("SELECT count(*) FROM sqlite_master WHERE name='held'").fetchone()[0] == 0
    db.close()

    async def go() -> None:
        st = SQLiteStore(str(path))
        assert st.schema == SCHEMA_VERSION == 6  # 005-held, then 006-delivered
        data = await st.load("a")
        assert data is not None and data.record.head == s1.digest and data.held is None
        assert await st.state("a") == (s1.digest, 0, "", 0)
        assert await st.put_held("a", {"after": s1.reply, "calls": {}})
        await st.close()

    asyncio.run(go())
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == 6
    assert [n for (n,) in db.execute("SELECT name FROM migrations ORDER BY name")][-2:] == ["005-held", "006-delivered"]
    assert db.execute("SELECT count(*) FROM held").fetchone()[0] == 1


def test_a_version_4_redis_store_is_marked_6(redis_url: str) -> None:
    import redis

    r = redis.Redis.from_url(redis_url)
    r.set("refold4:meta:schema", "4")

    async def go() -> None:
        st = RedisStore(redis_url, namespace="refold4")
        assert await st.state("nothing") is None
        assert st.schema == 6
        await st.close()

    asyncio.run(go())
    assert r.get("refold4:meta:schema") == b"6"
    r.close()


def test_a_replica_that_cached_the_session_sees_calls_another_one_held(redis_url: str) -> None:
    """Two proxies on one Redis. B serves a request and caches the session; the client retries it
    on A (nothing new to record: the head stays), whose answer holds a context call; the next
    request goes to B, which notices the held calls (they are part of the session's state) and
    answers them before its upstream call."""
    s = Scripted()
    s.replies.append(call(0, "bash", json.dumps({"command": "echo 1"}), "c9"))
    s.replies.append(call(0, "bash", json.dumps({"command": "ls"}), "c0") + call(1, "bash", json.dumps({"command": "restore 1"}), "c1"))
    s.replies.append([{"content": "done"}])
    with ServerThread(s.app) as srv:
        cfg = ProxyConfig(context_tools_beside_shell=True, upstream=f"{srv.url}/v1", store=redis_url, tokenizer="off")
        msgs: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": "task"},
                                      {"role": "assistant", "content": "", "tool_calls": [
                                          {"id": "c8", "type": "function", "function": {"name": "bash", "arguments": '{"command": "pwd"}'}}]},
                                      {"role": "tool", "tool_call_id": "c8", "content": "/w"}]
        body = {"model": "m", "messages": msgs, "tools": [BASH], "stream": True}
        h = {"X-Refold-Session": "replicas"}
        with _client(cfg) as a, _client(cfg) as b:
            assert b.post("/v1/chat/completions", json=body, headers=h).status_code == 200
            msg = _sse_message(a.post("/v1/chat/completions", json=body, headers=h).text)  # the retry, on A
            assert [t["id"] for t in msg["tool_calls"]] == ["c0"]
            more = [*msgs, msg, {"role": "tool", "tool_call_id": "c0", "content": "a.py"}]
            assert b.post("/v1/chat/completions", json={**body, "messages": more}, headers=h).status_code == 200
            sess = b.get("/sessions/replicas").json()
    sent = s.requests[2]["messages"]
    assert [m["tool_call_id"] for m in sent if m.get("role") == "tool"] == ["c8", "c0", "c1"]
    assert "Step 1 restored" in sent[-1]["content"]
    assert [st["internal"] for st in sess["steps"]] == [False, False, True]

"""A resend of a request whose answer reached the client (a client retrying a request that
succeeded, or sampling one turn again) is a new attempt: its prompt has none of the earlier
attempt's internal context-command rounds, and the reply the client continues with decides which
attempt's branch it extends. A retry after a failure still reuses them (the restore is not asked
again). The record of delivered answers is stored with the session (SQLite and Redis), so a
restart in between changes nothing."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.testclient import TestClient

from refold.proxy import ProxyConfig, create_app
from refold.proxy.records import Commit, StoredStep
from refold.proxy.store import open_store
from refold.types import message_digest
from test_proxy_held_restart import _sse_message

from fake_upstream import ServerThread

SYSTEM = {"role": "system", "content": "You are a careful engineer."}
BASH = {
    "type": "function",
    "function": {"name": "bash", "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}},
}
FAIL = "FAIL"


def reply(cid: str, command: str, text: str = "") -> dict[str, Any]:
    return {"role": "assistant", "content": text, "tool_calls": [
        {"id": cid, "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": command})}}
    ]}


class Upstream:
    """Chat completions answered from a script of replies (or ``FAIL``: a 500), streamed or not."""

    def __init__(self) -> None:
        self.script: list[Any] = []
        self.requests: list[list[dict[str, Any]]] = []
        self.bodies: list[dict[str, Any]] = []
        self.app = FastAPI()

        @self.app.post("/v1/chat/completions")
        async def chat(request: Request) -> Response:
            body = await request.json()
            self.requests.append(body["messages"])
            self.bodies.append(body)
            msg = self.script.pop(0)
            if msg == FAIL:
                return JSONResponse({"error": {"message": "overloaded", "type": "server_error"}}, status_code=500)
            finish = "tool_calls" if msg.get("tool_calls") else "stop"
            usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
            if not body.get("stream"):
                return JSONResponse({"id": "c", "object": "chat.completion", "created": 1, "model": "m", "usage": usage,
                                     "choices": [{"index": 0, "message": msg, "finish_reason": finish}]})
            return StreamingResponse(self._stream(msg, finish, usage), media_type="text/event-stream")

    async def _stream(self, msg: dict[str, Any], finish: str, usage: dict[str, Any]) -> Any:
        base = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m"}
        delta: dict[str, Any] = {"role": "assistant", "content": msg.get("content") or ""}
        if msg.get("tool_calls"):
            delta["tool_calls"] = [{**c, "index": i} for i, c in enumerate(msg["tool_calls"])]
        for d in (delta, {}):
            choice = {"index": 0, "delta": d, "finish_reason": None if d else finish}
            yield "data: " + json.dumps({**base, "choices": [choice]}) + "\n\n"
            await asyncio.sleep(0)
        yield "data: " + json.dumps({**base, "choices": [], "usage": usage}) + "\n\n"
        yield "data: [DONE]\n\n"


class Client:
    """One agent's requests through the proxy; ``restart``: a new app (same store) before each."""

    def __init__(self, url: str, store: str, session: str, stream: bool, restart: bool) -> None:
        self.cfg = ProxyConfig(upstream=f"{url}/v1", store=store, tokenizer="off")
        self.session, self.stream, self.restart = session, stream, restart
        self.c: TestClient | None = None

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.c is not None:
            self.c.__exit__(None, None, None)

    def post(self, messages: list[dict[str, Any]]) -> tuple[int, dict[str, Any]]:
        if self.c is None or self.restart:
            if self.c is not None:
                self.c.__exit__(None, None, None)
            self.c = TestClient(create_app(self.cfg), base_url="http://127.0.0.1").__enter__()
        body = {"model": "m", "messages": messages, "tools": [BASH], "stream": self.stream}
        r = self.c.post("/v1/chat/completions", json=body, headers={"X-Refold-Session": self.session})
        if r.status_code != 200:
            return r.status_code, {}
        if self.stream:
            if '"error"' in r.text:
                return 502, {}
            return 200, _sse_message(r.text)
        return 200, {k: v for k, v in r.json()["choices"][0]["message"].items() if k in ("role", "content", "tool_calls")}

    def branches(self) -> int:
        assert self.c is not None
        return len(self.c.get(f"/sessions/{self.session}").json()["branches"])


def _restores(prompt: list[dict[str, Any]]) -> list[str]:
    return [tc["id"] for m in prompt for tc in m.get("tool_calls") or [] if "restore" in tc["function"]["arguments"]]


def _ids(prompt: list[dict[str, Any]]) -> list[str]:
    return [tc["id"] for m in prompt for tc in m.get("tool_calls") or []]


OPENING = [SYSTEM, {"role": "user", "content": "fix the parser"}]


def _first_turn(up: Upstream, c: Client) -> list[dict[str, Any]]:
    """The turn every case starts from: ``cat a.py`` answered by the client."""
    up.script.append(reply("c0", "cat a.py"))
    status, got = c.post(OPENING)
    assert status == 200
    return [*OPENING, got, {"role": "tool", "tool_call_id": "c0", "content": "def parse():\n    return 1\n" * 30}]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("restart", [False, True])
def test_a_resend_after_a_delivered_answer_has_none_of_its_internal_rounds(
    store_url: str, stream: bool, restart: bool
) -> None:
    up = Upstream()
    tag = f"{'redis' if '://' in store_url else 'sqlite'}-{stream}-{restart}"
    with ServerThread(up.app) as srv, Client(srv.url, store_url, f"resend-{tag}", stream, restart) as c:
        msgs = _first_turn(up, c)
        up.script += [reply("r1", "restore 1"), reply("a2", "echo A")]  # sample A: a restore, then its answer
        status, a = c.post(msgs)
        assert status == 200 and _ids([a]) == ["a2"]
        assert len(up.requests) == 3 and _restores(up.requests[2]) == ["r1"]
        up.script.append(reply("b2", "echo B"))  # sample B of the same turn
        status, b = c.post(msgs)
        assert status == 200 and _ids([b]) == ["b2"]
        assert len(up.requests) == 4
        assert up.requests[3] == up.requests[1]  # the prompt sample A was first asked with: no restore in it
        # the client goes on with B: B's prompt had no restore, and neither has the next
        up.script.append(reply("b3", "echo done"))
        status, _ = c.post([*msgs, b, {"role": "tool", "tool_call_id": "b2", "content": "B"}])
        assert status == 200 and _restores(up.requests[4]) == [] and _ids(up.requests[4]) == ["c0", "b2"]
        # going on with A instead (another branch): A's restore is in its prompt, as A was told
        up.script.append(reply("a3", "echo done"))
        status, _ = c.post([*msgs, a, {"role": "tool", "tool_call_id": "a2", "content": "A"}])
        assert status == 200 and _ids(up.requests[5]) == ["c0", "r1", "a2"]
        assert c.branches() == 2


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("restart", [False, True])
def test_a_retry_after_a_failure_reuses_the_answered_restore(store_url: str, stream: bool, restart: bool) -> None:
    up = Upstream()
    tag = f"{'redis' if '://' in store_url else 'sqlite'}-{stream}-{restart}"
    with ServerThread(up.app) as srv, Client(srv.url, store_url, f"retry-{tag}", stream, restart) as c:
        msgs = _first_turn(up, c)
        up.script += [reply("r1", "restore 1"), FAIL]  # the round after the restore fails
        status, _ = c.post(msgs)
        assert status != 200 and len(up.requests) == 3
        up.script.append(reply("a2", "echo A"))
        status, a = c.post(msgs)  # the retry: the restore is not asked again
        assert status == 200 and _ids([a]) == ["a2"]
        assert up.requests[3] == up.requests[2] and _restores(up.requests[3]) == ["r1"]
        # that answer was delivered: one more resend is a new attempt, without the restore
        up.script.append(reply("b2", "echo B"))
        status, _ = c.post(msgs)
        assert status == 200 and up.requests[4] == up.requests[1]
        up.script.append(reply("a3", "echo done"))
        status, _ = c.post([*msgs, a, {"role": "tool", "tool_call_id": "a2", "content": "A"}])
        assert status == 200 and _ids(up.requests[5]) == ["c0", "r1", "a2"]


def test_delivered_records_are_stored_counted_and_pruned(store_url: str) -> None:
    async def go() -> None:
        st = open_store(store_url)
        sid = f"delivered-{id(st)}"
        p = message_digest([{"role": "user", "content": "p"}])
        r = {"role": "assistant", "content": "r1"}
        s1 = StoredStep(message_digest([r], parent=p), p, r, (), {"internal": True})
        record = {"text": "done", "ids": ["a2"]}
        assert await st.put_delivered(sid, s1.digest, record) is False  # no such session
        await st.commit(Commit(sid, "n", "o", None, s1.digest, (p, [{"role": "user", "content": "p"}]), (s1,)))
        assert await st.put_delivered(sid, s1.digest, record) is True
        assert await st.put_delivered(sid, s1.digest, {"text": "other", "ids": []}) is True
        assert await st.state(sid) == (s1.digest, 0, "", 2)
        data = await st.load(sid)
        assert data is not None and data.delivered == {s1.digest: [record, {"text": "other", "ids": []}]}
        assert await st.prune(10**12) >= 1 and await st.load(sid) is None
        await st.commit(Commit(sid, "n", "o", None, s1.digest, (p, [{"role": "user", "content": "p"}]), (s1,)))
        data = await st.load(sid)
        assert data is not None and data.delivered == {}  # pruned with its session
        await st.close()

    asyncio.run(go())


@pytest.mark.parametrize("surface", ["messages", "responses"])
@pytest.mark.parametrize("stream", [False, True])
def test_surfaces_a_resend_after_a_delivered_answer_has_none_of_its_internal_rounds(
    tmp_path: Path, surface: str, stream: bool
) -> None:
    from test_proxy_anthropic_rounds import bash, text
    from test_proxy_responses import fcall, message
    from test_proxy_surface_stream import paused_proxy

    if surface == "messages":
        path, key, tools = "/v1/messages", "messages", [{"name": "Bash", "input_schema": {"type": "object"}}]
        first, again = [bash("toolu_0", "cat a.py")], [bash("toolu_r", "restore 1")]
        a, b = [text("A"), bash("toolu_a", "echo A")], [text("B"), bash("toolu_b", "echo B")]
    else:
        path, key, tools = "/v1/responses", "input", [{"type": "function", "name": "exec_command", "parameters": {"type": "object"}}]
        first, again = [fcall("call_0", "exec_command", {"cmd": "cat a.py"})], [fcall("call_r", "exec_command", {"cmd": "restore 1"})]
        a = [message("m_a", "A"), fcall("call_a", "exec_command", {"cmd": "echo A"})]
        b = [message("m_b", "B"), fcall("call_b", "exec_command", {"cmd": "echo B"})]
    with paused_proxy(tmp_path) as (fake, url), httpx.Client(base_url=url, timeout=30) as c:
        h = {"x-api-key": "k", "anthropic-version": "2023-06-01", "X-Refold-Session": f"s-{surface}-{stream}"}
        fake.script += [(first, None)]
        body: dict[str, Any] = {"model": "m", "max_tokens": 64, key: [{"role": "user", "content": "fix it"}], "tools": tools}
        r0 = c.post(path, json=body, headers=h)
        assert r0.status_code == 200
        if surface == "messages":
            turn = [{"role": "assistant", "content": r0.json()["content"]},
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_0", "content": "x = 1"}]}]
        else:
            turn = [*r0.json()["output"], {"type": "function_call_output", "call_id": "call_0", "output": "x = 1"}]
        body = {**body, key: [*body[key], *turn], "stream": stream}
        fake.script += [(again, None), (a, None)]
        assert c.post(path, json=body, headers=h).status_code == 200
        assert len(fake.requests) == 3 and "restored" in json.dumps(fake.requests[2])
        fake.script += [(b, None)]
        r = c.post(path, json=body, headers=h)  # sample B of the same turn
        assert r.status_code == 200
        assert len(fake.requests) == 4 and fake.requests[3][key] == fake.requests[1][key]  # no restore in it

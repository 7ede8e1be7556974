"""The upstream's informative response headers (request ids, rate limits, retry-after) reach the
client on every surface, streamed and not, on upstream errors and after internal context-command
rounds; framing headers and cookies never do (in-test fake upstream, the real ASGI app)."""

from __future__ import annotations

import collections
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from refold.proxy import ProxyConfig, create_app
from refold.proxy.upstream import informative, retry_hint

from fake_upstream import ServerThread

INFO = {"x-request-id": "req_1", "x-ratelimit-remaining-tokens": "999", "openai-processing-ms": "12",
        "anthropic-ratelimit-requests-remaining": "41", "request-id": "rid_1", "retry-after-ms": "250"}
NEVER = {"set-cookie": "session=upstream-secret", "x-upstream-internal": "1", "server": "upstream/1.0",
         "alt-svc": 'h3=":443"'}
LIMITED = {"error": {"message": "rate limited", "type": "rate_limit", "code": "rate_limit_exceeded"}}
BASH = [{"type": "function", "function": {"name": "bash", "parameters": {
    "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}]


class Fake:
    """Answers are queued: ``(status, reply, headers)``; a reply is a chat message, Anthropic
    content blocks or Responses output items, by path; a status >= 400 answers ``LIMITED``."""

    def __init__(self) -> None:
        self.queue: collections.deque[tuple[int, Any, dict[str, str]]] = collections.deque()
        self.requests: list[dict[str, Any]] = []
        self.app = FastAPI()
        self.app.post("/v1/chat/completions")(self.chat)
        self.app.post("/v1/messages")(self.messages)
        self.app.post("/v1/responses")(self.responses)
        self.app.post("/v1/embeddings")(self.embeddings)

    def push(self, reply: Any, headers: dict[str, str] | None = None, status: int = 200) -> None:
        self.queue.append((status, reply, headers or {}))

    async def _next(self, r: Request, default: Any) -> tuple[dict[str, Any], int, Any, dict[str, str]]:
        body = await r.json()
        self.requests.append(body)
        status, reply, headers = self.queue.popleft() if self.queue else (200, default, {})
        if status >= 400:
            reply = default
        return body, status, reply, {**headers, **NEVER}

    def _answer(self, body: dict[str, Any], status: int, whole: Any, events: list[str], h: dict[str, str]) -> Response:
        if status >= 400:
            return JSONResponse(LIMITED, status_code=status, headers=h)
        if not body.get("stream"):
            return JSONResponse(whole, headers=h)

        async def gen() -> AsyncIterator[str]:
            for e in events:
                yield e

        return StreamingResponse(gen(), media_type="text/event-stream", headers=h)

    async def embeddings(self, r: Request) -> Response:
        body, status, _, h = await self._next(r, None)
        return self._answer(body, status, {"object": "list", "data": [{"embedding": [0.5]}]}, [], h)

    async def chat(self, r: Request) -> Response:
        body, status, msg, h = await self._next(r, {"role": "assistant", "content": "PROGRESS: a\nSTALE: -\nhi"})
        fin = "tool_calls" if msg.get("tool_calls") else "stop"
        whole = {"id": "c1", "object": "chat.completion", "created": 1, "model": "m",
                 "choices": [{"index": 0, "message": msg, "finish_reason": fin}]}
        delta: dict[str, Any] = {"role": "assistant", "content": msg.get("content") or ""}
        if msg.get("tool_calls"):
            delta["tool_calls"] = [{**tc, "index": i} for i, tc in enumerate(msg["tool_calls"])]
        chunks = [{"choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
                  {"choices": [{"index": 0, "delta": {}, "finish_reason": fin}]}]
        events = [f"data: {json.dumps({'id': 'c1', 'object': 'chat.completion.chunk', 'created': 1, 'model': 'm', **c})}\n\n"
                  for c in chunks] + ["data: [DONE]\n\n"]
        return self._answer(body, status, whole, events, h)

    async def messages(self, r: Request) -> Response:
        body, status, blocks, h = await self._next(r, [{"type": "text", "text": "PROGRESS: a\nSTALE: -\nhi"}])
        stop = "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
        m = {"id": "msg_1", "type": "message", "role": "assistant", "model": "m", "content": blocks,
             "stop_reason": stop, "stop_sequence": None, "usage": {"input_tokens": 1, "output_tokens": 1}}

        def ev(t: str, d: dict[str, Any]) -> str:
            return f"event: {t}\ndata: {json.dumps({'type': t, **d})}\n\n"

        events = [ev("message_start", {"message": {**m, "content": [], "stop_reason": None}})]
        for i, b in enumerate(blocks):
            if b["type"] == "text":
                events += [ev("content_block_start", {"index": i, "content_block": {"type": "text", "text": ""}}),
                           ev("content_block_delta", {"index": i, "delta": {"type": "text_delta", "text": b["text"]}})]
            else:
                events += [ev("content_block_start", {"index": i, "content_block": {**b, "input": {}}}),
                           ev("content_block_delta", {"index": i, "delta": {
                               "type": "input_json_delta", "partial_json": json.dumps(b["input"])}})]
            events.append(ev("content_block_stop", {"index": i}))
        events += [ev("message_delta", {"delta": {"stop_reason": stop, "stop_sequence": None},
                                        "usage": {"output_tokens": 1}}), ev("message_stop", {})]
        return self._answer(body, status, m, events, h)

    async def responses(self, r: Request) -> Response:
        text = "PROGRESS: a\nSTALE: -\nhi"
        item = {"type": "message", "id": "it1", "role": "assistant", "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}]}
        body, status, items, h = await self._next(r, [item])
        resp = {"id": f"resp_{len(self.requests)}", "object": "response", "created_at": 1, "status": "completed",
                "model": "m", "output": items, "usage": {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2}}

        def ev(t: str, d: dict[str, Any]) -> str:
            return f"event: {t}\ndata: {json.dumps({'type': t, **d})}\n\n"

        events = [ev("response.created", {"response": {**resp, "status": "in_progress", "output": []}})]
        for k, it in enumerate(items):
            events += [ev("response.output_item.added", {"output_index": k, "item": it}),
                       ev("response.output_item.done", {"output_index": k, "item": it})]
        events.append(ev("response.completed", {"response": resp}))
        return self._answer(body, status, resp, events, h)


@pytest.fixture()
def proxy(tmp_path: Path) -> Iterator[tuple[Fake, httpx.Client]]:
    fake = Fake()
    with ServerThread(fake.app) as up:
        cfg = ProxyConfig(upstream=f"{up.url}/v1", store=str(tmp_path / "s.db"), timeout=10.0, tokenizer="off")
        with ServerThread(create_app(cfg)) as px, httpx.Client(base_url=px.url, timeout=30) as c:
            yield fake, c


def _kept(r: httpx.Response, expected: dict[str, str]) -> None:
    for k, v in expected.items():
        assert r.headers.get(k) == v, (k, dict(r.headers))
    assert "set-cookie" not in r.headers and "x-upstream-internal" not in r.headers and "alt-svc" not in r.headers
    assert r.headers.get("server") != "upstream/1.0"


SURFACES: dict[str, tuple[str, dict[str, Any]]] = {
    "chat": ("/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "hi"}]}),
    "anthropic": ("/v1/messages", {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}),
    "responses": ("/v1/responses", {"model": "m", "input": "hi"}),
}
AUTH = {"Authorization": "Bearer k", "x-api-key": "k", "anthropic-version": "2023-06-01"}


@pytest.mark.parametrize("surface", list(SURFACES))
@pytest.mark.parametrize("stream", [False, True])
def test_success_headers_reach_the_client(proxy: tuple[Fake, httpx.Client], surface: str, stream: bool) -> None:
    fake, c = proxy
    path, body = SURFACES[surface]
    fake.push(_default(surface), INFO)
    r = c.post(path, json={**body, "stream": stream}, headers=AUTH)
    assert r.status_code == 200, r.text
    _kept(r, INFO)
    if stream:
        assert "text/event-stream" in r.headers["content-type"]
    else:  # the proxy's own framing: the body it sends, not the upstream's length
        assert int(r.headers["content-length"]) == len(r.content)
        assert "x-refold-session" in r.headers


@pytest.mark.parametrize("surface", list(SURFACES))
@pytest.mark.parametrize("stream", [False, True])
def test_a_429_keeps_its_retry_after(proxy: tuple[Fake, httpx.Client], surface: str, stream: bool) -> None:
    fake, c = proxy
    path, body = SURFACES[surface]
    fake.push(None, {"retry-after": "7", "x-request-id": "req_429"}, status=429)
    r = c.post(path, json={**body, "stream": stream}, headers=AUTH)
    assert r.status_code == 429, r.text
    _kept(r, {"retry-after": "7", "x-request-id": "req_429"})
    assert "rate limited" in r.text


def _default(surface: str) -> Any:
    text = "PROGRESS: a\nSTALE: -\nhi"
    if surface == "chat":
        return {"role": "assistant", "content": text}
    if surface == "anthropic":
        return [{"type": "text", "text": text}]
    return [{"type": "message", "id": "it1", "role": "assistant", "status": "completed",
             "content": [{"type": "output_text", "text": text, "annotations": []}]}]


def _call(cmd: str, cid: str) -> dict[str, Any]:
    return {"role": "assistant", "content": "PROGRESS: working\nSTALE: -",
            "tool_calls": [{"id": cid, "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": cmd})}}]}


def _three_steps(fake: Fake, c: httpx.Client) -> list[dict[str, Any]]:
    """A chat session with three shell steps (so ``restore 1`` is an internal command)."""
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "sys"}, {"role": "user", "content": "go"}]
    for i in range(1, 4):
        fake.push(_call(f"cat f{i}.py", f"c{i}"), {"x-request-id": f"req_step{i}"})
        m = c.post("/v1/chat/completions", json={"model": "m", "messages": msgs, "tools": BASH}, headers=AUTH)
        assert m.status_code == 200, m.text
        msg = m.json()["choices"][0]["message"]
        msgs += [msg, {"role": "tool", "tool_call_id": msg["tool_calls"][0]["id"], "content": f"f{i}\n" + "v\n" * 80}]
    return msgs


def test_after_an_internal_round_the_last_rounds_headers_reach_the_client(proxy: tuple[Fake, httpx.Client]) -> None:
    fake, c = proxy
    msgs = _three_steps(fake, c)
    fake.push(_call("restore 1", "r1"), {"x-request-id": "req_internal", "x-ratelimit-remaining-requests": "5"})
    fake.push({"role": "assistant", "content": "PROGRESS: b\nSTALE: -\nall done"},
              {"x-request-id": "req_final", "x-ratelimit-remaining-requests": "4"})
    n = len(fake.requests)
    r = c.post("/v1/chat/completions", json={"model": "m", "messages": msgs, "tools": BASH}, headers=AUTH)
    assert r.status_code == 200, r.text
    assert len(fake.requests) == n + 2  # the restore was answered by the proxy: two upstream rounds
    assert r.json()["choices"][0]["message"]["content"].endswith("all done")
    _kept(r, {"x-request-id": "req_final", "x-ratelimit-remaining-requests": "4"})


@pytest.mark.parametrize("stream", [False, True])
def test_a_429_in_the_round_after_an_internal_one(proxy: tuple[Fake, httpx.Client], stream: bool) -> None:
    fake, c = proxy
    msgs = _three_steps(fake, c)
    fake.push(_call("restore 1", "r1"), {"x-request-id": "req_internal"})
    fake.push(None, {"retry-after": "7", "x-request-id": "req_failed"}, status=429)
    r = c.post("/v1/chat/completions", json={"model": "m", "messages": msgs, "tools": BASH, "stream": stream},
               headers=AUTH)
    if not stream:  # the failing round's headers, not the internal round's
        assert r.status_code == 429, r.text
        _kept(r, {"retry-after": "7", "x-request-id": "req_failed"})
        return
    # a stream has started (with the first round's headers): the error event tells the retry-after
    assert r.status_code == 200 and r.headers["x-request-id"] == "req_internal"
    errors = [json.loads(line[5:]) for line in r.text.splitlines() if line.startswith("data: {\"error\"")]
    assert len(errors) == 1 and "retry-after: 7" in errors[0]["error"]["message"]
    assert errors[0]["error"]["code"] == "rate_limit_exceeded" and r.text.rstrip().endswith("data: [DONE]")


def test_anthropic_internal_round_forwards_the_last_rounds_headers(proxy: tuple[Fake, httpx.Client]) -> None:
    fake, c = proxy
    tools = [{"name": "Bash", "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}}}]
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    for i in range(1, 4):
        fake.push([{"type": "text", "text": "PROGRESS: w\nSTALE: -"},
                   {"type": "tool_use", "id": f"t{i}", "name": "Bash", "input": {"command": f"cat f{i}.py"}}])
        got = c.post("/v1/messages", json={"model": "m", "max_tokens": 9, "messages": msgs, "tools": tools}, headers=AUTH)
        assert got.status_code == 200, got.text
        msgs += [{"role": "assistant", "content": got.json()["content"]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{i}", "content": "v\n" * 80}]}]
    fake.push([{"type": "tool_use", "id": "r1", "name": "Bash", "input": {"command": "restore 1"}}],
              {"request-id": "rid_internal"})
    fake.push([{"type": "text", "text": "PROGRESS: b\nSTALE: -\ndone"}],
              {"request-id": "rid_final", "anthropic-ratelimit-tokens-remaining": "77"})
    n = len(fake.requests)
    r = c.post("/v1/messages", json={"model": "m", "max_tokens": 9, "messages": msgs, "tools": tools}, headers=AUTH)
    assert r.status_code == 200, r.text
    assert len(fake.requests) == n + 2
    _kept(r, {"request-id": "rid_final", "anthropic-ratelimit-tokens-remaining": "77"})


def test_a_forwarded_path_relays_the_upstreams_headers_but_not_its_cookies(proxy: tuple[Fake, httpx.Client]) -> None:
    fake, c = proxy
    fake.push(None, INFO)
    r = c.post("/v1/embeddings", json={"model": "e", "input": "hi"}, headers=AUTH)
    assert r.status_code == 200 and r.json()["data"][0]["embedding"] == [0.5]
    assert r.headers["x-request-id"] == "req_1" and "set-cookie" not in r.headers and "alt-svc" not in r.headers


def test_only_informative_headers_are_kept() -> None:
    upstream = httpx.Headers({
        "content-length": "12", "transfer-encoding": "chunked", "connection": "keep-alive",
        "content-encoding": "gzip", "content-type": "application/json", "set-cookie": "a=b", "keep-alive": "5",
        "server": "x", "date": "today", "X-Request-ID": "req_9", "x-ratelimit-limit-requests": "60",
        "Retry-After": "3", "retry-after-ms": "3000", "openai-version": "2020-10-01", "x-should-retry": "true",
        "x-amzn-requestid": "amz", "anthropic-ratelimit-input-tokens-reset": "2026-01-01T00:00:00Z",
    })
    assert informative(upstream) == {
        "x-request-id": "req_9", "x-ratelimit-limit-requests": "60", "retry-after": "3", "retry-after-ms": "3000",
        "openai-version": "2020-10-01", "x-should-retry": "true", "x-amzn-requestid": "amz",
        "anthropic-ratelimit-input-tokens-reset": "2026-01-01T00:00:00Z",
    }
    assert retry_hint(informative(upstream)) == " (retry-after: 3, retry-after-ms: 3000)"
    assert retry_hint({"x-request-id": "r"}) == ""

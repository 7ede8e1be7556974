"""``/v1/messages`` through ``refold serve`` with the real ``anthropic`` SDK (sync, async, streaming,
tools, thinking) against a fake Messages upstream that keeps every request it receives."""

from __future__ import annotations

import asyncio
import collections
import copy
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from refold.config import DEFAULT
from refold.proxy import ProxyConfig, create_app

from fake_upstream import ServerThread

SIGNATURE = "EqQBCkYIBxgCKkDr+/x9Qk3==" + "A1b2C3d4" * 40 + "+/=="
THINKING = "Let me look at the file first.\nIt probably defines `parse()` -- résumé ünïcode \u2713"
BASH = {
    "name": "Bash",
    "description": "Run a shell command.",
    "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
}
SYSTEM = [
    {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.0.abc; cc_entrypoint=cli; cch=00001;"},
    {"type": "text", "text": "You are Claude Code, a coding agent."},
    {"type": "text", "text": "Work in /repo. Be brief.", "cache_control": {"type": "ephemeral"}},
]


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    out = []
    for b in content or []:
        if b.get("type") == "text":
            out.append(b["text"])
        elif b.get("type") == "tool_result":
            out.append(_text_of(b.get("content")))
    return "".join(out)


def sse(message: dict[str, Any]) -> Iterator[str]:
    """Anthropic's event sequence for ``message``, deltas cut in small pieces."""

    def ev(name: str, data: dict[str, Any]) -> str:
        return f"event: {name}\ndata: {json.dumps(data)}\n\n"

    yield ev("message_start", {"type": "message_start", "message": {**message, "content": [], "stop_reason": None}})
    yield ev("ping", {"type": "ping"})
    for i, b in enumerate(message["content"]):
        kind = b["type"]
        deltas: list[dict[str, Any]] = []
        if kind == "text":
            start: dict[str, Any] = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": b["text"][j : j + 7]} for j in range(0, len(b["text"]), 7)]
        elif kind == "thinking":
            start = {"type": "thinking", "thinking": "", "signature": ""}
            deltas = [{"type": "thinking_delta", "thinking": b["thinking"][j : j + 5]} for j in range(0, len(b["thinking"]), 5)]
            deltas.append({"type": "signature_delta", "signature": b["signature"]})
        elif kind == "tool_use":
            start = {"type": "tool_use", "id": b["id"], "name": b["name"], "input": {}}
            raw = json.dumps(b["input"])
            deltas = [{"type": "input_json_delta", "partial_json": raw[j : j + 4]} for j in range(0, len(raw), 4)]
        else:
            start = b
        yield ev("content_block_start", {"type": "content_block_start", "index": i, "content_block": start})
        for d in deltas:
            yield ev("content_block_delta", {"type": "content_block_delta", "index": i, "delta": d})
        yield ev("content_block_stop", {"type": "content_block_stop", "index": i})
    yield ev(
        "message_delta",
        {"type": "message_delta", "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None}, "usage": {"output_tokens": 5}},
    )
    yield ev("message_stop", {"type": "message_stop"})


class FakeAnthropic:
    """A Messages upstream: scripted content blocks first, else a text reply naming the turn;
    ``RESTORE:<n>`` in the last user message makes it call the ``restore`` tool once."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.script: collections.deque[list[dict[str, Any]]] = collections.deque()
        self.count_tokens = True
        self._lock = threading.Lock()
        self.app = FastAPI()

        @self.app.post("/v1/messages")
        async def messages(request: Request) -> Response:
            raw = await request.body()
            body = json.loads(raw)
            with self._lock:
                self.requests.append({"body": body, "raw": raw, "headers": dict(request.headers), "query": request.url.query})
                content = self.script.popleft() if self.script else None
            last = _text_of(body["messages"][-1]["content"])
            if "FAIL:429" in last:
                return JSONResponse({"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}, status_code=429)
            if content is None:
                content = self.default(body, last)
            message = {
                "id": f"msg_{len(self.requests)}",
                "type": "message",
                "role": "assistant",
                "model": body["model"],
                "content": content,
                "stop_reason": "tool_use" if any(b["type"] == "tool_use" for b in content) else "end_turn",
                "stop_sequence": None,
                "usage": {"input_tokens": len(raw) // 4, "output_tokens": 5},
            }
            if body.get("stream"):
                return StreamingResponse(sse(message), media_type="text/event-stream")
            return JSONResponse(message)

        @self.app.post("/v1/messages/count_tokens")
        async def count(request: Request) -> Response:
            body = await request.json()
            with self._lock:
                self.requests.append({"body": body, "path": "count_tokens", "headers": dict(request.headers)})
            if not self.count_tokens:
                return JSONResponse({"type": "error", "error": {"type": "not_found_error", "message": "no"}}, status_code=404)
            return JSONResponse({"input_tokens": len(json.dumps(body)) // 4})

    def default(self, body: dict[str, Any], last: str) -> list[dict[str, Any]]:
        names = {t.get("name") for t in body.get("tools") or []}
        content = body["messages"][-1]["content"]
        answered = any(b.get("tool_use_id", "").startswith("toolu_r") for b in content if isinstance(b, dict))
        if "RESTORE:" in last and "restore" in names and not answered:
            n = last.split("RESTORE:")[1].split()[0]
            return [{"type": "tool_use", "id": f"toolu_r{len(self.requests)}", "name": "restore", "input": {"steps": n}}]
        turn = sum(1 for m in body["messages"] if m["role"] == "assistant") + 1
        return [{"type": "text", "text": f"done turn {turn}"}]

    @property
    def messages_requests(self) -> list[dict[str, Any]]:
        return [r for r in self.requests if r.get("path") != "count_tokens"]


class Env:
    def __init__(self, fake: FakeAnthropic, url: str) -> None:
        self.fake = fake
        self.url = url

    def client(self, key: str = "sk-ant-a") -> anthropic.Anthropic:
        return anthropic.Anthropic(base_url=self.url, api_key=key, max_retries=0)


@pytest.fixture()
def env(tmp_path: Path) -> Iterator[Env]:
    fake = FakeAnthropic()
    with ServerThread(fake.app) as up:
        cfg = ProxyConfig(context_tools_beside_shell=True, upstream=f"{up.url}/v1", store=str(tmp_path / "s.db"), tokenizer="chars4",
                          config=DEFAULT.override(["prompt.deferred=false"]))  # the protocol from the first call
        with ServerThread(create_app(cfg)) as px:
            yield Env(fake, px.url)


def thinking_turn(call_id: str, command: str) -> list[dict[str, Any]]:
    return [
        {"type": "thinking", "thinking": THINKING + call_id, "signature": SIGNATURE + call_id},
        {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP" + call_id},
        {"type": "text", "text": f"I will run {command}."},
        {"type": "tool_use", "id": call_id, "name": "Bash", "input": {"command": command}},
    ]


def dumped(block: Any) -> dict[str, Any]:
    return block.model_dump(exclude_none=True) if hasattr(block, "model_dump") else dict(block)


def cache_marks(body: dict[str, Any]) -> list[str]:
    marks = [f"tool:{t['name']}" for t in body.get("tools") or [] if "cache_control" in t]
    marks += [f"system:{i}" for i, b in enumerate(body.get("system") or []) if "cache_control" in b]
    for i, m in enumerate(body["messages"]):
        for j, b in enumerate(m["content"] if isinstance(m["content"], list) else []):
            if "cache_control" in b:
                marks.append(f"message:{i}.{j}")
    return marks


def check_pairs(body: dict[str, Any]) -> None:
    """Every tool_use answered by the next user message's tool_result, and no result without its call."""
    msgs = body["messages"]
    for i, m in enumerate(msgs):
        blocks = m["content"] if isinstance(m["content"], list) else []
        if m["role"] == "assistant":
            ids = [b["id"] for b in blocks if b["type"] == "tool_use"]
            if ids and i + 1 < len(msgs):
                got = [b["tool_use_id"] for b in msgs[i + 1]["content"] if b["type"] == "tool_result"]
                assert got[: len(ids)] == ids
        else:
            prev = {b["id"] for b in msgs[i - 1]["content"] if b["type"] == "tool_use"} if i else set()
            assert {b["tool_use_id"] for b in blocks if b["type"] == "tool_result"} <= prev


def run_agent(client: anthropic.Anthropic, fake: FakeAnthropic, turns: int, *, stream: bool = False) -> list[Any]:
    """A Claude-Code-like loop: thinking + a Bash call per turn, the result sent back."""
    messages: list[Any] = [{"role": "user", "content": "Fix the failing test in tests/test_x.py"}]
    finals = []
    for t in range(turns):
        call = f"toolu_{t:02d}"
        fake.script.append(thinking_turn(call, f"cat file{t}.py"))
        kwargs: dict[str, Any] = {
            "model": "claude-test", "max_tokens": 1024, "system": SYSTEM, "messages": messages, "tools": [BASH],
            "thinking": {"type": "enabled", "budget_tokens": 1024},
            "extra_headers": {"anthropic-beta": "interleaved-thinking-2025-05-14"},
        }
        if stream:
            with client.messages.stream(**kwargs) as s:
                resp = s.get_final_message()
        else:
            resp = client.messages.create(**kwargs)
        finals.append(resp)
        messages = [*messages, {"role": "assistant", "content": resp.content}]
        messages.append({
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": call, "content": f"def f{t}():\n    return {t}\n" * 30}],
        })
    return finals


def test_sync_tool_loop_with_thinking_keeps_signed_blocks_byte_identical(env: Env) -> None:
    client = env.client()
    finals = run_agent(client, env.fake, 6)
    assert [b.type for b in finals[0].content] == ["thinking", "redacted_thinking", "text", "tool_use"]
    reqs = env.fake.messages_requests
    assert len(reqs) == 6
    # what the upstream emitted as turn t's signed blocks comes back to it in every later request, unchanged
    for t in range(5):
        emitted = [b for b in thinking_turn(f"toolu_{t:02d}", f"cat file{t}.py") if "thinking" in b["type"]]
        later = reqs[-1]["body"]["messages"]
        sent = [b for m in later if m["role"] == "assistant" for b in m["content"] if "thinking" in b["type"]]
        for b in emitted:
            assert json.dumps(b, sort_keys=True) in {json.dumps(x, sort_keys=True) for x in sent}
            assert (b.get("signature") or b.get("data")).encode() in reqs[-1]["raw"] or json.dumps(b.get("signature") or b.get("data")).encode() in reqs[-1]["raw"]
    for r in reqs:
        check_pairs(r["body"])
        assert len(cache_marks(r["body"])) <= 4
        # this SDK sends its api_key as a bearer (older ones as x-api-key): forwarded as it came
        assert r["headers"].get("x-api-key") == "sk-ant-a" or r["headers"].get("authorization") == "Bearer sk-ant-a"
        assert r["headers"]["anthropic-version"]
        assert r["headers"]["anthropic-beta"] == "interleaved-thinking-2025-05-14"
        assert "[context-manager]" in "".join(b["text"] for b in r["body"]["system"])  # refold's protocol section
    # the billing line moved out of the system prompt, to the end, after the last breakpoint
    last = reqs[-1]["body"]
    assert not any("billing-header" in b["text"] for b in last["system"])
    tail = last["messages"][-1]["content"]
    assert "billing-header" in tail[-1]["text"] and "cache_control" in tail[-2]
    assert "system:" + str(len(last["system"]) - 1) in cache_marks(last)  # the client's system breakpoint kept, at its end


def test_streaming_matches_non_streaming_and_relays_anthropic_events(env: Env) -> None:
    client = env.client()
    plain = run_agent(client, env.fake, 3)
    streamed = run_agent(client, env.fake, 3, stream=True)
    assert [[dumped(b) for b in m.content] for m in plain] == [[dumped(b) for b in m.content] for m in streamed]
    with httpx.Client(base_url=env.url, timeout=30) as h:
        env.fake.script.append(thinking_turn("toolu_s", "ls"))
        r = h.post("/v1/messages", json={"model": "m", "max_tokens": 10, "stream": True, "messages": [{"role": "user", "content": "hi"}]},
                   headers={"x-api-key": "k", "anthropic-version": "2023-06-01"})
        names = [line[7:] for line in r.text.splitlines() if line.startswith("event: ")]
    assert names[0] == "message_start" and names[-1] == "message_stop"
    assert {"content_block_start", "content_block_delta", "content_block_stop", "message_delta", "ping"} <= set(names)


def test_async_client(env: Env) -> None:
    async def go() -> str:
        async with anthropic.AsyncAnthropic(base_url=env.url, api_key="sk-ant-b", max_retries=0) as client:
            r = await client.messages.create(model="claude-test", max_tokens=64, messages=[{"role": "user", "content": "hello"}])
            async with client.messages.stream(model="claude-test", max_tokens=64, messages=[
                {"role": "user", "content": "hello"}, {"role": "assistant", "content": r.content}, {"role": "user", "content": "again"},
            ]) as s:
                text = await s.get_final_text()
            return f"{r.content[0].text}|{text}"

    assert asyncio.run(go()) == "done turn 1|done turn 2"


def test_restore_is_answered_inside_the_proxy_streaming_and_not(env: Env) -> None:
    client = env.client()
    for stream in (False, True):
        env.fake.requests.clear()
        messages: list[Any] = [{"role": "user", "content": f"Task {stream}"}]
        for t in range(3):
            env.fake.script.append([{"type": "tool_use", "id": f"toolu_{stream}{t}", "name": "Bash", "input": {"command": f"echo {t}"}}])
            r = client.messages.create(model="m", max_tokens=64, messages=messages, tools=[BASH])
            messages += [{"role": "assistant", "content": r.content},
                         {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"toolu_{stream}{t}", "content": f"out {t}"}]}]
        messages[-1]["content"].append({"type": "text", "text": "RESTORE:1"})
        kwargs: dict[str, Any] = {"model": "m", "max_tokens": 64, "messages": messages, "tools": [BASH]}
        if stream:
            with client.messages.stream(**kwargs) as s:
                final = s.get_final_message()
        else:
            final = client.messages.create(**kwargs)
        assert [b.type for b in final.content] == ["text"]  # the client never sees the restore call
        reqs = env.fake.messages_requests
        assert len(reqs) == 5  # 3 turns, the restore round, the answer
        assert "restore" in {t["name"] for t in reqs[-2]["body"]["tools"]}  # offered in Anthropic's tool format
        assert "input_schema" in next(t for t in reqs[-2]["body"]["tools"] if t["name"] == "restore")
        answer = reqs[-1]["body"]["messages"][-1]["content"]
        result = next(b for b in answer if b["type"] == "tool_result")
        assert "[context-manager] Step 1" in _text_of([result])
        check_pairs(reqs[-1]["body"])


def test_compaction_request_and_passthrough_header_are_forwarded_untouched(env: Env) -> None:
    body = {
        "model": "m", "max_tokens": 100, "system": SYSTEM,
        "messages": [
            {"role": "user", "content": "Fix it"},
            {"role": "assistant", "content": [{"type": "text", "text": "ok"}]},
            {"role": "user", "content": "Your task is to create a detailed summary of the conversation so far, paying close attention"},
        ],
    }
    raw = json.dumps(body, indent=1).encode()  # as the harness wrote it, byte for byte
    with httpx.Client(base_url=env.url, timeout=30) as h:
        r = h.post("/v1/messages?beta=true", content=raw,
                   headers={"x-api-key": "k", "anthropic-version": "2023-06-01", "content-type": "application/json"})
        assert r.status_code == 200
        assert env.fake.requests[-1]["raw"] == raw
        assert env.fake.requests[-1]["query"] == "beta=true"
        plain = {**body, "messages": body["messages"][:2] + [{"role": "user", "content": "go on"}]}
        h.post("/v1/messages", json=plain, headers={"x-api-key": "k", "X-Refold-Passthrough": "1"})
        assert env.fake.requests[-1]["body"] == plain
        h.post("/v1/messages", json=plain, headers={"x-api-key": "k"})
        assert env.fake.requests[-1]["body"] != plain  # rendered


def test_volatile_system_line_keeps_one_session_and_subagents_get_their_own(env: Env) -> None:
    with httpx.Client(base_url=env.url, timeout=30) as h:
        names = []
        for cch, task in (("00001", "main task"), ("0fa3c", "main task"), ("77777", "subagent: find the config")):
            system = [{"type": "text", "text": f"x-anthropic-billing-header: cc_version=2.1.0.abc; cch={cch};"}, *SYSTEM[1:]]
            r = h.post("/v1/messages", json={"model": "m", "max_tokens": 10, "system": system,
                                              "messages": [{"role": "user", "content": task}]}, headers={"x-api-key": "k"})
            names.append(r.headers["x-refold-session"])
        assert names[0] == names[1] != names[2]
        systems = [json.dumps(r["body"]["system"]) for r in env.fake.requests[:2]]
        assert systems[0] == systems[1]  # the cached prefix does not change with the nonce


def test_errors_in_anthropic_shape(env: Env) -> None:
    client = env.client()
    with pytest.raises(anthropic.RateLimitError) as e:
        client.messages.create(model="m", max_tokens=5, messages=[{"role": "user", "content": "FAIL:429"}])
    assert e.value.body["error"]["message"] == "slow down"  # type: ignore[index]
    with httpx.Client(base_url=env.url, timeout=30) as h:
        r = h.post("/v1/messages", content=b"{nope", headers={"x-api-key": "k", "content-type": "application/json"})
        assert r.status_code == 400 and r.json()["type"] == "error"
        assert r.json()["error"]["type"] == "invalid_request_error"
        r = h.post("/v1/messages", json={"model": "m", "max_tokens": 5, "messages": [{"role": "robot", "content": "x"}]})
        assert r.status_code == 400 and "messages.0.role" in r.json()["error"]["message"]
    with pytest.raises(anthropic.BadRequestError):
        client.messages.create(model="m", max_tokens=5, messages=[])


def test_images_and_documents_pass_through(env: Env) -> None:
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
    doc = {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "spec text"}}
    client = env.client()
    messages: list[Any] = [{"role": "user", "content": [{"type": "text", "text": "Look"}, image, doc]}]
    env.fake.script.append([{"type": "tool_use", "id": "toolu_i", "name": "Bash", "input": {"command": "shot"}}])
    r = client.messages.create(model="m", max_tokens=5, messages=messages, tools=[BASH])
    messages += [{"role": "assistant", "content": r.content},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_i", "content": [{"type": "text", "text": "png:"}, image]}]}]
    client.messages.create(model="m", max_tokens=5, messages=messages, tools=[BASH])
    sent = env.fake.requests[-1]["body"]["messages"]
    blocks = [copy.deepcopy(b) for m in sent for b in m["content"]]
    for b in blocks:
        b.pop("cache_control", None)
    assert image in blocks and doc in blocks
    result = next(b for b in blocks if b["type"] == "tool_result")
    assert image in result["content"]


def test_count_tokens_is_the_rendered_prompt(env: Env) -> None:
    client = env.client()
    messages: list[Any] = [{"role": "user", "content": "Count me"}]
    for t in range(8):
        messages += [{"role": "assistant", "content": [{"type": "tool_use", "id": f"toolu_{t}", "name": "Bash", "input": {"command": "cat big.py"}}]},
                     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"toolu_{t}", "content": "x = 1\n" * 400}]}]
    got = client.messages.count_tokens(model="m", messages=messages, tools=[BASH])
    sent = env.fake.requests[-1]["body"]
    assert got.input_tokens == len(json.dumps(sent)) // 4  # the upstream counted what refold would send
    assert got.input_tokens < len(json.dumps({"model": "m", "messages": messages, "tools": [BASH]})) // 4
    assert set(sent) <= {"model", "messages", "system", "tools", "tool_choice", "thinking"}
    env.fake.count_tokens = False
    with httpx.Client(base_url=env.url, timeout=30) as h:
        r = h.post("/v1/messages/count_tokens", json={"model": "m", "messages": messages}, headers={"x-api-key": "k"})
    assert r.status_code == 200 and r.headers["x-refold-count"] == "local:chars4"
    assert 0 < r.json()["input_tokens"] < sum(len(json.dumps(m)) for m in messages) // 4
    assert not [r for r in env.fake.requests if r.get("path") != "count_tokens" and r["body"]["messages"] == messages]


def test_proxy_token_is_accepted_as_x_api_key_and_never_forwarded(tmp_path: Path) -> None:
    fake = FakeAnthropic()
    with ServerThread(fake.app) as up:
        cfg = ProxyConfig(context_tools_beside_shell=True, upstream=f"{up.url}/v1", store=str(tmp_path / "s.db"), tokenizer="off",
                          tokens=("proxy-secret",), upstream_key="sk-ant-upstream")
        with ServerThread(create_app(cfg)) as px:
            client = anthropic.Anthropic(base_url=px.url, api_key="proxy-secret", max_retries=0)
            client.messages.create(model="m", max_tokens=5, messages=[{"role": "user", "content": "hi"}])
            assert fake.requests[-1]["headers"]["x-api-key"] == "sk-ant-upstream"
            assert "proxy-secret" not in json.dumps(fake.requests[-1]["headers"])
            with pytest.raises(anthropic.AuthenticationError):
                anthropic.Anthropic(base_url=px.url, api_key="wrong", max_retries=0).messages.create(
                    model="m", max_tokens=5, messages=[{"role": "user", "content": "hi"}])

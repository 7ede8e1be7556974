"""One rule on every surface (chat completions, messages, responses; streamed or not; tool calls
or mini-style text actions) for a round whose context commands the proxy will not answer (the
request's rounds are used up, or ``--max-rounds 0``): its prompt offers none (no context tools,
no "restore <step>" hint) and its reply reaches the client as the model wrote it. A context
command the model still issues there goes to the client's shell like any command (in text mode
it is the reply's only action: leaving it out would leave the client with none, and a tool agent
whose only call was taken away ends its turn), and what the client's shell answered is what the
session records: the command is never applied."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from refold.config import DEFAULT
from refold.proxy import ProxyConfig, create_app
from refold.wire import read_actions
from test_proxy_anthropic_rounds import text as anthropic_text
from test_proxy_responses import fcall, message
from test_proxy_surface_stream import EXEC, Paused

from fake_upstream import FakeUpstream, ServerThread

NOW = DEFAULT.override(["prompt.deferred=false"])  # the protocol from the first call, which these tests read

SYSTEM = {"role": "system", "content": "You are a careful engineer. Run one command per reply in a ```bash block."}
FIRST = "Let me look.\n```bash\nls\n```"
AGAIN = "PROGRESS: looking back\nSTALE: -\nI need step 1.\n```bash\nrestore 1\n```"
FOLD = 'PROGRESS: found it\nSTALE: -\nDone looking.\n```bash\nfold_span "a.py defines parse; the bug is in b.py"\n```'
SPAN = 'PROGRESS: where\nSTALE: -\n```bash\nbegin_span "where is parse"\n```'
REFUSED = "bash: restore: command not found"


def _client(cfg: ProxyConfig) -> TestClient:
    return TestClient(create_app(cfg), base_url="http://127.0.0.1")


def _chat_text(raw: str, stream: bool) -> str:
    if not stream:
        return str(json.loads(raw)["choices"][0]["message"]["content"])
    out = ""
    for line in raw.splitlines():
        if line.startswith("data: {"):
            for ch in json.loads(line[6:]).get("choices") or []:
                out += (ch.get("delta") or {}).get("content") or ""
    return out


def _chat_reply(content: str, stream: bool) -> Any:
    if not stream:
        return {"id": "x", "object": "chat.completion", "model": "m", "choices": [
            {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}]}
    base = {"id": "x", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    return [json.dumps({**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": content}}]}),
            json.dumps({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})]


@pytest.mark.parametrize("stream", [False, True])
def test_chat_text_mode(tmp_path: Path, stream: bool) -> None:
    fake = FakeUpstream()
    fake.raw(_chat_reply(AGAIN, stream), _chat_reply(AGAIN, stream), _chat_reply("ok", stream))
    with ServerThread(fake.app) as up:
        cfg = ProxyConfig(upstream=f"{up.url}/v1", store=str(tmp_path / "s.db"), tokenizer="off", max_rounds=1, config=NOW)
        with _client(cfg) as c:
            msgs: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": "task"},
                                          {"role": "assistant", "content": FIRST}, {"role": "user", "content": "a.py"}]
            h = {"X-Refold-Session": f"chat-{stream}"}
            r = c.post("/v1/chat/completions", json={"model": "m", "messages": msgs, "stream": stream}, headers=h)
            assert r.status_code == 200
            got = _chat_text(r.text, stream)
            msgs += [{"role": "assistant", "content": got}, {"role": "user", "content": REFUSED}]
            r2 = c.post("/v1/chat/completions", json={"model": "m", "messages": msgs, "stream": stream}, headers=h)
            assert r2.status_code == 200
            _not_applied(c, f"chat-{stream}", h, [[], [1], []])
    prompts = [json.dumps(q["body"]["messages"]) for q in fake.requests]
    _check(prompts, got)


def _not_applied(c: TestClient, name: str, h: dict[str, str], want: list[list[int]]) -> None:
    """Which steps each step restores (the proxy's answer does, the client's refused one not),
    and no context command read from a step the client's shell ran."""
    steps = c.get(f"/sessions/{name}", headers=h).json()["steps"]
    assert [s["restore_of"] for s in steps] == want
    for s in steps:
        if not s["internal"]:
            assert all(a.context is None for a in read_actions(s["reply"])), s["reply"]


def _check(prompts: list[str], got: str) -> None:
    """Three upstream calls: the internal round, the last round (offers nothing), the next request."""
    assert len(prompts) == 3
    assert "restore <step>" in prompts[0]  # the first round offers the commands it answers
    assert "restore <step>" not in prompts[1]  # the last one does not
    assert got.endswith("```bash\nrestore 1\n```")  # as the model wrote it: the client's shell answers it
    assert REFUSED in prompts[2]
    assert prompts[2].count("Step 1 restored") == 1  # the internal round's answer only: the refused one is not applied


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("path", ["/v1/messages", "/v1/responses"])
def test_surfaces_text_mode(tmp_path: Path, path: str, stream: bool) -> None:
    fake = Paused()
    if path == "/v1/messages":
        fake.script += [([anthropic_text(AGAIN)], None), ([anthropic_text(AGAIN)], None), ([anthropic_text("ok")], None)]
    else:
        fake.script += [([message("m1", AGAIN)], None), ([message("m2", AGAIN)], None), ([message("m3", "ok")], None)]
    with ServerThread(fake.app) as up:
        cfg = ProxyConfig(upstream=f"{up.url}/v1", store=str(tmp_path / "s.db"), tokenizer="off", max_rounds=1, config=NOW)
        h = {"X-Refold-Session": f"text-{stream}", "authorization": "Bearer k"}
        with _client(cfg) as c:
            if path == "/v1/messages":
                msgs: list[dict[str, Any]] = [{"role": "user", "content": "task"}, {"role": "assistant", "content": FIRST},
                                              {"role": "user", "content": "a.py"}]
                body: dict[str, Any] = {"model": "m", "max_tokens": 64, "system": SYSTEM["content"], "messages": msgs, "stream": stream}
                r = c.post(path, json=body, headers=h)
                assert r.status_code == 200, r.text
                got = _anthropic_text(r.text, stream)
                body["messages"] = [*msgs, {"role": "assistant", "content": got}, {"role": "user", "content": REFUSED}]
            else:
                items: list[dict[str, Any]] = [{"role": "user", "content": "task"}, {"role": "assistant", "content": FIRST},
                                               {"role": "user", "content": "a.py"}]
                body = {"model": "m", "instructions": SYSTEM["content"], "input": items, "stream": stream}
                r = c.post(path, json=body, headers=h)
                assert r.status_code == 200, r.text
                got = _responses_text(r.text, stream)
                body["input"] = [*items, {"role": "assistant", "content": got}, {"role": "user", "content": REFUSED}]
            r2 = c.post(path, json=body, headers=h)
            assert r2.status_code == 200, r2.text
            _not_applied(c, f"text-{stream}", h, [[], [1], []])
    _check([json.dumps(q) for q in fake.requests], got)


def _datas(raw: str) -> list[dict[str, Any]]:
    return [json.loads(b.split("data: ", 1)[1]) for b in raw.split("\n\n") if "data: " in b]


def _anthropic_text(raw: str, stream: bool) -> str:
    if not stream:
        return "".join(b["text"] for b in json.loads(raw)["content"] if b["type"] == "text")
    return "".join(d["delta"]["text"] for d in _datas(raw) if d.get("type") == "content_block_delta" and d["delta"]["type"] == "text_delta")


def _responses_text(raw: str, stream: bool) -> str:
    resp = json.loads(raw) if not stream else next(d["response"] for d in _datas(raw) if d.get("type") == "response.completed")
    return "".join(p["text"] for o in resp["output"] if o["type"] == "message" for p in o["content"])


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/responses"])
def test_surfaces_with_no_rounds_offer_nothing_and_apply_nothing(tmp_path: Path, path: str) -> None:
    """``--max-rounds 0`` on the surfaces, as on chat: no context tool next to the client's, no
    restore hint, and a ``restore`` the client's shell refused is not applied."""
    fake = Paused()
    if path == "/v1/messages":
        fake.script += [([anthropic_text("ok")], None)] * 2
        tool = {"name": "Bash", "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}}}
        call = {"type": "tool_use", "id": "toolu_r", "name": "Bash", "input": {"command": "restore 1"}}
        msgs: list[dict[str, Any]] = [
            {"role": "user", "content": "task"}, {"role": "assistant", "content": FIRST}, {"role": "user", "content": "a.py"},
            {"role": "assistant", "content": [{"type": "text", "text": "PROGRESS: p\nSTALE: -"}, call]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_r", "content": REFUSED}]}]
        body: dict[str, Any] = {"model": "m", "max_tokens": 64, "tools": [tool], "messages": msgs}
    else:
        fake.script += [([message("m1", "ok")], None)] * 2
        tool = EXEC
        items: list[dict[str, Any]] = [
            {"role": "user", "content": "task"}, {"role": "assistant", "content": FIRST}, {"role": "user", "content": "a.py"},
            fcall("call_r", "exec_command", {"cmd": "restore 1"}),
            {"type": "function_call_output", "call_id": "call_r", "output": REFUSED}]
        body = {"model": "m", "tools": [tool], "input": items}
    with ServerThread(fake.app) as up:
        cfg = ProxyConfig(upstream=f"{up.url}/v1", store=str(tmp_path / "s.db"), tokenizer="off", max_rounds=0, config=NOW)
        with _client(cfg) as c:
            for stream in (False, True):
                h = {"X-Refold-Session": "zero", "authorization": "Bearer k"}
                r = c.post(path, json={**body, "stream": stream}, headers=h)
                assert r.status_code == 200, r.text
                _not_applied(c, "zero", h, [[], []])
    for q in fake.requests:
        assert [t["name"] for t in q["tools"]] == [tool["name"]]
        text = json.dumps(q)
        assert "restore <step>" not in text and REFUSED in text and "Step 1 restored" not in text


def _span_run(tmp_path: Path, path: str, stream: bool) -> tuple[list[str], dict[str, Any], str]:
    """A span opened in an internal round, then (rounds used up) a ``fold_span`` the client's
    shell refuses: (the upstream prompts, the session as JSON, the reply the client got)."""
    fake: Any
    if path == "/v1/chat/completions":
        fake = FakeUpstream()
        fake.raw(_chat_reply(SPAN, stream), _chat_reply(FOLD, stream), _chat_reply("ok", stream))
    else:
        fake = Paused()
        if path == "/v1/messages":
            fake.script += [([anthropic_text(t)], None) for t in (SPAN, FOLD, "ok")]
        else:
            fake.script += [([message(f"m{n}", t)], None) for n, t in enumerate((SPAN, FOLD, "ok"))]
    refused = "bash: fold_span: command not found"
    with ServerThread(fake.app) as up:
        cfg = ProxyConfig(upstream=f"{up.url}/v1", store=str(tmp_path / "s.db"), tokenizer="off", max_rounds=1, config=NOW)
        h = {"X-Refold-Session": "span", "authorization": "Bearer k"}
        start: list[dict[str, Any]] = [{"role": "user", "content": "task"}, {"role": "assistant", "content": FIRST},
                                       {"role": "user", "content": "a.py"}]
        with _client(cfg) as c:
            if path == "/v1/chat/completions":
                body: dict[str, Any] = {"model": "m", "messages": [SYSTEM, *start], "stream": stream}
                got = _chat_text(c.post(path, json=body, headers=h).text, stream)
                body["messages"] += [{"role": "assistant", "content": got}, {"role": "user", "content": refused}]
            elif path == "/v1/messages":
                body = {"model": "m", "max_tokens": 64, "system": SYSTEM["content"], "messages": start, "stream": stream}
                got = _anthropic_text(c.post(path, json=body, headers=h).text, stream)
                body["messages"] = [*start, {"role": "assistant", "content": got}, {"role": "user", "content": refused}]
            else:
                body = {"model": "m", "instructions": SYSTEM["content"], "input": start, "stream": stream}
                got = _responses_text(c.post(path, json=body, headers=h).text, stream)
                body["input"] = [*start, {"role": "assistant", "content": got}, {"role": "user", "content": refused}]
            assert c.post(path, json=body, headers=h).status_code == 200
            sess = c.get("/sessions/span", headers=h).json()
    reqs = fake.requests
    prompts = [json.dumps(q["body"]["messages"] if path == "/v1/chat/completions" else q) for q in reqs]
    return prompts, sess, got


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/messages", "/v1/responses"])
def test_a_refused_fold_span_is_never_applied(tmp_path: Path, path: str, stream: bool) -> None:
    prompts, sess, got = _span_run(tmp_path, path, stream)
    assert len(prompts) == 3 and got.endswith('fold_span "a.py defines parse; the bug is in b.py"\n```')
    assert "restore <step>" in prompts[0] and "restore <step>" not in prompts[1]
    assert [bool(s["internal"]) for s in sess["steps"]] == [False, True, False]
    # the history reads the refused step as the session stored it: no context command in it
    # (an applied fold_span would fold the span once the boundary passes it)
    opened, refused = (read_actions(s["reply"]) for s in sess["steps"][1:])
    assert [a.context.name for a in opened if a.context] == ["begin_span"]
    assert [a.command for a in refused] == ['fold_span "a.py defines parse; the bug is in b.py"']
    assert all(a.context is None for a in refused)

"""Custom (free-form) tool calls on chat completions: an upstream reply calling one reaches the
client as sent (was a 502), the client's echo of it is recorded (was a 400) and the upstream gets
it back in its own shape, also when rendered from the store after a restart."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from starlette.testclient import TestClient

from refold.config import DEFAULT
from refold.proxy import ProxyConfig, create_app
from refold.proxy.custom_calls import as_custom, as_function

from fake_upstream import FakeUpstream, ServerThread

SYSTEM = {"role": "system", "content": "You are a careful engineer."}
TOOLS = [
    {"type": "custom", "custom": {"name": "apply_patch", "description": "Apply a patch"}},
    {"type": "function", "function": {"name": "bash", "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}},
]
CALL = {"id": "call_p", "type": "custom", "custom": {"name": "apply_patch", "input": "*** Begin Patch\n*** End Patch"}}


def _completion(message: dict[str, Any]) -> dict[str, Any]:
    return {"id": "chatcmpl-x", "object": "chat.completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}]}


def test_as_function_and_back_is_the_identity() -> None:
    m = {"role": "assistant", "content": None, "tool_calls": [CALL, {"id": "b", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]}
    f = as_function(m)
    assert f["tool_calls"][0] == {"id": "call_p", "type": "custom", "function": {"name": "apply_patch", "arguments": CALL["custom"]["input"]}}
    assert as_custom(f) == m and as_custom(m) is m and as_function(f) is f


def test_a_custom_call_goes_through_and_comes_back_in_its_shape(tmp_path: Path) -> None:
    f = FakeUpstream()
    h = {"X-Refold-Session": "custom"}
    with ServerThread(f.app) as up:
        cfg = ProxyConfig(upstream=f"{up.url}/v1", store=str(tmp_path / "s.db"), tokenizer="off",
                          config=DEFAULT.override(["prompt.deferred=false"]))
        msgs: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": "fix it"}]
        with TestClient(create_app(cfg), base_url="http://127.0.0.1") as c:
            f.raw(_completion({"role": "assistant", "content": "PROGRESS: patch\nSTALE: -", "tool_calls": [CALL]}))
            r = c.post("/v1/chat/completions", json={"model": "m", "messages": msgs, "tools": TOOLS}, headers=h)
            assert r.status_code == 200, r.text
            reply = r.json()["choices"][0]["message"]
            assert reply["tool_calls"] == [CALL]  # as the upstream sent it
            msgs += [reply, {"role": "tool", "tool_call_id": "call_p", "content": "Done!"}]
            r = c.post("/v1/chat/completions", json={"model": "m", "messages": msgs, "tools": TOOLS}, headers=h)
            assert r.status_code == 200, r.text
            sent = [m for m in f.requests[-1]["body"]["messages"] if m.get("role") == "assistant"]
            assert sent[0]["tool_calls"] == [CALL]
            s = c.get("/sessions/custom").json()
            assert len(s["branches"]) == 1 and len(s["steps"]) == 1
        with TestClient(create_app(cfg), base_url="http://127.0.0.1") as c:  # a restart: rendered from the store
            r = c.post("/v1/chat/completions", json={"model": "m", "messages": msgs, "tools": TOOLS}, headers=h)
            assert r.status_code == 200, r.text
            sent = [m for m in f.requests[-1]["body"]["messages"] if m.get("role") == "assistant"]
            assert sent[0]["tool_calls"] == [CALL]


def test_a_malformed_custom_call_is_a_400_naming_it(tmp_path: Path) -> None:
    cfg = ProxyConfig(upstream="http://127.0.0.1:9/v1", store=str(tmp_path / "s.db"), tokenizer="off")
    bad = {"id": "c", "type": "custom", "custom": {"name": "apply_patch", "input": 3}}
    msgs = [SYSTEM, {"role": "user", "content": "x"}, {"role": "assistant", "content": None, "tool_calls": [bad]},
            {"role": "tool", "tool_call_id": "c", "content": "ok"}]
    with TestClient(create_app(cfg), base_url="http://127.0.0.1") as c:
        r = c.post("/v1/chat/completions", json={"model": "m", "messages": msgs})
        assert r.status_code == 400
        assert r.json()["error"]["param"] == "messages[2].tool_calls[0].custom.input"

"""Through ``refold serve`` (the real app, a recording upstream): a tool-calling client's
mid-session user message reaches the model whole in every later request, while the tool outputs
around it are masked and the step it follows is folded by a STALE mark."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI, Request

from refold.proxy import ProxyConfig, create_app
from refold.types import content_text
from test_proxy_default_savings import BASH_TOOL, RecordedUpstream

from fake_upstream import ServerThread

INSTRUCTION = "\n".join(f"{i}. Stop: use the v2 client in api/v2.py instead of the v1 endpoint, keep the signature." for i in range(1, 40))[:2000]


def _conversation(n: int, at: int) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent. Use the bash tool."},
        {"role": "user", "content": "The client in api/ fails on large uploads; fix it."},
    ]
    for i in range(1, n + 1):
        stale = str(at) if i == at + 2 else ""
        cid = f"call_{i}"
        msgs.append({"role": "assistant", "content": f"PROGRESS: reading module {i}\nSTALE: {stale}\nReading.",
                     "tool_calls": [{"id": cid, "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": f"cat api/mod_{i}.py"})}}]})
        msgs.append({"role": "tool", "tool_call_id": cid,
                     "content": "\n".join(f"    value_{i}_{k} = compute({k}, 'a line long enough to be worth masking')" for k in range(60))})
        if i == at:
            msgs.append({"role": "user", "content": INSTRUCTION})
    return msgs


def test_a_user_message_is_sent_whole_in_every_later_request(tmp_path: Path) -> None:
    messages = _conversation(26, 4)
    calls = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    upstream = RecordedUpstream([messages[i] for i in calls])
    with ServerThread(upstream.app) as up:
        cfg = ProxyConfig(upstream=f"{up.url}/v1", store=str(tmp_path / "s.db"), tokenizer="off")
        with ServerThread(create_app(cfg)) as px, httpx.Client(base_url=px.url, timeout=60) as client:
            for i in calls:
                r = client.post("/v1/chat/completions", json={"model": "m", "messages": messages[:i], "tools": [BASH_TOOL]})
                assert r.status_code == 200, r.text
    assert len(upstream.bodies) == len(calls)
    after = [b for i, b in zip(calls, upstream.bodies, strict=True) if INSTRUCTION in [m.get("content") for m in messages[:i]]]
    assert len(after) == len(calls) - 4
    for body in after:
        texts = [content_text(m.get("content")) for m in body["messages"]]
        assert sum(t.count(INSTRUCTION) for t in texts) == 1
    last = "\n".join(content_text(m.get("content")) for m in upstream.bodies[-1]["messages"])
    assert "Output of `cat api/mod_5.py` hidden" in last  # the outputs around it were masked ...
    assert "Message 4.2 of step 4 (to you, never hidden), kept whole while its step is folded" in last  # ... its step folded


def test_anthropic_text_beside_tool_results_is_sent_whole_in_every_later_request(tmp_path: Path) -> None:
    """Claude Code's form: the typed text rides in the user turn that carries the tool result."""
    system = [{"type": "text", "text": "You are Claude Code."}]
    messages: list[dict[str, Any]] = [{"role": "user", "content": "The client in api/ fails on large uploads; fix it."}]
    for i in range(1, 27):
        call = f"toolu_{i:03d}"
        stale = "4" if i == 6 else ""
        messages.append({"role": "assistant", "content": [
            {"type": "text", "text": f"PROGRESS: reading module {i}\nSTALE: {stale}\nReading."},
            {"type": "tool_use", "id": call, "name": "Bash", "input": {"command": f"cat api/mod_{i}.py"}},
        ]})
        blocks: list[dict[str, Any]] = [{"type": "tool_result", "tool_use_id": call, "content": "\n".join(
            f"    value_{i}_{k} = compute({k}, 'a line long enough to be worth masking')" for k in range(60))}]
        if i == 4:
            blocks.append({"type": "text", "text": INSTRUCTION})
        messages.append({"role": "user", "content": blocks})
    calls = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    bodies: list[dict[str, Any]] = []
    up = FastAPI()

    @up.post("/v1/messages")
    async def reply(request: Request) -> dict[str, Any]:
        bodies.append(await request.json())
        return {"id": "msg", "type": "message", "role": "assistant", "model": "m", "content": messages[calls[len(bodies) - 1]]["content"],
                "stop_reason": "tool_use", "stop_sequence": None, "usage": {"input_tokens": 1, "output_tokens": 1}}

    with ServerThread(up) as u:
        cfg = ProxyConfig(upstream=f"{u.url}/v1", store=str(tmp_path / "s.db"), tokenizer="off")
        with ServerThread(create_app(cfg)) as px, httpx.Client(base_url=px.url, timeout=60) as client:
            for i in calls:
                body = {"model": "m", "max_tokens": 1024, "system": system, "messages": messages[:i],
                        "tools": [{"name": "Bash", "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}}}]}
                r = client.post("/v1/messages", json=body, headers={"x-api-key": "k", "anthropic-version": "2023-06-01"})
                assert r.status_code == 200, r.text
    assert len(bodies) == len(calls)

    def texts(body: dict[str, Any]) -> str:
        out = []
        for m in body["messages"]:
            for b in m["content"] if isinstance(m["content"], list) else [{"type": "text", "text": m["content"]}]:
                out.append(b.get("text") or (b.get("content") if isinstance(b.get("content"), str) else json.dumps(b.get("content"))))
        return "\n".join(x for x in out if isinstance(x, str))

    for n, body in enumerate(bodies, start=1):
        assert texts(body).count(INSTRUCTION) == (1 if n > 4 else 0), n
    assert "Output of `cat api/mod_5.py` hidden" in texts(bodies[-1])
    assert "Message 4.2 of step 4 (to you, never hidden)" in texts(bodies[-1])


def test_responses_user_item_between_outputs_is_sent_whole_in_every_later_request(tmp_path: Path) -> None:
    """Codex's form: the typed message is an input item after a call's output."""
    items: list[dict[str, Any]] = [{"role": "user", "content": "The client in api/ fails on large uploads; fix it."}]
    starts = []
    for i in range(1, 27):
        call = f"call_{i:03d}"
        starts.append(len(items))
        stale = "4" if i == 6 else ""
        items.append({"type": "message", "role": "assistant", "id": f"msg_{i}", "status": "completed",
                      "content": [{"type": "output_text", "text": f"PROGRESS: reading module {i}\nSTALE: {stale}\nReading.", "annotations": []}]})
        items.append({"type": "function_call", "id": f"fc_{i}", "call_id": call, "name": "shell",
                      "arguments": json.dumps({"command": f"cat api/mod_{i}.py"}), "status": "completed"})
        items.append({"type": "function_call_output", "call_id": call, "output": "\n".join(
            f"    value_{i}_{k} = compute({k}, 'a line long enough to be worth masking')" for k in range(60))})
        if i == 4:
            items.append({"type": "message", "role": "user", "content": [{"type": "input_text", "text": INSTRUCTION}]})
    bodies: list[dict[str, Any]] = []
    up = FastAPI()

    @up.post("/v1/responses")
    async def reply(request: Request) -> dict[str, Any]:
        bodies.append(await request.json())
        at = starts[len(bodies) - 1]
        return {"id": f"resp_{len(bodies)}", "object": "response", "status": "completed", "model": "m",
                "output": items[at : at + 2], "usage": {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2}}

    shell = {"type": "function", "name": "shell", "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}
    with ServerThread(up) as u:
        cfg = ProxyConfig(upstream=f"{u.url}/v1", store=str(tmp_path / "s.db"), tokenizer="off")
        with ServerThread(create_app(cfg)) as px, httpx.Client(base_url=px.url, timeout=60) as client:
            for at in starts:
                body = {"model": "m", "instructions": "You are Codex.", "input": items[:at], "tools": [shell], "store": False}
                r = client.post("/v1/responses", json=body, headers={"authorization": "Bearer k"})
                assert r.status_code == 200, r.text
    assert len(bodies) == len(starts)
    for n, body in enumerate(bodies, start=1):
        assert json.dumps(body["input"]).count(json.dumps(INSTRUCTION)[1:-1]) == (1 if n > 4 else 0), n
    last = json.dumps(bodies[-1]["input"])
    assert "Output of `cat api/mod_5.py` hidden" in last
    assert "Message 4.2 of step 4 (to you, never hidden)" in last

"""The packaged real run replayed through ``/v1/messages`` with default flags is sent fewer tokens
than its plain history (the Anthropic surface of test_proxy_default_savings).

The client is the recorded agent as a Claude-Code-like tool caller (a ``Bash`` tool, one
``tool_use`` per reply, outputs as ``tool_result`` blocks); before call t+1 it sends the history up
to step t, and the upstream answers with the reply recorded for that call. Both sides are measured
in Qwen3.6 tokens over the same JSON fields (system, messages, tools)."""

from __future__ import annotations

import json
import threading
from importlib import resources
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI, Request

from refold.history import History
from refold.loaders import load
from refold.proxy import ProxyConfig, create_app
from refold.tokens import get_tokenizer

from fake_upstream import ServerThread

DEMO = Path(str(resources.files("refold") / "data" / "django__django-11477.traj.json.gz"))
BASH = {
    "name": "Bash",
    "description": "Run a shell command.",
    "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
}


def as_anthropic(h: History) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(system blocks, messages) of the run as a tool-calling Messages client would send them."""
    system = [{"type": "text", "text": str(m["content"])} for m in h.prefix if m["role"] == "system"]
    messages: list[dict[str, Any]] = [{"role": "user", "content": str(m["content"])} for m in h.prefix if m["role"] == "user"]
    for s in h.steps:
        call = f"toolu_{s.index:03d}"
        text = s.reply_text.split("```")[0].strip() or "Next."
        command = s.actions[0].command if s.actions else "true"
        messages.append({"role": "assistant", "content": [
            {"type": "text", "text": text}, {"type": "tool_use", "id": call, "name": "Bash", "input": {"command": command}},
        ]})
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": call, "content": o.get("content") or ""} for o in s.observations[:1]
        ]})
    return system, messages


def tokens(body: dict[str, Any]) -> int:
    tok = get_tokenizer("qwen3.6")
    return len(tok.encode(json.dumps({k: body.get(k) for k in ("system", "messages", "tools")}, ensure_ascii=False)))


def test_default_serve_sends_fewer_tokens_than_the_plain_history(tmp_path: Path) -> None:
    system, messages = as_anthropic(load(DEMO))
    calls = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    sent_bodies: list[dict[str, Any]] = []
    lock = threading.Lock()
    up = FastAPI()

    @up.post("/v1/messages")
    async def reply(request: Request) -> dict[str, Any]:
        body = await request.json()
        with lock:
            sent_bodies.append(body)
            recorded = messages[calls[len(sent_bodies) - 1]]
        return {"id": "msg", "type": "message", "role": "assistant", "model": "m", "content": recorded["content"],
                "stop_reason": "tool_use", "stop_sequence": None, "usage": {"input_tokens": 1, "output_tokens": 1}}

    plain = 0
    with ServerThread(up) as u:
        cfg = ProxyConfig(upstream=f"{u.url}/v1", store=str(tmp_path / "s.db"), tokenizer="off")
        with ServerThread(create_app(cfg)) as px, httpx.Client(base_url=px.url, timeout=60) as client:
            for i in calls:
                body = {"model": "m", "max_tokens": 1024, "system": system, "messages": messages[:i], "tools": [BASH]}
                r = client.post("/v1/messages", json=body, headers={"x-api-key": "k", "anthropic-version": "2023-06-01"})
                assert r.status_code == 200, r.text
                assert r.json()["content"] == messages[i]["content"]
                plain += tokens(body)
    assert len(sent_bodies) == len(calls)  # no internal rounds
    sent = sum(tokens(b) for b in sent_bodies)
    print(f"anthropic: plain {plain:,} tokens, through refold serve {sent:,} ({sent / plain - 1:+.1%})")
    assert sent < plain

"""A real recorded run replayed through ``refold serve`` with default flags is sent fewer tokens
than the plain history, in text-action form and in tool-call form (issue: fold only when it pays).

The client is the recorded agent: before call t+1 it sends its full message list (the history up to
step t); the upstream answers with the reply the model recorded for that call. What the upstream
receives is measured in Qwen3.6 tokens (messages and tool schemas) against what the client sent.
"""

from __future__ import annotations

import json
import threading
from importlib import resources
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request

from refold.history import History
from refold.loaders import load
from refold.proxy import ProxyConfig, create_app
from refold.tokens import get_tokenizer

from fake_upstream import ServerThread

DEMO = Path(str(resources.files("refold") / "data" / "django__django-11477.traj.json.gz"))
BASH_TOOL = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": "Run a shell command.",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
    },
}


def as_tool_calls(h: History) -> list[dict[str, Any]]:
    """The same real run as a tool-calling agent would have recorded it."""
    out = [dict(m) for m in h.prefix]
    for s in h.steps:
        command = s.actions[0].command if s.actions else ""
        call_id = f"call_{s.index}"
        out.append({"role": "assistant", "content": s.reply_text.split("```")[0].rstrip(),
                    "tool_calls": [{"id": call_id, "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": command})}}]})
        out += [{"role": "tool", "tool_call_id": call_id, "content": o.get("content")} for o in s.observations]
    return out


class RecordedUpstream:
    """Answers the n-th request with the n-th recorded assistant message; keeps what it was sent."""

    def __init__(self, replies: list[dict[str, Any]]) -> None:
        self.replies = replies
        self.bodies: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self.app = FastAPI()

        @self.app.post("/v1/chat/completions")
        async def chat(request: Request) -> dict[str, Any]:
            body = await request.json()
            with self._lock:
                self.bodies.append(body)
                reply = self.replies[len(self.bodies) - 1]
            message = {k: reply[k] for k in ("role", "content", "tool_calls") if k in reply}
            return {"id": "x", "object": "chat.completion", "model": "m", "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}


def request_tokens(messages: list[dict[str, Any]], tools: list[Any] | None) -> int:
    tok = get_tokenizer("qwen3.6")
    text = "".join(json.dumps({k: m.get(k) for k in ("role", "content", "tool_calls", "tool_call_id")}, ensure_ascii=False) for m in messages)
    return len(tok.encode(text + (json.dumps(tools) if tools else "")))


@pytest.mark.parametrize("form", ["text", "tool-calls"])
def test_default_serve_sends_fewer_tokens_than_the_plain_history(tmp_path: Path, form: str) -> None:
    h = load(DEMO)
    messages = h.messages() if form == "text" else as_tool_calls(h)
    messages = [{k: m[k] for k in ("role", "content", "tool_calls", "tool_call_id") if k in m} for m in messages]
    calls = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    tools = [BASH_TOOL] if form == "tool-calls" else None
    upstream = RecordedUpstream([messages[i] for i in calls])
    plain = 0
    with ServerThread(upstream.app) as up:
        cfg = ProxyConfig(upstream=f"{up.url}/v1", store=str(tmp_path / "s.db"), tokenizer="off")
        with ServerThread(create_app(cfg)) as px, httpx.Client(base_url=px.url, timeout=60) as client:
            for i in calls:
                body: dict[str, Any] = {"model": "m", "messages": messages[:i]}
                if tools:
                    body["tools"] = tools
                r = client.post("/v1/chat/completions", json=body)
                assert r.status_code == 200, r.text
                plain += request_tokens(messages[:i], tools)
    assert len(upstream.bodies) == len(calls)  # no internal rounds: the recorded agent issues no context commands
    sent = sum(request_tokens(b["messages"], b.get("tools")) for b in upstream.bodies)
    print(f"{form}: plain {plain:,} tokens, through refold serve {sent:,} ({sent / plain - 1:+.1%})")
    assert sent < plain

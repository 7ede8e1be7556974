"""The packaged real run replayed through ``/v1/responses`` with default flags is sent fewer tokens
than its plain history (the Responses surface of test_proxy_default_savings).

The client is the recorded agent as a Responses tool caller (``instructions``, a ``shell``
function tool, each reply an assistant ``message`` and a ``function_call``, each output a
``function_call_output``); before call t+1 it sends every item up to step t, and the upstream
answers with the items recorded for that call. Both sides are measured in Qwen3.6 tokens over the
same JSON fields (instructions, input, tools)."""

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
SHELL = {
    "type": "function",
    "name": "shell",
    "description": "Run a shell command.",
    "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
}


def as_responses(h: History) -> tuple[str, list[dict[str, Any]], list[int]]:
    """(instructions, every input item, where each recorded reply starts) of the run."""
    instructions = "".join(str(m["content"]) for m in h.prefix if m["role"] == "system")
    items: list[dict[str, Any]] = [{"role": "user", "content": str(m["content"])} for m in h.prefix if m["role"] == "user"]
    starts = []
    for s in h.steps:
        call = f"call_{s.index:03d}"
        starts.append(len(items))
        text = s.reply_text.split("```")[0].strip() or "Next."
        command = s.actions[0].command if s.actions else "true"
        items.append({"type": "message", "role": "assistant", "id": f"msg_{s.index}", "status": "completed",
                      "content": [{"type": "output_text", "text": text, "annotations": []}]})
        items.append({"type": "function_call", "id": f"fc_{s.index}", "call_id": call, "name": "shell",
                      "arguments": json.dumps({"command": command}), "status": "completed"})
        items += [{"type": "function_call_output", "call_id": call, "output": o.get("content") or ""} for o in s.observations[:1]]
    return instructions, items, starts


def tokens(body: dict[str, Any]) -> int:
    tok = get_tokenizer("qwen3.6")
    return len(tok.encode(json.dumps({k: body.get(k) for k in ("instructions", "input", "tools")}, ensure_ascii=False)))


def test_default_serve_sends_fewer_tokens_than_the_plain_history(tmp_path: Path) -> None:
    instructions, items, starts = as_responses(load(DEMO))
    sent_bodies: list[dict[str, Any]] = []
    lock = threading.Lock()
    up = FastAPI()

    @up.post("/v1/responses")
    async def reply(request: Request) -> dict[str, Any]:
        body = await request.json()
        with lock:
            sent_bodies.append(body)
            at = starts[len(sent_bodies) - 1]
        return {"id": f"resp_{len(sent_bodies)}", "object": "response", "status": "completed", "model": "m",
                "output": items[at : at + 2], "usage": {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2}}

    plain = 0
    with ServerThread(up) as u:
        cfg = ProxyConfig(upstream=f"{u.url}/v1", store=str(tmp_path / "s.db"), tokenizer="off")
        with ServerThread(create_app(cfg)) as px, httpx.Client(base_url=px.url, timeout=60) as client:
            for at in starts:
                body = {"model": "m", "instructions": instructions, "input": items[:at], "tools": [SHELL], "store": False}
                r = client.post("/v1/responses", json=body, headers={"authorization": "Bearer k"})
                assert r.status_code == 200, r.text
                assert r.json()["output"] == items[at : at + 2]
                plain += tokens(body)
    assert len(sent_bodies) == len(starts)  # no internal rounds
    sent = sum(tokens(b) for b in sent_bodies)
    print(f"responses: plain {plain:,} tokens, through refold serve {sent:,} ({sent / plain - 1:+.1%})")
    assert sent < plain

"""Through ``refold serve`` (the real app, a recording upstream): a tool-calling client's
mid-session user message reaches the model whole in every later request, while the tool outputs
around it are masked and the step it follows is folded by a STALE mark."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx

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

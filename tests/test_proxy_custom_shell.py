"""A custom (free-form) tool named like a shell (``{"type": "custom", "name": "bash"}``): its text
input is the command, so ``restore 1`` given to it is a context command the proxy answers, on the
Responses API and on chat completions, as through a function tool's ``{"command": ...}``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from refold.config import DEFAULT
from refold.context.tools import offer
from refold.proxy.commands import context_calls
from refold.proxy.responses_wire import reply_message
from test_proxy_responses import message
from test_proxy_surface_stream import Paused, paused_proxy

CUSTOM_BASH = {"type": "custom", "name": "bash", "description": "Run a shell command (the input is the command)."}


def custom(call_id: str, text: str) -> dict[str, Any]:
    return {"id": "ctc_" + call_id, "type": "custom_tool_call", "call_id": call_id, "name": "bash", "input": text,
            "status": "completed"}


def test_a_custom_bash_calls_input_is_its_command() -> None:
    msg = reply_message([custom("c1", "restore 1")])
    _, rec = offer(DEFAULT, [{"type": "function", "function": {"name": "bash"}}])
    found = context_calls(msg, rec)
    assert found is not None and found[0].context is not None and found[0].context.name == "restore"
    assert context_calls(reply_message([custom("c2", "ls -la")]), rec) is None
    chat = {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c3", "type": "custom", "function": {"name": "bash", "arguments": "restore 2"}}]}
    got = context_calls(chat, rec)
    assert got is not None and got[0].context is not None and got[0].context.argument == "2"


def test_responses_a_restore_given_to_a_custom_bash_is_answered(tmp_path: Path) -> None:
    with paused_proxy(tmp_path) as (fake, url):
        _run(fake, url)


def _run(fake: Paused, url: str) -> None:
    fake.script += [([message("m0", "Looking."), custom("c0", "cat a.py")], None),
                    ([custom("c1", "restore 1")], None), ([message("m2", "done")], None)]
    h = {"authorization": "Bearer k", "X-Refold-Session": "custom-bash"}
    with httpx.Client(base_url=url, timeout=30, headers=h) as c:
        r0 = c.post("/v1/responses", json={"model": "m", "tools": [CUSTOM_BASH], "input": "fix it"})
        assert r0.status_code == 200
        items = [{"role": "user", "content": "fix it"}, *r0.json()["output"],
                 {"type": "custom_tool_call_output", "call_id": "c0", "output": "x = 1\n" * 20}]
        r1 = c.post("/v1/responses", json={"model": "m", "tools": [CUSTOM_BASH], "input": items})
        assert r1.status_code == 200
        assert [o["type"] for o in r1.json()["output"]] == ["message"]  # the restore never reached the client
    assert len(fake.requests) == 3
    outs = {i["call_id"]: i["output"] for i in fake.requests[2]["input"] if i.get("type") == "custom_tool_call_output"}
    assert "Step 1 restored" in str(outs["c1"])
    kinds = {i["call_id"]: i["type"] for i in fake.requests[2]["input"] if i.get("call_id")}
    assert kinds["c1"] == "custom_tool_call_output"  # the answer to a custom call is in its shape

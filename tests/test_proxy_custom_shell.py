"""Shell forms of a context command: a custom (free-form) tool named like a shell (``{"type":
"custom", "name": "bash"}``), whose text input is the command, so ``restore 1`` given to it is
answered on the Responses API and on chat completions; and ``ls; restore 1``, a restore after
another command, answered "Not run" as ``restore 1 && ls`` is (in a stream whose client has
its first part, split: ``test_proxy_stream_compound``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient

from refold.config import DEFAULT
from refold.context.tools import offer
from refold.proxy import ProxyConfig, create_app
from refold.proxy.commands import context_calls
from refold.proxy.responses_wire import KEY
from refold.responses_items import reply_message
from test_proxy_held_restart import _sse_message
from test_proxy_resend import BASH, SYSTEM, Client, Upstream, _first_turn, reply
from test_proxy_responses import message
from test_proxy_surface_stream import Paused, paused_proxy

from fake_upstream import Scripted, ServerThread, call

CUSTOM_BASH = {"type": "custom", "name": "bash", "description": "Run a shell command (the input is the command)."}


def custom(call_id: str, text: str) -> dict[str, Any]:
    return {"id": "ctc_" + call_id, "type": "custom_tool_call", "call_id": call_id, "name": "bash", "input": text,
            "status": "completed"}


def test_a_custom_bash_calls_input_is_its_command() -> None:
    msg = reply_message([custom("c1", "restore 1")], KEY)
    _, rec = offer(DEFAULT, [{"type": "function", "function": {"name": "bash"}}])
    found = context_calls(msg, rec)
    assert found is not None and found[0].context is not None and found[0].context.name == "restore"
    assert context_calls(reply_message([custom("c2", "ls -la")], KEY), rec) is None
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


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(("command", "named"), [("ls; restore 1", "`ls`"), ("for f in a b; do restore 1; done", "`for f in a b; do \u2026; done`")])
def test_chat_a_restore_after_another_command_is_answered_not_run(tmp_path: Path, stream: bool, command: str, named: str) -> None:
    """``ls; restore 1`` in the shell tool (or a restore inside a loop), whole when it is decided
    (not streamed, or streamed whole in its first delta): answered "Not run" naming both parts,
    never sent to the client's shell (which would say ``restore: command not found``), as
    ``restore 1 && ls`` is."""
    up = Upstream()
    up.script += [reply("c0", "cat a.py"), reply("c1", command), reply("c2", "ls")]
    with ServerThread(up.app) as srv, Client(srv.url, str(tmp_path / "s.db"), f"after-{stream}", stream, False) as c:
        msgs = _first_turn(up, c)
        status, got = c.post(msgs)
        assert status == 200 and [t["id"] for t in got["tool_calls"]] == ["c2"]
    answer = [m for m in up.requests[2] if m.get("tool_call_id") == "c1"]
    assert len(answer) == 1 and "Not run" in answer[0]["content"] and named in answer[0]["content"]


def test_chat_streamed_a_call_released_by_its_first_word_is_split() -> None:
    """Streamed in pieces, ``ls; restore 1`` is released by its first word (``ls``) and held
    from its separator: the client runs ``ls`` alone (the restore is answered before the next
    upstream call, ``test_proxy_stream_compound``)."""
    s = Scripted()
    s.replies.append(call(0, "bash", json.dumps({"command": "ls; restore 1"}), "c1"))
    with ServerThread(s.app) as srv:
        cfg = ProxyConfig(upstream=f"{srv.url}/v1", store=":memory:", tokenizer="off")
        with TestClient(create_app(cfg), base_url="http://127.0.0.1") as c:
            body = {"model": "m", "messages": [SYSTEM, {"role": "user", "content": "t"}], "tools": [BASH], "stream": True}
            r = c.post("/v1/chat/completions", json=body, headers={"X-Refold-Session": "released"})
    got = _sse_message(r.text)
    assert json.loads(got["tool_calls"][0]["function"]["arguments"]) == {"command": "ls"}
    assert len(s.requests) == 1  # no internal round: the client has a call to run

"""An agent with a tool of its own named like a context command (its own ``restore``): the command
is the agent's. The proxy offers no tool of that name, answers no command of that name (a call of
it, or the same words typed into the shell, reach the client), and renders the prompt offering
none of that command's family: with its own ``restore`` no "restore <step>" in the protocol and no
masking, so nothing is hidden that the agent could not bring back (``context.tools.clashes``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from refold.config import DEFAULT
from refold.context.tools import clashes, offer
from refold.proxy import ProxyConfig, create_app
from test_proxy_held_restart import _sse_message
from test_proxy_resend import BASH, SYSTEM, Upstream, reply

from fake_upstream import ServerThread

NOW = DEFAULT.override(["prompt.deferred=false", "policy.mask_after=1", "boundary.rule=fixed"])  # protocol, masks early


def _tool(name: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "parameters": {"type": "object", "properties": {
        "steps": {"type": "string"}}}}}


def _history() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": "fix the parser"}]
    for i in range(10):
        out += [reply(f"c{i}", f"cat f{i}.py"), {"role": "tool", "tool_call_id": f"c{i}", "content": f"line {i}\n" * 200}]
    return out


def _post(c: TestClient, msgs: list[dict[str, Any]], tools: list[dict[str, Any]], stream: bool, name: str) -> dict[str, Any]:
    body = {"model": "m", "messages": msgs, "tools": tools, "stream": stream}
    r = c.post("/v1/chat/completions", json=body, headers={"X-Refold-Session": name})
    assert r.status_code == 200
    return _sse_message(r.text) if stream else dict(r.json()["choices"][0]["message"])


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("command", ["restore 1", "own"])
def test_an_agents_own_restore_tool_owns_the_name(tmp_path: Path, stream: bool, command: str) -> None:
    up = Upstream()
    own = _tool("restore")
    if command == "own":  # a call of the agent's restore tool
        asked = {"role": "assistant", "content": "", "tool_calls": [
            {"id": "r1", "type": "function", "function": {"name": "restore", "arguments": json.dumps({"steps": "1"})}}]}
    else:  # the same words typed into its shell
        asked = reply("r1", command)
    up.script += [asked, reply("x", "ls")]
    with ServerThread(up.app) as srv:
        cfg = ProxyConfig(upstream=f"{srv.url}/v1", store=str(tmp_path / "s.db"), tokenizer="off", config=NOW,
                          context_tools_beside_shell=True)
        with TestClient(create_app(cfg), base_url="http://127.0.0.1") as c:
            got = _post(c, _history(), [BASH, own], stream, f"own-{stream}-{command[:3]}")
            assert [t["id"] for t in got["tool_calls"]] == ["r1"]  # the agent's to run: the proxy answered nothing
            _post(c, _history(), [BASH], stream, f"control-{stream}-{command[:3]}")  # no tool of its own: offered
    sent, control = up.bodies
    names = [t["function"]["name"] for t in sent["tools"]]
    assert names.count("restore") == 1 and sent["tools"][1] == own and "expand" not in names
    prompt = json.dumps(sent["messages"])
    assert "restore <step>" not in prompt and "`restore" not in prompt  # no command offered, in any form
    assert "hidden" not in prompt and "cannot be restored" not in prompt  # nothing hidden it cannot bring back
    assert json.dumps("line 0\n" * 199)[1:-1] in prompt  # the oldest output whole: masking is off, not lossy
    assert "restore <step>" in json.dumps(control["messages"])  # the same history, offered, says it
    assert "`restore 1` shows it" in json.dumps(control["messages"])
    assert "restore" in [t["function"]["name"] for t in control["tools"]]


def test_clashes_switch_off_a_commands_family() -> None:
    def tools(*names: str) -> list[dict[str, Any]]:
        return [_tool(n) for n in names]

    assert clashes(DEFAULT, tools("bash")) == ()
    plain = ("ledger.enabled=false", "policy.mask_after=null", "policy.reversible=false", "spans.enabled=false")
    assert clashes(DEFAULT, tools("bash", "restore")) == plain == clashes(DEFAULT, tools("expand"))
    assert clashes(DEFAULT.override(["ledger.enabled=true"]), tools("fold")) == ("ledger.enabled=false",)
    assert clashes(DEFAULT, tools("fold_span")) == ("spans.enabled=false",)
    off = DEFAULT.override(list(plain))
    assert clashes(off, tools("restore")) == ()  # already off
    added, rec = offer(DEFAULT, tools("bash", "restore"))
    assert "restore" not in rec.shell and "restore" not in rec.functions
    assert not [t for t in added if t["function"]["name"] in ("restore", "expand")]
    assert rec.command("bash", "restore 1") is None and rec.command("restore", '{"steps": "1"}') is None
    _, other = offer(DEFAULT, tools("bash"))
    assert other.command("bash", "restore 1") is not None

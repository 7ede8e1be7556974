"""The openai SDK and litellm as real clients of the proxy, against a scripted fake upstream."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from refold.mechanisms.ledger import LedgerPolicy
from refold.mechanisms.spans import SpanPolicy
from refold.policy import Policy
from refold.proxy import ProxyConfig, create_app

from builders import seed_config
from fake_upstream import FakeUpstream, ServerThread, collect_stream

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "run a shell command",
            "parameters": {
                "type": "object",
                "properties": {"command": {"type": "string"}},
                "required": ["command"],
            },
        },
    }
]
SYSTEM = {"role": "system", "content": "You are a coding agent."}


class Env:
    def __init__(self, upstream: FakeUpstream, url: str) -> None:
        self.upstream = upstream
        self.url = url

    def client(self, key: str = "sk-a") -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key=key, max_retries=0)


@pytest.fixture()
def env(tmp_path: Path) -> Iterator[Env]:
    fake = FakeUpstream()
    with ServerThread(fake.app) as up:
        config = seed_config(Policy(k=2), spans=SpanPolicy(prompt=True), ledger=LedgerPolicy(prompt=True))
        cfg = ProxyConfig(context_tools_beside_shell=True, upstream=f"{up.url}/v1", store=str(tmp_path / "s.db"), tokenizer="chars4", config=config)
        with ServerThread(create_app(cfg)) as px:
            yield Env(fake, px.url)


def run_tool_agent(
    client: openai.OpenAI, task: str, turns: int, *, stream: bool = False, session: str | None = None
) -> list[Any]:
    """A minimal tool-calling agent loop: the client keeps its own message list, as agents do."""
    messages: list[Any] = [SYSTEM, {"role": "user", "content": task}]
    headers = {"X-Refold-Session": session} if session else None
    for i in range(turns):
        if stream:
            msg: Any = collect_stream(
                client.chat.completions.create(
                    model="m", messages=messages, tools=TOOLS, stream=True, extra_headers=headers
                )
            )
        else:
            resp = client.chat.completions.create(
                model="m", messages=messages, tools=TOOLS, extra_headers=headers
            )
            msg = resp.choices[0].message
        messages.append(msg)
        calls_ = msg["tool_calls"] if isinstance(msg, dict) else msg.tool_calls
        for c in calls_:
            cid = c["id"] if isinstance(c, dict) else c.id
            args = c["function"]["arguments"] if isinstance(c, dict) else c.function.arguments
            command = json.loads(args)["command"]
            messages.append(
                {"role": "tool", "tool_call_id": cid, "content": f"output of {command}\n" + f"line {i}\n" * 5}
            )
    return messages


def test_openai_sdk_tool_loop_records_every_turn(env: Env) -> None:
    client = env.client()
    messages = run_tool_agent(client, "fix the bug", 6, session="s1")
    assert [m.tool_calls[0].function.name for m in messages if not isinstance(m, dict)] == ["bash"] * 6
    last = env.upstream.requests[-1]["body"]
    # the protocol section was added to the system prompt, outputs are labeled
    assert "## Context management" in last["messages"][0]["content"]
    assert any(str(m.get("content", "")).startswith("[step 5]") for m in last["messages"])
    assert [t["function"]["name"] for t in last["tools"]] == [
        "bash",
        "restore",
        "begin_span",
        "fold_span",
        "fold",
        "drop",
        "expand",
        "search_ledger",
    ]
    assert "## Folding an investigation" in last["messages"][0]["content"]
    assert "## The ledger of outputs" in last["messages"][0]["content"]
    view = httpx.get(f"{env.url}/sessions/s1", headers={"Authorization": "Bearer sk-a"}).json()
    assert len(view["steps"]) == 5  # the 6th reply has no outputs yet
    assert view["steps"][0]["actions"] == ["echo turn-1"]
    # the client's key is forwarded upstream when the proxy has no tokens of its own
    assert env.upstream.requests[-1]["auth"] == "Bearer sk-a"


def test_streaming_matches_non_streaming(env: Env) -> None:
    a = run_tool_agent(env.client(), "task A", 4, stream=True, session="st")
    b = run_tool_agent(env.client(), "task A", 4, stream=False, session="nst")
    calls_a = [
        m["tool_calls"][0]["function"]["arguments"] for m in a if isinstance(m, dict) and m.get("tool_calls")
    ]
    calls_b = [m.tool_calls[0].function.arguments for m in b if not isinstance(m, dict)]
    assert calls_a == calls_b and len(calls_a) == 4
    # the proxy asked upstream for usage but the client did not: no usage-only chunk reached it
    stream = env.client().chat.completions.create(
        model="m", messages=[SYSTEM, {"role": "user", "content": "x"}], stream=True
    )
    assert all(ch.choices for ch in stream)


def test_restore_is_answered_inside_the_proxy(env: Env) -> None:
    client = env.client()
    messages = run_tool_agent(client, "work", 4, session="r")
    messages.append({"role": "user", "content": "RESTORE:2 then go on"})
    resp = client.chat.completions.create(
        model="m", messages=messages, tools=TOOLS, extra_headers={"X-Refold-Session": "r"}
    )
    msg = resp.choices[0].message
    assert msg.tool_calls[0].function.name == "bash"  # the client never sees the restore call
    bodies = [r["body"] for r in env.upstream.requests]
    restore_call = bodies[-2]["messages"]
    final = bodies[-1]["messages"]
    assert restore_call[-1]["content"].endswith("RESTORE:2 then go on")
    answer = final[-1]
    assert answer["role"] == "tool" and "Step 2 restored from history" in answer["content"]
    assert "output of echo turn-2" in answer["content"]
    view = httpx.get(f"{env.url}/sessions/r", headers={"Authorization": "Bearer sk-a"}).json()
    internal = [s for s in view["steps"] if s["internal"]]
    assert len(internal) == 1 and internal[0]["restore_of"] == [2]
    # the client's next turn continues after the internal step, numbering stays consistent
    messages.append(msg)
    messages.append({"role": "tool", "tool_call_id": msg.tool_calls[0].id, "content": "done"})
    client.chat.completions.create(
        model="m", messages=messages, tools=TOOLS, extra_headers={"X-Refold-Session": "r"}
    )
    view = httpx.get(f"{env.url}/sessions/r", headers={"Authorization": "Bearer sk-a"}).json()
    assert [s["internal"] for s in view["steps"]] == [False] * 4 + [True, False]
    metrics = httpx.get(f"{env.url}/metrics").text
    assert "refold_restores_total 1" in metrics and "refold_internal_rounds_total 1" in metrics


def test_restore_as_shell_command_without_advertised_tool(tmp_path: Path) -> None:
    fake = FakeUpstream()
    with ServerThread(fake.app) as up:
        cfg = ProxyConfig(
            upstream=f"{up.url}/v1", store=str(tmp_path / "s.db"), context_tools=False, tokenizer="off"
        )
        with ServerThread(create_app(cfg)) as px:
            client = openai.OpenAI(base_url=f"{px.url}/v1", api_key="k", max_retries=0)
            messages = run_tool_agent(client, "work", 3)
            messages.append({"role": "user", "content": "RESTORE:1"})
            resp = client.chat.completions.create(model="m", messages=messages, tools=TOOLS)
            assert (
                json.loads(resp.choices[0].message.tool_calls[0].function.arguments)["command"]
                == "echo turn-5"
            )  # the internal round was call 4
            assert "restore" not in {t["function"]["name"] for t in fake.requests[-1]["body"]["tools"]}
            assert "Step 1 restored" in fake.requests[-1]["body"]["messages"][-1]["content"]


def test_text_agent_restore_in_bash_block(env: Env) -> None:
    client = env.client()
    messages: list[Any] = [SYSTEM, {"role": "user", "content": "text task"}]
    for i in range(3):
        r = client.chat.completions.create(model="m", messages=messages)
        messages += [
            {"role": "assistant", "content": r.choices[0].message.content},
            {"role": "user", "content": f"out {i}"},
        ]
    messages[-1]["content"] += " RESTORE:1"
    r = client.chat.completions.create(model="m", messages=messages)
    assert "echo turn-5" in (r.choices[0].message.content or "")
    assert "Step 1 restored" in env.upstream.requests[-1]["body"]["messages"][-1]["content"]


def test_rewritten_turn_starts_a_branch_and_loses_nothing(env: Env) -> None:
    client = env.client()
    messages = run_tool_agent(client, "branchy", 4, session="b")
    headers = {"Authorization": "Bearer sk-a"}
    before = httpx.get(f"{env.url}/sessions/b", headers=headers).json()
    edited = [dict(m) if isinstance(m, dict) else m.model_dump(exclude_none=True) for m in messages]
    edited[3]["content"] = "a different output for step 1"  # rewrite the first tool output
    client.chat.completions.create(
        model="m", messages=edited, tools=TOOLS, extra_headers={"X-Refold-Session": "b"}
    )
    after = httpx.get(f"{env.url}/sessions/b", headers=headers).json()
    assert after["head"] != before["head"]
    heads = {b["head"] for b in after["branches"]}
    assert before["head"] in heads and after["head"] in heads  # the old branch is kept
    assert after["steps"][0]["observations"][0]["content"] == "a different output for step 1"
    # going back to the original conversation continues the original branch, not a third one
    original = [dict(m) if isinstance(m, dict) else m.model_dump(exclude_none=True) for m in messages]
    client.chat.completions.create(
        model="m", messages=original, tools=TOOLS, extra_headers={"X-Refold-Session": "b"}
    )
    again = httpx.get(f"{env.url}/sessions/b", headers=headers).json()
    assert len(again["branches"]) == 2 and after["head"] in {b["head"] for b in again["branches"]}
    assert [s["digest"] for s in again["steps"][:3]] == [s["digest"] for s in before["steps"]]
    assert len(again["steps"]) == 4  # the original branch grew by the turn the client sent


def test_derived_sessions_and_isolation_per_key(env: Env) -> None:
    run_tool_agent(env.client("sk-a"), "same task", 3)
    run_tool_agent(env.client("sk-b"), "same task", 3)
    a = httpx.get(f"{env.url}/sessions", headers={"Authorization": "Bearer sk-a"}).json()["sessions"]
    b = httpx.get(f"{env.url}/sessions", headers={"Authorization": "Bearer sk-b"}).json()["sessions"]
    assert len(a) == 1 and len(b) == 1 and a[0]["id"] != b[0]["id"]  # the key is part of the derived id
    for key in ("sk-b", "sk-c"):  # another key cannot read (or restore from) a's session
        r = httpx.get(f"{env.url}/sessions/{a[0]['id']}", headers={"Authorization": f"Bearer {key}"})
        assert r.status_code == 404 and r.json()["error"]["code"] == "session_not_found"
    # even under an explicit shared name, each key gets its own session
    run_tool_agent(env.client("sk-a"), "secret A", 3, session="shared")
    run_tool_agent(env.client("sk-b"), "RESTORE:1", 1, session="shared")
    b_view = httpx.get(f"{env.url}/sessions/shared", headers={"Authorization": "Bearer sk-b"}).json()
    assert "secret A" not in json.dumps(b_view)
    restore_answer = env.upstream.requests[-1]["body"]["messages"][-1]["content"]
    assert "there are no earlier steps" in restore_answer


def test_models_passthrough_and_metrics(env: Env) -> None:
    models = env.client().models.list()
    assert [m.id for m in models.data] == ["fake-model"]
    run_tool_agent(env.client(), "metrics task", 5)
    text = httpx.get(f"{env.url}/metrics").text
    values = {
        ln.split()[0]: float(ln.split()[1]) for ln in text.splitlines() if ln and not ln.startswith("#")
    }
    assert values["refold_upstream_calls_total"] == 5
    assert values["refold_upstream_cached_tokens_total"] > 0
    assert values["refold_render_ms_count"] == 5
    assert values['refold_requests_total{status="200"}'] == 5
    assert values["refold_turns_recorded_total"] == 4


def test_litellm_client(env: Env) -> None:
    litellm = pytest.importorskip("litellm")
    messages: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": "litellm task"}]
    for _ in range(3):
        resp = litellm.completion(
            model="openai/fake-model",
            messages=messages,
            tools=TOOLS,
            api_base=f"{env.url}/v1",
            api_key="sk-l",
            num_retries=0,
        )
        msg = resp.choices[0].message
        messages.append(msg.model_dump() if hasattr(msg, "model_dump") else dict(msg))
        call = msg.tool_calls[0]
        messages.append(
            {"role": "tool", "tool_call_id": call.id, "content": f"ran {call.function.arguments}"}
        )
    resp = litellm.completion(
        model="openai/fake-model",
        messages=messages,
        tools=TOOLS,
        api_base=f"{env.url}/v1",
        api_key="sk-l",
        stream=True,
    )
    chunks = list(resp)
    assert chunks
    sessions = httpx.get(f"{env.url}/sessions", headers={"Authorization": "Bearer sk-l"}).json()["sessions"]
    assert len(sessions) == 1
    view = httpx.get(
        f"{env.url}/sessions/{sessions[0]['id']}", headers={"Authorization": "Bearer sk-l"}
    ).json()
    assert [s["actions"] for s in view["steps"]] == [["echo turn-1"], ["echo turn-2"], ["echo turn-3"]]
    assert not any(s["internal"] for s in view["steps"])


def test_session_html_view(env: Env) -> None:
    run_tool_agent(env.client(), "view task", 4, session="v")
    r = httpx.get(f"{env.url}/sessions/v/view", headers={"Authorization": "Bearer sk-a"}, timeout=120)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assert "<html" in r.text.lower() and "echo turn-2" in r.text
    assert (
        httpx.get(f"{env.url}/sessions/v/view", headers={"Authorization": "Bearer sk-b"}).status_code == 404
    )

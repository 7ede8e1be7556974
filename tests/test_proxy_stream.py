"""Live streaming, the PROGRESS/STALE head kept out of the client's sight, and pass-through that
tells the truth: through the real app (uvicorn on loopback or the ASGI app in-process) and a
scripted fake upstream."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from refold.config import DEFAULT
from refold.protocol import parse_head
from refold.proxy import ProxyConfig, create_app
from refold.proxy.early import CommandGate
from refold.proxy.stream import HeadStripper, strip_head
from refold.reply_command import bash_block

from fake_upstream import FakeUpstream, ServerThread, collect_stream

SYSTEM = {"role": "system", "content": "You are a careful engineer."}
BASH = {
    "type": "function",
    "function": {
        "name": "bash",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
    },
}


# ---- the pieces ---------------------------------------------------------------------------------

HEADS = st.sampled_from(
    [
        "PROGRESS: read the parser\nSTALE: 2, 3\n",
        "PROGRESS: x\nSTALE: -\n\nThen the rest",
        "**PROGRESS:** look\n**STALE:** -\nrest",
        "\n\nPROGRESS: a\n\nSTALE: 1\n\n\nbody\nPROGRESS: not a head",
        "PROGRESS: only progress\nbody",
        "Plain text without a head\nPROGRESS: late",
        "PROG",
        "STALE: -\nPROGRESS: reversed\ntext",
        "",
        "P is for parser\n",
        "1. PROGRESS: listed\n2. STALE: -\n```bash\nls\n```",
    ]
)


def pieces(text: str, cuts: list[int]) -> list[str]:
    points = sorted({c % (len(text) + 1) for c in cuts})
    out, prev = [], 0
    for p in points:
        out.append(text[prev:p])
        prev = p
    out.append(text[prev:])
    return out


@given(HEADS, st.text(max_size=30), st.lists(st.integers(0, 200), max_size=8))
@settings(max_examples=300, deadline=None)
def test_head_stripper_streams_what_strip_head_returns(head: str, rest: str, cuts: list[int]) -> None:
    text = head + rest
    s = HeadStripper()
    out = "".join(s.feed(p) for p in pieces(text, cuts)) + s.end()
    assert out == strip_head(text)


def test_strip_head_takes_only_the_opening_head() -> None:
    assert strip_head("PROGRESS: a\nSTALE: 2\n\nI will read it.\n```bash\ncat f\n```") == (
        "I will read it.\n```bash\ncat f\n```"
    )
    assert strip_head("No head here.\nPROGRESS: x") == "No head here.\nPROGRESS: x"
    assert strip_head("PROGRESS: a\nSTALE: -") == ""
    assert parse_head(strip_head("PROGRESS: a\nSTALE: 3\nrest")).progress is None


def test_head_stripper_releases_a_reply_without_head_at_once() -> None:
    s = HeadStripper()
    assert s.feed("Hello") == "Hello"  # cannot become a head line: no wait
    s = HeadStripper()
    assert s.feed("PROGRESS: reading") == ""  # may still be the head
    assert s.feed(" the file\nSTALE: -\nNow") == "Now"


@given(st.text(alphabet="ab`<\n mswea_bashcomnd>/", max_size=60), st.lists(st.integers(0, 80), max_size=8))
@settings(max_examples=300, deadline=None)
def test_command_gate_never_relays_a_command_block(text: str, cuts: list[int]) -> None:
    g = CommandGate()
    early = "".join(g.feed(p) for p in pieces(text, cuts))
    assert text.startswith(early)
    assert bash_block(early) is None and "```" not in early and "<mswea_bash_command>" not in early
    assert early + g.end(drop=False) == text


# ---- through the proxy ----------------------------------------------------------------------------


@pytest.fixture()
def fake() -> Iterator[tuple[FakeUpstream, str]]:
    f = FakeUpstream()
    with ServerThread(f.app) as up:
        yield f, f"{up.url}/v1"


def _cfg(upstream: str, tmp_path: Path, **kw: Any) -> ProxyConfig:
    kw.setdefault("config", DEFAULT.override(["prompt.deferred=false"]))  # the protocol from the first call
    return ProxyConfig(context_tools_beside_shell=True, upstream=upstream, store=str(tmp_path / "s.db"), tokenizer="off", **kw)


def test_text_is_relayed_while_the_round_may_still_be_internal(
    fake: tuple[FakeUpstream, str], tmp_path: Path
) -> None:
    """With a shell tool and context tools offered (a round that may be internal), the reply's
    text reaches the client while the upstream is still generating."""
    f, url = fake
    with ServerThread(create_app(_cfg(url, tmp_path))) as px:
        client = openai.OpenAI(base_url=f"{px.url}/v1", api_key="k", max_retries=0, timeout=60)
        stream = client.chat.completions.create(
            model="m", messages=[SYSTEM, {"role": "user", "content": "HOLD"}], tools=[BASH], stream=True
        )
        chunks = iter(stream)
        first = ""
        while not first:
            ch = next(chunks)
            first = (ch.choices[0].delta.content or "") if ch.choices else ""
        assert not f.release.is_set()  # the upstream holds the rest of the round
        assert {t["function"]["name"] for t in f.requests[-1]["body"]["tools"]} > {"bash", "restore"}
        f.release.set()
        msg = collect_stream(chunks)
        assert (first + msg["content"]).startswith("PROGRESS: step 1")
        assert msg["tool_calls"][0]["function"]["name"] == "bash"


def _sse(r: httpx.Response) -> tuple[str, list[dict[str, Any]], list[dict[str, Any]]]:
    """(content, tool calls, non-choice events) of a streamed response; asserts it ends with [DONE]."""
    lines = [x for x in r.text.splitlines() if x.startswith("data: ")]
    assert lines and lines[-1] == "data: [DONE]", r.text[-300:]
    content, calls, other = "", {}, []
    for line in lines[:-1]:
        ch = json.loads(line[6:])
        if not ch.get("choices"):
            other.append(ch)
            continue
        d = ch["choices"][0].get("delta") or {}
        content += d.get("content") or ""
        for tc in d.get("tool_calls") or []:
            slot = calls.setdefault(tc["index"], {"id": None, "function": {"name": "", "arguments": ""}})
            slot["id"] = tc.get("id") or slot["id"]
            slot["function"]["name"] += (tc.get("function") or {}).get("name") or ""
            slot["function"]["arguments"] += (tc.get("function") or {}).get("arguments") or ""
    return content, [calls[k] for k in sorted(calls)], other


def _visible(c: TestClient, name: str) -> list[dict[str, Any]]:
    s = c.get(f"/sessions/{name}").json()
    assert len(s["branches"]) == 1, s["branches"]
    return [st for st in s["steps"] if not st["internal"]]


def test_an_internal_text_round_streams_its_reasoning_but_not_its_command(
    fake: tuple[FakeUpstream, str], tmp_path: Path
) -> None:
    """No tools: the reply's text is relayed up to its command block; a ``restore`` block is
    answered in a round the client never sees, and the client's echo of what it was shown
    (two rounds' text, one command block) matches the session without a fork."""
    f, url = fake
    h = {"X-Refold-Session": "text"}
    with TestClient(create_app(_cfg(url, tmp_path)), base_url="http://127.0.0.1") as c:
        msgs: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": "task"}]
        for i, note in enumerate(["out RESTORE:1", "out 2", "out 3"]):
            r = c.post("/v1/chat/completions", json={"model": "m", "messages": msgs, "stream": True}, headers=h)
            assert r.status_code == 200
            content, calls, _ = _sse(r)
            assert not calls and content.count("```bash") == 1
            msgs += [{"role": "assistant", "content": content}, {"role": "user", "content": note}]
            if i == 1:  # the round after RESTORE:1 was internal: its text came first, its block never
                assert content.startswith("PROGRESS: restore step 1\nSTALE: -\n\nPROGRESS: step")
                assert "restore 1" not in content
        steps = _visible(c, "text")
        assert len(steps) == 2  # the third reply is recorded with its output, at the next request
        # the history keeps the model's own reply, not the joined text the client was shown
        assert all(s["reply"]["content"].startswith("PROGRESS: step ") for s in steps)
        assert steps[1]["reply"]["content"] == msgs[4]["content"].split("\n\n", 1)[1]
        last = f.requests[-1]["body"]["messages"]
        assert any("Step 1 restored from history" in str(m.get("content")) for m in last)


@pytest.mark.parametrize("stream", [False, True])
def test_strip_protocol_hides_the_head_and_the_history_keeps_it(
    fake: tuple[FakeUpstream, str], tmp_path: Path, stream: bool
) -> None:
    f, url = fake
    h = {"X-Refold-Session": "strip"}
    cfg = _cfg(url, tmp_path, strip_protocol=True)
    msgs: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": "task"}]

    def turn(c: TestClient, note: str) -> dict[str, Any]:
        r = c.post(
            "/v1/chat/completions", json={"model": "m", "messages": msgs, "tools": [BASH], "stream": stream}, headers=h
        )
        assert r.status_code == 200, r.text
        if stream:
            content, calls, _ = _sse(r)
            msg = {"role": "assistant", "content": content, "tool_calls": [{**c, "type": "function"} for c in calls]}
        else:
            msg = r.json()["choices"][0]["message"]
        assert "PROGRESS" not in (msg["content"] or "") and "STALE" not in (msg["content"] or "")
        msgs.append(msg)
        msgs.append({"role": "tool", "tool_call_id": msg["tool_calls"][0]["id"], "content": note})
        return msg

    with TestClient(create_app(cfg), base_url="http://127.0.0.1") as c:
        turn(c, "out 1")
        turn(c, "out 2 RESTORE:1")
        turn(c, "out 3")
        turn(c, "out 4")
        steps = _visible(c, "strip")
        assert [s["progress"] for s in steps] == ["step 1", "step 2", "step 4"]
    with TestClient(create_app(cfg), base_url="http://127.0.0.1") as c:  # a restart: the stored replies still match the client's
        turn(c, "out 5")
        turn(c, "out 6")
        steps = _visible(c, "strip")
        # the reply received just before the restart is recorded as the client shows it (the
        # proxy's memory of its head is gone); every other one keeps its own
        assert [s["progress"] for s in steps] == ["step 1", "step 2", "step 4", None, "step 6"]


def test_pass_through_offers_no_command_and_applies_none(fake: tuple[FakeUpstream, str], tmp_path: Path) -> None:
    """``max_rounds=0``: the prompt offers no context command (no tools, no restore hint, not
    reversible) and a ``fold_span`` the client's own shell refused is not applied."""
    f, url = fake
    h = {"X-Refold-Session": "pass"}
    with TestClient(create_app(_cfg(url, tmp_path, max_rounds=0)), base_url="http://127.0.0.1") as c:
        msgs: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": "task"}]
        r = c.post("/v1/chat/completions", json={"model": "m", "messages": msgs, "tools": [BASH]}, headers=h)
        body = f.requests[-1]["body"]
        assert [t["function"]["name"] for t in body["tools"]] == ["bash"]
        system = body["messages"][0]["content"]
        assert "restore <step>" not in system and "cannot be brought back" in system
        first = r.json()["choices"][0]["message"]
        msgs += [first, {"role": "tool", "tool_call_id": first["tool_calls"][0]["id"], "content": "out 1"}]
        for cmd in ('begin_span "where"', "echo a", 'fold_span "found it in a.py:3 because x"'):
            msgs.append(
                {
                    "role": "assistant",
                    "content": "PROGRESS: p\nSTALE: -",
                    "tool_calls": [{"id": f"c{len(msgs)}", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": cmd})}}],
                }
            )
            msgs.append({"role": "tool", "tool_call_id": f"c{len(msgs) - 1}", "content": "bash: command not found"})
            r = c.post("/v1/chat/completions", json={"model": "m", "messages": msgs, "tools": [BASH]}, headers=h)
            assert r.status_code == 200
        sent = json.dumps(f.requests[-1]["body"]["messages"])
        assert "folded" not in sent and "Span" not in sent
        assert len(_visible(c, "pass")) == 4


def test_used_up_rounds_end_with_a_prompt_that_offers_nothing(
    fake: tuple[FakeUpstream, str], tmp_path: Path
) -> None:
    """``max_rounds=1``: after one internal round the next prompt offers no context command, and
    the context command the model still issued reaches the client untouched and is never applied."""
    f, url = fake
    with TestClient(create_app(_cfg(url, tmp_path, max_rounds=1)), base_url="http://127.0.0.1") as c:
        f.script(("begin_span", {"question": "q"}), ("bash", {"command": "restore 1"}))
        msgs: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": "task"}]
        r = c.post("/v1/chat/completions", json={"model": "m", "messages": msgs, "tools": [BASH]}, headers={"X-Refold-Session": "used"})
        assert r.status_code == 200
        first, second = f.requests[-2]["body"], f.requests[-1]["body"]
        assert "begin_span" in {t["function"]["name"] for t in first["tools"]}
        assert [t["function"]["name"] for t in second["tools"]] == ["bash"]
        assert "restore <step>" in first["messages"][0]["content"]
        assert "restore <step>" not in second["messages"][0]["content"]
        msg = r.json()["choices"][0]["message"]
        assert json.loads(msg["tool_calls"][0]["function"]["arguments"]) == {"command": "restore 1"}
        msgs += [msg, {"role": "tool", "tool_call_id": msg["tool_calls"][0]["id"], "content": "bash: restore: command not found"}]
        r = c.post("/v1/chat/completions", json={"model": "m", "messages": msgs, "tools": [BASH]}, headers={"X-Refold-Session": "used"})
        assert r.status_code == 200
        last = f.requests[-1]["body"]["messages"]
        assert not any("restored from history" in str(m.get("content")) for m in last)


def test_a_model_repeating_itself_under_strip_protocol_keeps_one_branch(
    fake: tuple[FakeUpstream, str], tmp_path: Path
) -> None:
    """Found replaying real runs: two replies that read the same once their heads are stripped.
    Only the latest reply is mapped back to what the model wrote, so the earlier one, stored as
    written, still matches and the session does not fork."""
    f, url = fake

    def reply(k: int) -> dict[str, Any]:
        content = f"PROGRESS: step {k}\nSTALE: -\nRun it again.\n```bash\nmake test\n```"
        return {"choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}]}

    with TestClient(create_app(_cfg(url, tmp_path, strip_protocol=True)), base_url="http://127.0.0.1") as c:
        msgs: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": "task"}]
        for k in range(1, 5):
            f.raw(reply(k))
            r = c.post("/v1/chat/completions", json={"model": "m", "messages": msgs}, headers={"X-Refold-Session": "rep"})
            msg = r.json()["choices"][0]["message"]
            assert msg["content"] == "Run it again.\n```bash\nmake test\n```"
            msgs += [msg, {"role": "user", "content": "FAILED"}]
        steps = _visible(c, "rep")
        assert [s["progress"] for s in steps] == ["step 1", "step 2", "step 3"]

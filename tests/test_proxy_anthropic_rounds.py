"""``/v1/messages`` rounds that turn internal or hold a context command after blocks the client
was already streamed: the client never receives a context command, never loses text or a call
the model sent, and the session stays one branch (ASGI app, fake upstream, the real
``anthropic`` SDK; streaming and not)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest

from test_proxy_anthropic import BASH
from test_proxy_surface_stream import Paused, paused_proxy

H = {"x-api-key": "k", "anthropic-version": "2023-06-01"}


@pytest.fixture()
def up(tmp_path: Path) -> Iterator[tuple[Paused, str]]:
    with paused_proxy(tmp_path) as got:
        yield got


def text(t: str) -> dict[str, Any]:
    return {"type": "text", "text": t}


def bash(cid: str, command: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": cid, "name": "Bash", "input": {"command": command}}


THINK = {"type": "thinking", "thinking": "two things to check", "signature": "sig-A"}


def test_without_tools_the_text_after_the_command_block_reaches_the_client(up: tuple[Paused, str]) -> None:
    fake, url = up
    first = "I need step 1 again.\n```bash\nrestore 1\n```\nThen I will patch the parser."
    second = "Now I see.\n```bash\necho ok\n```"
    fake.script += [([text("Looking.\n```bash\ncat a.py\n```")], None), ([text(first)], None), ([text(second)], None),
                    ([text("done")], None)]
    client = anthropic.Anthropic(base_url=url, api_key="k", max_retries=0, default_headers={"X-Refold-Session": "t"})
    msgs: list[Any] = [{"role": "user", "content": "fix it"}]
    r0 = client.messages.create(model="m", max_tokens=64, messages=msgs)
    msgs += [{"role": "assistant", "content": [b.model_dump() for b in r0.content]}, {"role": "user", "content": "x = 1"}]
    with client.messages.stream(model="m", max_tokens=64, messages=msgs) as s:
        final = s.get_final_message()
    got = [b.model_dump() for b in final.content]
    assert [b["text"] for b in got] == ["I need step 1 again.\n\nThen I will patch the parser.", second]
    msgs += [{"role": "assistant", "content": got}, {"role": "user", "content": "ok"}]
    client.messages.create(model="m", max_tokens=64, messages=msgs)
    with httpx.Client(base_url=url, timeout=30) as c:
        sess = c.get("/sessions/t", headers=H).json()
    assert len(sess["branches"]) == 1
    assert [st["reply"]["content"] for st in sess["steps"]][1:] == [first, second]
    sent = [m for m in fake.requests[3]["messages"] if m["role"] == "assistant"]
    assert [m["content"][0]["text"] for m in sent][1:] == [first, second]


@pytest.mark.parametrize("stream", [True, False])
def test_a_shell_restore_after_a_released_call_is_answered_before_the_next_call(up: tuple[Paused, str], stream: bool) -> None:
    """Claude Code's ``Bash`` called twice: ``ls`` (streamed at once) then ``restore 1``. Streamed,
    the client gets ``ls`` only and the restore is answered before the next upstream call (its
    turn opens with the signed thinking block again); not streamed, the round is internal."""
    fake, url = up
    fake.script += [([bash("toolu_0", "cat a.py")], None),
                    ([THINK, text("Two things."), bash("toolu_ls", "ls -la"), bash("toolu_r", "restore 1")], None),
                    ([text("Both seen."), bash("toolu_2", "echo 2")], None), ([text("ok")], None)]
    client = anthropic.Anthropic(base_url=url, api_key="k", max_retries=0, default_headers={"X-Refold-Session": "b"})
    msgs: list[Any] = [{"role": "user", "content": "fix it"}]
    r0 = client.messages.create(model="m", max_tokens=64, messages=msgs, tools=[BASH])
    msgs += [{"role": "assistant", "content": [b.model_dump() for b in r0.content]},
             {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_0", "content": "x = 1"}]}]
    if stream:
        with client.messages.stream(model="m", max_tokens=64, messages=msgs, tools=[BASH]) as s:
            final = s.get_final_message()
        blocks = [b.model_dump() for b in final.content]
        assert [b.get("id") for b in blocks if b["type"] == "tool_use"] == ["toolu_ls"]
        assert final.stop_reason == "tool_use" and blocks[0] == THINK
        msgs += [{"role": "assistant", "content": blocks},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_ls", "content": "a.py"}]}]
        r2 = client.messages.create(model="m", max_tokens=64, messages=msgs, tools=[BASH])
        assert [b.id for b in r2.content if b.type == "tool_use"] == ["toolu_2"]
        sent = fake.requests[2]["messages"]
        assert [m["role"] for m in sent] == ["user", "assistant", "user", "assistant", "user", "assistant", "user"]
        assert sent[5]["content"] == [THINK, bash("toolu_r", "restore 1")]  # the kept call, after the signed block
        answer = sent[6]["content"][0]
        assert answer["tool_use_id"] == "toolu_r" and "Step 1 restored" in json.dumps(answer)
    else:
        r1 = client.messages.create(model="m", max_tokens=64, messages=msgs, tools=[BASH])
        assert [b.id for b in r1.content if b.type == "tool_use"] == ["toolu_2"]
        results = {b["tool_use_id"]: json.dumps(b) for b in fake.requests[2]["messages"][-1]["content"]}
        assert "Not run" in results["toolu_ls"] and "restored" in results["toolu_r"]
    with httpx.Client(base_url=url, timeout=30) as c:
        sess = c.get("/sessions/b", headers=H).json()
    assert len(sess["branches"]) == 1
    assert [st["internal"] for st in sess["steps"]] == [False, False, True] if stream else [False, True]


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize(("body", "shaped"), [
    (b"upstream connect error or disconnect/reset before headers\n", False),
    (json.dumps({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}).encode(), True),
])
def test_upstream_errors_keep_their_status_in_anthropic_shape(up: tuple[Paused, str], stream: bool, body: bytes, shaped: bool) -> None:
    fake, url = up
    status = 529 if shaped else 500
    fake.script.append((("RAW", status, body), None))
    req = {"model": "m", "max_tokens": 8, "stream": stream, "messages": [{"role": "user", "content": "go"}]}
    r = httpx.post(f"{url}/v1/messages", json=req, headers=H, timeout=30)
    assert r.status_code == status
    if shaped:
        assert r.content == body
    else:
        assert r.json() == {"type": "error", "error": {"type": "api_error", "message":
                            "upstream answered 500: upstream connect error or disconnect/reset before headers"}}
    fake.script.append((("RAW", status, body), None))
    with pytest.raises(anthropic.APIStatusError) as e:
        anthropic.Anthropic(base_url=url, api_key="k", max_retries=0).messages.create(
            model="m", max_tokens=8, messages=[{"role": "user", "content": "go"}])
    assert e.value.status_code == status

"""Metrics of requests with more than one upstream round: tokens saved are counted on what the
first upstream call is sent, after a round answering calls the client's reply left out (as on chat
completions); a streamed upstream call is counted once it is open, so a client that drops the
stream midway leaves it counted."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest

from refold.proxy import ProxyConfig, create_app
from refold.proxy.saved import SavedTokens
from refold.types import Message
from test_proxy_anthropic import BASH
from test_proxy_anthropic_rounds import THINK, bash, text
from test_proxy_stream_early import BASH as CHAT_BASH
from test_proxy_stream_early import SYSTEM
from test_proxy_surface_stream import Paused

from fake_upstream import PAUSE, Scripted, ServerThread


def _metric(text: str, name: str) -> float:
    m = re.search(rf"^{name} (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def test_messages_tokens_saved_count_the_prompt_after_the_held_round(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    counted: list[list[Message]] = []

    def record(self: SavedTokens, full: Sequence[Message], rendered: Sequence[Message]) -> None:
        counted.append(list(rendered))

    monkeypatch.setattr(SavedTokens, "count", record)
    fake = Paused()
    fake.script += [([bash("toolu_0", "cat a.py")], None),
                    ([THINK, text("Two things."), bash("toolu_ls", "ls -la"), bash("toolu_r", "restore 1")], None),
                    ([text("ok")], None)]
    with ServerThread(fake.app) as u:
        cfg = ProxyConfig(upstream=f"{u.url}/v1", store=str(tmp_path / "s.db"), tokenizer="chars4")
        with ServerThread(create_app(cfg)) as px:
            client = anthropic.Anthropic(base_url=px.url, api_key="k", max_retries=0, default_headers={"X-Refold-Session": "b"})
            msgs: list[Any] = [{"role": "user", "content": "fix it"}]
            r0 = client.messages.create(model="m", max_tokens=64, messages=msgs, tools=[BASH])
            msgs += [{"role": "assistant", "content": [b.model_dump() for b in r0.content]},
                     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_0", "content": "x = 1"}]}]
            with client.messages.stream(model="m", max_tokens=64, messages=msgs, tools=[BASH]) as s:
                blocks = [b.model_dump() for b in s.get_final_message().content]
            msgs += [{"role": "assistant", "content": blocks},
                     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_ls", "content": "a.py"}]}]
            client.messages.create(model="m", max_tokens=64, messages=msgs, tools=[BASH])
    assert "Step 1 restored" in json.dumps(fake.requests[2])  # the held restore was answered before the call
    assert len(counted) == 3 and "Step 1 restored" in json.dumps(counted[2])  # and counted with its prompt


def test_a_streamed_call_is_counted_once_open(tmp_path: Path) -> None:
    s = Scripted()
    s.replies.append([{"content": "Looking at it. "}, PAUSE, {"content": "Done."}])
    s.replies.append([{"content": "Again."}])
    with ServerThread(s.app) as up:
        cfg = ProxyConfig(upstream=f"{up.url}/v1", store=str(tmp_path / "s.db"), tokenizer="off")
        with ServerThread(create_app(cfg)) as px, httpx.Client(base_url=px.url, timeout=30) as c:
            body = {"model": "m", "messages": [SYSTEM, {"role": "user", "content": "t"}], "tools": [CHAT_BASH], "stream": True}
            with c.stream("POST", "/v1/chat/completions", json=body) as r:
                for line in r.iter_lines():
                    if "Looking" in line:
                        break
                # the upstream call is open and the client leaves: it is counted already
                assert _metric(c.get("/metrics").text, "refold_upstream_calls_total") == 1
            s.release.set()
            got = c.post("/v1/chat/completions", json=body)  # a whole stream counts its call once
            assert got.status_code == 200 and "Again." in got.text
            m = c.get("/metrics").text
            assert _metric(m, "refold_upstream_calls_total") == 2
            assert _metric(m, "refold_upstream_prompt_tokens_total") >= 10  # its tokens when it ended

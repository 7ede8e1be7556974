"""An upstream answer with nothing in it (chat completions ``choices: []``, a Messages ``content: []``,
a Responses ``output: []``: a provider that declined, or a filter) is the provider's answer: relayed
as it came (HTTP 200, its usage), as LiteLLM does since its PR #40294, and never stored as a step
(an empty assistant turn could not be sent again: Anthropic rejects one). The session goes on from
the step before it; a Responses id naming it continues from its input."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from refold.proxy import ProxyConfig, create_app
from test_proxy_anthropic import FakeAnthropic
from test_proxy_responses import FakeResponses, message

from fake_upstream import FakeUpstream, ServerThread

H = {"x-api-key": "k", "anthropic-version": "2023-06-01", "Authorization": "Bearer k", "X-Refold-Session": "t"}
USAGE = {"prompt_tokens": 3, "completion_tokens": 0, "total_tokens": 3}
EMPTY_CHAT = {"id": "c", "object": "chat.completion", "created": 1, "model": "m", "choices": [], "usage": USAGE}
EMPTY_CHUNK = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": [], "usage": USAGE}


class Surface:
    """One API of the proxy in front of its fake upstream."""

    def __init__(self, name: str, fake: Any, c: httpx.Client, stream: bool) -> None:
        self.name, self.fake, self.c, self.stream = name, fake, c, stream

    def post(self, msgs: list[dict[str, Any]], *, empty: bool, **extra: Any) -> httpx.Response:
        if self.name == "chat":
            if empty:
                self.fake.raw([json.dumps(EMPTY_CHUNK)] if self.stream else EMPTY_CHAT)
            body = {"model": "m", "stream": self.stream, "messages": msgs, **extra}
            return self.c.post("/v1/chat/completions", json=body)
        if self.name == "messages":
            self.fake.script.append([] if empty else [{"type": "text", "text": f"reply {len(msgs)}"}])
            body = {"model": "m", "max_tokens": 10, "stream": self.stream, "messages": msgs, **extra}
            return self.c.post("/v1/messages", json=body)
        self.fake.script.append([] if empty else [message(f"msg_{len(msgs)}", f"reply {len(msgs)}")])
        return self.c.post("/v1/responses", json={"model": "m", "stream": self.stream, "input": msgs, **extra})

    def steps(self) -> list[dict[str, Any]]:
        return list(self.c.get("/sessions/t").json()["steps"])

    def upstream_prompt(self) -> list[dict[str, Any]]:
        reqs = self.fake.requests
        body = reqs[-1]["body"]
        return list(body["messages"] if self.name != "responses" else body["input"])


@pytest.fixture(params=[(s, st) for s in ("chat", "messages", "responses") for st in (False, True)],
                ids=lambda p: f"{p[0]}-{'stream' if p[1] else 'json'}")
def surface(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Surface]:
    name, stream = request.param
    fake = {"chat": FakeUpstream, "messages": FakeAnthropic, "responses": FakeResponses}[name]()
    with ServerThread(fake._build() if name == "chat" else fake.app) as up:
        cfg = ProxyConfig(upstream=f"{up.url}/v1", store=str(tmp_path / "s.db"), tokenizer="off")
        with ServerThread(create_app(cfg)) as px, httpx.Client(base_url=px.url, timeout=30, headers=H) as c:
            yield Surface(name, fake, c, stream)


def _events(text: str) -> list[Any]:
    return [json.loads(x[6:]) for x in text.splitlines() if x.startswith("data: {")]


def test_an_empty_answer_is_relayed_as_the_provider_sent_it_and_never_stored(surface: Surface) -> None:
    first = [{"role": "user", "content": "hi"}]
    r = surface.post(first, empty=False)
    assert r.status_code == 200, r.text
    reply = r.json()["choices"][0]["message"] if surface.name == "chat" and not surface.stream else {"role": "assistant", "content": "reply 1"}
    msgs = [*first, reply, {"role": "user", "content": "next"}]
    r = surface.post(msgs, empty=True)
    assert r.status_code == 200, r.text
    if not surface.stream:  # the provider's body, unchanged
        got = r.json()
        if surface.name == "chat":
            assert got == EMPTY_CHAT
        else:
            assert got[{"messages": "content", "responses": "output"}[surface.name]] == []
            assert got["usage"] and got["id"] in ({"messages": "msg_2", "responses": "resp_2"}[surface.name],)
    else:
        events = _events(r.text)
        assert events and not any("error" in e for e in events)
        if surface.name == "chat":  # no choice carries content or a call; the stream ends properly
            assert r.text.endswith("data: [DONE]\n\n")
            assert not any(ch.get("delta", {}).get("content") or ch.get("delta", {}).get("tool_calls") for e in events for ch in e["choices"])
        elif surface.name == "messages":
            assert events[-1]["type"] == "message_stop" and not any(e["type"] == "content_block_start" for e in events)
        else:
            assert events[-1]["type"] == "response.completed" and events[-1]["response"]["output"] == []
    steps = surface.steps()
    assert len(steps) == 1 and steps[0]["reply"]["content"] == reply["content"]  # the step before it; nothing for the empty one
    # the client goes on (as after any answer it could not use): the session continues from step 1
    again = [*msgs, {"role": "user", "content": "still there?"}]
    r = surface.post(again, empty=False)
    assert r.status_code == 200, r.text
    sent = surface.upstream_prompt()
    assert all(m.get("content") not in ([], "", None) or m.get("tool_calls") for m in sent if m.get("role") == "assistant")
    assert len(surface.steps()) == 1


def test_a_responses_id_naming_an_empty_answer_continues_from_its_input(tmp_path: Path) -> None:
    fake = FakeResponses()
    with ServerThread(fake.app) as up:
        cfg = ProxyConfig(upstream=f"{up.url}/v1", store=str(tmp_path / "s.db"), tokenizer="off")
        with ServerThread(create_app(cfg)) as px, httpx.Client(base_url=px.url, timeout=30, headers=H) as c:
            fake.script.append([message("m1", "reply 1")])
            r1 = c.post("/v1/responses", json={"model": "m", "input": "hi"}).json()
            fake.script.append([])
            r2 = c.post("/v1/responses", json={"model": "m", "input": "next", "previous_response_id": r1["id"]}).json()
            assert r2["output"] == [] and r2["status"] == "completed"
            fake.script.append([message("m3", "reply 3")])
            r3 = c.post("/v1/responses", json={"model": "m", "input": "again", "previous_response_id": r2["id"]})
            assert r3.status_code == 200, r3.text
            sent = fake.requests[-1]["body"]["input"]
            assert [i.get("role") for i in sent] == ["user", "assistant", "user", "user"]  # hi, reply 1, next, again
            assert [i["content"] for i in sent if i.get("role") == "user"] == ["hi", "next", "again"]

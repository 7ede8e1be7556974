"""The usage the client is told covers every upstream round of its request (internal context-command
rounds too), on chat completions, /v1/messages and /v1/responses, streamed or not; /metrics counts
the upstream's tokens on every surface."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from starlette.testclient import TestClient

from refold.config import DEFAULT
from refold.proxy import ProxyConfig, create_app
from refold.proxy.usage import add, figures
from test_proxy_anthropic import BASH as ANTHROPIC_BASH
from test_proxy_anthropic import FakeAnthropic
from test_proxy_responses import SHELL, FakeResponses, as_input, fcall

from fake_upstream import FakeUpstream, ServerThread

SYSTEM = {"role": "system", "content": "You are a careful engineer."}
BASH = {
    "type": "function",
    "function": {"name": "bash", "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}},
}


class Counting(FakeUpstream):
    """The k-th upstream request reports 100k prompt tokens (10k cached) and k completion tokens."""

    def usage(self, body: dict[str, Any], message: dict[str, Any]) -> dict[str, Any]:
        k = len(self.requests)
        return {"prompt_tokens": 100 * k, "completion_tokens": k, "total_tokens": 101 * k,
                "prompt_tokens_details": {"cached_tokens": 10 * k}}


def _cfg(url: str, tmp_path: Path) -> ProxyConfig:
    return ProxyConfig(upstream=url, store=str(tmp_path / "s.db"), tokenizer="off",
                       config=DEFAULT.override(["prompt.deferred=false"]))


def _metric(text: str, name: str) -> float:
    m = re.search(rf"^{name} (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def _expected(ks: list[int]) -> dict[str, Any]:
    return {"prompt_tokens": sum(100 * k for k in ks), "completion_tokens": sum(ks),
            "total_tokens": sum(101 * k for k in ks), "prompt_tokens_details": {"cached_tokens": sum(10 * k for k in ks)}}


def test_add_sums_numbers_nested_and_keeps_the_rest() -> None:
    a = {"input_tokens": 3, "service_tier": "standard", "cache_creation": {"ephemeral_5m_input_tokens": 2}, "x": None}
    b = {"input_tokens": 4, "service_tier": "priority", "cache_creation": {"ephemeral_5m_input_tokens": 1}, "x": 7}
    assert add(a, b) == {"input_tokens": 7, "service_tier": "priority", "cache_creation": {"ephemeral_5m_input_tokens": 3}, "x": 7}
    assert add(None, b) == b and add(a, None) == a and a["input_tokens"] == 3
    assert figures("anthropic", {"input_tokens": 5, "cache_read_input_tokens": 90, "output_tokens": 3}) == (95.0, 90.0, 3.0)
    assert figures("responses", {"input_tokens": 5, "output_tokens": 2}) == (5.0, None, 2.0)
    assert figures("chat", {"prompt_tokens": True}) == (None, None, None)


def test_chat_usage_counts_the_internal_rounds(tmp_path: Path) -> None:
    f = Counting()
    h = {"X-Refold-Session": "u"}
    with ServerThread(f.app) as up, ServerThread(create_app(_cfg(f"{up.url}/v1", tmp_path))) as px:
        client = openai.OpenAI(base_url=f"{px.url}/v1", api_key="k", max_retries=0, timeout=60)
        msgs: list[Any] = [SYSTEM, {"role": "user", "content": "task"}]
        r = client.chat.completions.create(model="m", messages=msgs, tools=[BASH])
        assert r.usage is not None and r.usage.model_dump(exclude_none=True) == _expected([1])
        call = r.choices[0].message.tool_calls[0]
        msgs += [r.choices[0].message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": "out RESTORE:1"}]
        r = client.chat.completions.create(model="m", messages=msgs, tools=[BASH], extra_headers=h)
        assert len(f.requests) == 3  # the restore round and the answer
        assert r.usage is not None and r.usage.model_dump(exclude_none=True) == _expected([2, 3])
        call = r.choices[0].message.tool_calls[0]
        msgs += [r.choices[0].message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": "out RESTORE:1"}]
        stream = client.chat.completions.create(model="m", messages=msgs, tools=[BASH], extra_headers=h,
                                                stream=True, stream_options={"include_usage": True})
        usages = [c.usage.model_dump(exclude_none=True) for c in stream if c.usage is not None]
        assert len(f.requests) == 5
        assert usages == [_expected([4, 5])]  # one usage chunk, for the whole answer
        m = httpx.get(f"{px.url}/metrics").text
        assert _metric(m, "refold_upstream_prompt_tokens_total") == 1500
        assert _metric(m, "refold_upstream_calls_total") == 5


@pytest.fixture()
def anthropic_env(tmp_path: Path) -> Iterator[tuple[FakeAnthropic, str]]:
    fake = FakeAnthropic()
    with ServerThread(fake.app) as up, ServerThread(create_app(_cfg(f"{up.url}/v1", tmp_path))) as px:
        yield fake, px.url


@pytest.mark.parametrize("stream", [False, True])
def test_messages_usage_counts_the_internal_rounds(anthropic_env: tuple[FakeAnthropic, str], stream: bool) -> None:
    import anthropic

    fake, url = anthropic_env
    client = anthropic.Anthropic(base_url=url, api_key="sk-ant-a", max_retries=0)
    fake.script.append([{"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "echo 1"}}])
    messages: list[Any] = [{"role": "user", "content": "Task"}]
    r = client.messages.create(model="m", max_tokens=64, messages=messages, tools=[ANTHROPIC_BASH])
    messages += [{"role": "assistant", "content": r.content},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "out"},
                                              {"type": "text", "text": "RESTORE:1"}]}]
    fake.script.append([{"type": "tool_use", "id": "toolu_r", "name": "Bash", "input": {"command": "restore 1"}}])
    kwargs: dict[str, Any] = {"model": "m", "max_tokens": 64, "messages": messages, "tools": [ANTHROPIC_BASH]}
    if stream:
        with client.messages.stream(**kwargs) as s:
            final = s.get_final_message()
    else:
        final = client.messages.create(**kwargs)
    reqs = fake.messages_requests
    assert len(reqs) == 3  # the first turn, the restore round, the answer
    assert final.usage.input_tokens == sum(len(q["raw"]) // 4 for q in reqs[1:])
    assert final.usage.output_tokens == 10
    m = httpx.get(f"{url}/metrics").text
    assert _metric(m, "refold_upstream_prompt_tokens_total") == sum(len(q["raw"]) // 4 for q in reqs)
    assert _metric(m, "refold_upstream_completion_tokens_total") == 15
    assert _metric(m, "refold_upstream_calls_total") == 3


@pytest.mark.parametrize("stream", [False, True])
def test_responses_usage_counts_the_internal_rounds(tmp_path: Path, stream: bool) -> None:
    fake = FakeResponses()
    with ServerThread(fake.app) as up, ServerThread(create_app(_cfg(f"{up.url}/v1", tmp_path))) as px:
        client = openai.OpenAI(base_url=f"{px.url}/v1", api_key="sk-a", max_retries=0)
        fake.script.append([fcall("call_1", "shell", {"command": ["echo", "1"]})])
        items: list[Any] = [{"role": "user", "content": "Task"}]
        resp = client.responses.create(model="m", input=items, tools=[SHELL])
        items += [*as_input(resp.output), {"type": "function_call_output", "call_id": "call_1", "output": "out"}]
        fake.script.append([fcall("call_r", "shell", {"command": ["bash", "-lc", "restore 1"]})])
        if stream:
            with client.responses.stream(model="m", input=items, tools=[SHELL]) as s:
                final = s.get_final_response()
        else:
            final = client.responses.create(model="m", input=items, tools=[SHELL])
        assert len(fake.requests) == 3
        assert final.usage is not None
        assert (final.usage.input_tokens, final.usage.output_tokens, final.usage.total_tokens) == (20, 10, 30)
        m = httpx.get(f"{px.url}/metrics").text
        assert _metric(m, "refold_upstream_prompt_tokens_total") == 30
        assert _metric(m, "refold_upstream_calls_total") == 3


def test_a_relayed_stream_is_counted(tmp_path: Path) -> None:
    """A streamed round the proxy cannot answer (--max-rounds 0) is relayed byte for byte and still
    counted in /metrics."""
    fake = FakeResponses()
    with ServerThread(fake.app) as up:
        cfg = ProxyConfig(upstream=f"{up.url}/v1", store=str(tmp_path / "s.db"), tokenizer="off", max_rounds=0)
        with ServerThread(create_app(cfg)) as px:
            client = openai.OpenAI(base_url=f"{px.url}/v1", api_key="sk-a", max_retries=0)
            with client.responses.stream(model="m", input="hi") as s:
                final = s.get_final_response()
            assert final.usage is not None and final.usage.input_tokens == 10
            m = httpx.get(f"{px.url}/metrics").text
            assert _metric(m, "refold_upstream_calls_total") == 1
            assert _metric(m, "refold_upstream_prompt_tokens_total") == 10


@pytest.mark.parametrize("surface", ["messages", "responses"])
def test_tokens_saved_and_sessions_loaded_on_every_surface(tmp_path: Path, surface: str) -> None:
    """/metrics on a proxy serving only /v1/messages or /v1/responses: the prompt tokens of the full
    conversation and of the rendered one are counted (they were chat only), and the sessions held
    in memory are reported at scrape time (the gauge was set by chat requests alone)."""
    fake: FakeAnthropic | FakeResponses = FakeAnthropic() if surface == "messages" else FakeResponses()
    with ServerThread(fake.app) as up:
        cfg = ProxyConfig(upstream=f"{up.url}/v1", store=str(tmp_path / "s.db"), tokenizer="chars4",
                          config=DEFAULT.override(["prompt.deferred=false"]))
        app = create_app(cfg)
        with TestClient(app, base_url="http://127.0.0.1") as c:
            h = {"x-api-key": "sk-a", "anthropic-version": "2023-06-01"}
            big = "line of output\n" * 200
            if surface == "messages":
                msgs: list[Any] = [{"role": "user", "content": "task"}]
                for t in range(6):
                    r = c.post("/v1/messages", json={"model": "m", "max_tokens": 9, "messages": msgs}, headers=h)
                    assert r.status_code == 200, r.text
                    msgs += [{"role": "assistant", "content": r.json()["content"]}, {"role": "user", "content": f"{t} {big}"}]
            else:
                items: list[Any] = [{"role": "user", "content": "task"}]
                for t in range(6):
                    r = c.post("/v1/responses", json={"model": "m", "input": items}, headers=h)
                    assert r.status_code == 200, r.text
                    items += [*r.json()["output"], {"role": "user", "content": f"{t} {big}"}]
            assert _metric(c.get("/metrics", headers=h).text, "refold_sessions_loaded") == 1
        m = app.state.metrics  # the lifespan's end waited for the background counts
        full, rendered = m.value("refold_prompt_tokens_full_total"), m.value("refold_prompt_tokens_rendered_total")
        assert full > 0 and rendered > 0
        assert m.value("refold_tokens_saved_total") - m.value("refold_tokens_added_total") == full - rendered


def test_chat_upstream_errors_are_counted(tmp_path: Path) -> None:
    """An upstream error on chat completions (streamed or not) is counted in
    refold_upstream_errors_total by status, as on the other surfaces (chat never counted one)."""
    f = FakeUpstream()
    with ServerThread(f.app) as up, TestClient(create_app(_cfg(f"{up.url}/v1", tmp_path)), base_url="http://127.0.0.1") as c:
        for stream in (False, True):
            body = {"model": "m", "messages": [SYSTEM, {"role": "user", "content": "FAIL:429"}], "stream": stream}
            assert c.post("/v1/chat/completions", json=body).status_code == 429
        m = c.get("/metrics").text
        assert re.search(r'^refold_upstream_errors_total\{status="429"\} 2\.0$', m, re.M), m[-2000:]


def test_chat_stream_without_tools_reports_each_round_once(tmp_path: Path) -> None:
    """An agent without tools: its round is held to its end (a command block may be a context
    command), usage chunk too; the usage it reports is its own round's, then with a restore the
    two rounds' sum (a held usage chunk was counted twice)."""
    f = Counting()
    with ServerThread(f.app) as up, ServerThread(create_app(_cfg(f"{up.url}/v1", tmp_path))) as px:
        client = openai.OpenAI(base_url=f"{px.url}/v1", api_key="k", max_retries=0, timeout=60)
        msgs: list[Any] = [SYSTEM, {"role": "user", "content": "task"}]
        for note, ks in (("out RESTORE:1", [1]), ("out 2", [2, 3])):
            stream = client.chat.completions.create(model="m", messages=msgs, stream=True,
                                                    stream_options={"include_usage": True})
            text, usages = "", []
            for ch in stream:
                text += "".join(c.delta.content or "" for c in ch.choices)
                if ch.usage is not None:
                    usages.append(ch.usage.model_dump(exclude_none=True))
            assert usages == [_expected(ks)]
            msgs += [{"role": "assistant", "content": text}, {"role": "user", "content": note}]

"""Messages with the same text but different images, files or audio are different messages: a
request was mapped onto a session (or a step) recorded from another request with the same text,
and the upstream was sent the stored message, that is another request's image."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from starlette.testclient import TestClient

from refold.config import DEFAULT
from refold.proxy import ProxyConfig, create_app
from refold.proxy.mapping import normalize
from test_proxy_anthropic import FakeAnthropic

from fake_upstream import FakeUpstream, ServerThread

SYSTEM = {"role": "system", "content": "You are a careful engineer."}
BASH = {"type": "function", "function": {"name": "bash", "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}}


def _image(data: str) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{data}"}}


def _cfg(url: str, tmp_path: Path) -> ProxyConfig:
    return ProxyConfig(upstream=url, store=str(tmp_path / "s.db"), tokenizer="off",
                       config=DEFAULT.override(["prompt.deferred=false"]))


def test_the_norm_tells_parts_apart_and_text_alone_is_unchanged() -> None:
    a = {"role": "user", "content": [{"type": "text", "text": "x"}, _image("A")]}
    b = {"role": "user", "content": [{"type": "text", "text": "x"}, _image("B")]}
    assert normalize(a) != normalize(b)
    marked = {"role": "user", "content": [{"type": "text", "text": "x"}, {**_image("A"), "cache_control": {"type": "ephemeral"}}]}
    assert normalize(marked) == normalize(a)  # a moved breakpoint is no new message
    # text alone: the norm (and the session names made from it) as before
    assert normalize({"role": "user", "content": [{"type": "text", "text": "x"}, {"type": "input_text", "text": "y"}]}) == (
        "user", "xy", (), None, None)


def test_chat_each_request_is_sent_its_own_image(tmp_path: Path) -> None:
    f = FakeUpstream()
    with ServerThread(f.app) as up, TestClient(create_app(_cfg(f"{up.url}/v1", tmp_path)), base_url="http://127.0.0.1") as c:
        names = set()
        for data in ("AAAA", "BBBB"):
            msgs = [SYSTEM, {"role": "user", "content": [{"type": "text", "text": "describe this"}, _image(data)]}]
            r = c.post("/v1/chat/completions", json={"model": "m", "messages": msgs}, headers={"Authorization": "Bearer k"})
            assert r.status_code == 200
            names.add(r.headers["x-refold-session"])
            assert f.requests[-1]["body"]["messages"][1]["content"][1] == _image(data)
        assert len(names) == 2


def test_chat_a_rerun_step_with_another_screenshot_is_sent_it(tmp_path: Path) -> None:
    """pass@k: two runs of one task take the same step, each with its own screenshot."""
    f = FakeUpstream()
    h = {"X-Refold-Session": "shots"}
    call = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "shot"}'}}
    with ServerThread(f.app) as up, TestClient(create_app(_cfg(f"{up.url}/v1", tmp_path)), base_url="http://127.0.0.1") as c:
        for data in ("AAAA", "BBBB"):
            msgs = [SYSTEM, {"role": "user", "content": "task"},
                    {"role": "assistant", "content": "PROGRESS: a\nSTALE: -", "tool_calls": [call]},
                    {"role": "tool", "tool_call_id": "c1", "content": "screenshot taken"},
                    {"role": "user", "content": [{"type": "text", "text": "the screen:"}, _image(data)]}]
            r = c.post("/v1/chat/completions", json={"model": "m", "messages": msgs, "tools": [BASH]}, headers=h)
            assert r.status_code == 200
            sent = f.requests[-1]["body"]["messages"]
            images = [p for m in sent if isinstance(m.get("content"), list) for p in m["content"] if p.get("type") == "image_url"]
            assert images == [_image(data)]


def test_messages_each_request_is_sent_its_own_attachment(tmp_path: Path) -> None:
    fake = FakeAnthropic()
    h = {"x-api-key": "k", "anthropic-version": "2023-06-01"}
    with ServerThread(fake.app) as up, TestClient(create_app(_cfg(f"{up.url}/v1", tmp_path)), base_url="http://127.0.0.1") as c:
        firsts: list[Any] = [
            "q",
            [{"type": "text", "text": "q"}, {"type": "container_upload", "file_id": "file_1"}],
            [{"type": "text", "text": "q"}, {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}],
        ]
        for content in firsts:
            r = c.post("/v1/messages", json={"model": "m", "max_tokens": 9, "messages": [{"role": "user", "content": content}]}, headers=h)
            assert r.status_code == 200
            sent = fake.messages_requests[-1]["body"]["messages"][0]["content"]
            want = [{"type": "text", "text": content}] if isinstance(content, str) else content
            assert [{k: v for k, v in b.items() if k != "cache_control"} for b in sent] == want


def test_responses_replies_of_server_side_items_alone_are_told_apart(tmp_path: Path) -> None:
    """Two conversations with one opening whose replies are only server-side items (an MCP call,
    an image generation: no text, no function call): each is sent its own items."""
    from test_proxy_responses import FakeResponses

    fake = FakeResponses()
    user = {"role": "user", "content": "go"}
    replies = [
        [{"type": "mcp_list_tools", "id": "ml_1", "server_label": "s", "tools": []},
         {"type": "mcp_call", "id": "mc_1", "server_label": "s", "name": "t", "arguments": "{}", "output": "r"}],
        [{"type": "image_generation_call", "id": "ig_1", "status": "completed", "result": "BASE64IMG"}],
    ]
    with ServerThread(fake.app) as up, TestClient(create_app(_cfg(f"{up.url}/v1", tmp_path)), base_url="http://127.0.0.1") as c:
        for items in replies:
            r = c.post("/v1/responses", json={"model": "m", "input": [user, *items, {"role": "user", "content": "more"}]},
                       headers={"Authorization": "Bearer k"})
            assert r.status_code == 200
            assert fake.requests[-1]["body"]["input"][1:-1] == items


def test_messages_replies_of_server_tool_blocks_are_told_apart(tmp_path: Path) -> None:
    fake = FakeAnthropic()
    h = {"x-api-key": "k", "anthropic-version": "2023-06-01"}

    def searched(n: int) -> list[dict[str, Any]]:
        return [{"type": "server_tool_use", "id": f"srvtoolu_{n}", "name": "web_search", "input": {"query": f"q{n}"}},
                {"type": "web_search_tool_result", "tool_use_id": f"srvtoolu_{n}", "content": []},
                {"type": "text", "text": "Nothing found."}]

    with ServerThread(fake.app) as up, TestClient(create_app(_cfg(f"{up.url}/v1", tmp_path)), base_url="http://127.0.0.1") as c:
        for n in (1, 2):
            msgs = [{"role": "user", "content": "search"}, {"role": "assistant", "content": searched(n)},
                    {"role": "user", "content": "again"}]
            r = c.post("/v1/messages", json={"model": "m", "max_tokens": 9, "messages": msgs}, headers=h)
            assert r.status_code == 200
            sent = fake.messages_requests[-1]["body"]["messages"][1]["content"]
            assert [b.get("id") or b.get("tool_use_id") for b in sent[:2]] == [f"srvtoolu_{n}"] * 2

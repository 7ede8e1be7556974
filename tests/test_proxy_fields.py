"""Assistant-message fields the proxy used to strip reach the upstream as the client sent them:
a legacy ``function_call`` (with its ``role: function`` answer), ``refusal``, ``audio``; also on
later requests rendered from the store, after a restart, and through the renderer's folds. A
field of the wrong shape is a 400 naming it, before anything is stored (real ASGI app, the fake
upstream of ``fake_upstream.py``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from refold.messages import clean
from refold.proxy import ProxyConfig, create_app
from refold.proxy.mapping import normalize
from refold.proxy.stream import Accumulator
from refold.proxy.validate import parse_chunk

from fake_upstream import FakeUpstream, ServerThread

FNS = [{"name": "bash", "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}]


def _fc(cmd: str) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "function_call": {"name": "bash", "arguments": json.dumps({"command": cmd})}}


class Proxy:
    def __init__(self, tmp_path: Path, fake: FakeUpstream, up: str) -> None:
        self.fake, self.up, self.store = fake, up, str(tmp_path / "s.db")

    def client(self) -> Iterator[httpx.Client]:
        cfg = ProxyConfig(upstream=f"{self.up}/v1", store=self.store, timeout=10.0, tokenizer="off")
        with ServerThread(create_app(cfg)) as px, httpx.Client(base_url=px.url, timeout=30) as c:
            yield c

    def sent(self) -> list[dict[str, Any]]:
        """The messages of the upstream's last request."""
        return self.fake.requests[-1]["body"]["messages"]  # type: ignore[no-any-return]


@pytest.fixture()
def proxy(tmp_path: Path) -> Iterator[Proxy]:
    fake = FakeUpstream()
    with ServerThread(fake.app) as up:
        yield Proxy(tmp_path, fake, up.url)


def _post(c: httpx.Client, msgs: list[dict[str, Any]], session: str, **extra: Any) -> httpx.Response:
    return c.post("/v1/chat/completions", json={"model": "m", "messages": msgs, **extra},
                  headers={"X-Refold-Session": session})


CASES = {
    "function_call": [{"role": "user", "content": "x"}, _fc("ls"), {"role": "function", "name": "bash", "content": "a.py b.py"}],
    "refusal": [{"role": "user", "content": "x"}, {"role": "assistant", "content": None, "refusal": "I can't help."},
                {"role": "user", "content": "please"}],
    "audio": [{"role": "user", "content": "x"}, {"role": "assistant", "content": None, "audio": {"id": "audio_abc"}},
              {"role": "user", "content": "y"}],
}


@pytest.mark.parametrize("field", list(CASES))
def test_fields_reach_the_upstream_as_sent_also_from_the_store_after_a_restart(proxy: Proxy, field: str) -> None:
    msgs = CASES[field]
    extra = {"functions": FNS} if field == "function_call" else {}
    for c in proxy.client():
        r = _post(c, msgs, field, **extra)
        assert r.status_code == 200, r.text
        assert proxy.sent()[1] == msgs[1] and proxy.sent()[2] == msgs[2]
        reply = r.json()["choices"][0]["message"]
    # a new proxy on the same store renders the stored steps again, fields and all
    later = [*msgs, reply, {"role": "user", "content": "next"}]
    for c in proxy.client():
        r = _post(c, later, field, **extra)
        assert r.status_code == 200, r.text
        assert r.headers["x-refold-steps"] == "2"  # the stored step matched: one session, no fork
        assert proxy.sent()[1] == msgs[1] and proxy.sent()[2] == msgs[2]


def test_a_long_legacy_function_call_run_keeps_every_call_through_the_folds(proxy: Proxy) -> None:
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are an agent."}, {"role": "user", "content": "go"}]
    for c in proxy.client():
        for i in range(14):
            msgs += [{**_fc(f"cat f{i % 4}.py"), "content": f"PROGRESS: step {i}\nSTALE: -"},
                     {"role": "function", "name": "bash", "content": f"def f{i % 4}():\n" + "    return 1\n" * 60}]
            r = _post(c, [*msgs, {"role": "user", "content": "continue"}], "long", functions=FNS)
            assert r.status_code == 200, r.text
    sent = proxy.sent()
    calls = [m for m in sent if m["role"] == "assistant"]
    assert len(calls) == 14 and all(m["function_call"]["name"] == "bash" for m in calls)
    assert [json.loads(m["function_call"]["arguments"])["command"] for m in calls] == [
        f"cat f{i % 4}.py" for i in range(14)]
    assert sum(m["role"] == "function" for m in sent) == 14
    full = sum(len(json.dumps(m)) for m in msgs)
    assert sum(len(json.dumps(m)) for m in sent) < full  # the history was folded, the calls kept


def test_two_branches_that_differ_only_in_the_function_call_each_send_their_own(proxy: Proxy) -> None:
    base = [{"role": "user", "content": "x"}]
    for c in proxy.client():
        for cmd in ("ls", "ls -a", "ls"):
            msgs = [*base, _fc(cmd), {"role": "function", "name": "bash", "content": "same output"}]
            assert _post(c, msgs, "fork", functions=FNS).status_code == 200
            assert proxy.sent()[1] == msgs[1]


@pytest.mark.parametrize(
    ("message", "param"),
    [
        ({"role": "assistant", "content": None, "function_call": "bash"}, "messages[1].function_call"),
        ({"role": "assistant", "content": None, "function_call": {"arguments": "{}"}}, "messages[1].function_call.name"),
        ({"role": "assistant", "content": None, "function_call": {"name": "bash", "arguments": {"command": "ls"}}},
         "messages[1].function_call.arguments"),
        ({"role": "assistant", "content": None, "refusal": ["no"]}, "messages[1].refusal"),
        ({"role": "assistant", "content": None, "audio": "audio_abc"}, "messages[1].audio"),
        ({"role": "assistant", "content": None, "audio": {"id": 3}}, "messages[1].audio"),
    ],
)
def test_a_field_of_the_wrong_shape_is_a_400_naming_it_and_nothing_is_stored(
    proxy: Proxy, message: dict[str, Any], param: str
) -> None:
    for c in proxy.client():
        n = len(proxy.fake.requests)
        r = _post(c, [{"role": "user", "content": "x"}, message, {"role": "user", "content": "y"}], "bad")
        assert r.status_code == 400, r.text
        assert r.json()["error"]["param"] == param and param in r.json()["error"]["message"]
        assert len(proxy.fake.requests) == n
        assert c.get("/sessions/bad").status_code == 404


def test_a_streamed_function_call_is_added_up() -> None:
    acc = Accumulator()
    for d in ({"role": "assistant", "content": None, "function_call": {"name": "bash", "arguments": ""}},
              {"function_call": {"arguments": "{\"comm"}}, {"function_call": {"arguments": "and\": \"ls\"}"}}):
        acc.add(parse_chunk(json.dumps({"choices": [{"index": 0, "delta": d, "finish_reason": None}]})))
    assert acc.message()["function_call"] == {"name": "bash", "arguments": "{\"command\": \"ls\"}"}
    with pytest.raises(Exception, match="function_call"):
        parse_chunk(json.dumps({"choices": [{"index": 0, "delta": {"function_call": "bash"}}]}))


def test_null_fields_are_not_sent_and_do_not_tell_messages_apart() -> None:
    m = {"role": "assistant", "content": "hi", "refusal": None, "audio": None, "function_call": None, "extra": {}}
    assert clean(m) == {"role": "assistant", "content": "hi"}
    assert normalize(m) == normalize({"role": "assistant", "content": "hi"})
    assert normalize(_fc("ls")) != normalize(_fc("ls -a"))
    assert normalize(_fc("ls")) == normalize({**_fc("ls"), "function_call": {"name": "bash", "arguments": '{"command":"ls"}'}})


# ---- text an upstream stream carries unescaped -------------------------------------------------

ODD = "line\u2028sep\u2029par\x85nel\x1cfs end"
"""Characters ``str.splitlines`` breaks at and JSON may carry raw inside a data line."""


def test_sse_lines_split_only_where_sse_does() -> None:
    import asyncio

    from refold.proxy.stream import sse_lines

    pieces = [f"data: {ODD}\r".encode(), b"\ndata: b\r", b"\r", b"data: c\n\nda", b"ta: d\r"]

    async def body() -> Any:
        for p in pieces:
            yield p

    async def go() -> list[str]:
        transport = httpx.MockTransport(lambda r: httpx.Response(200, content=body()))
        async with httpx.AsyncClient(transport=transport) as c, c.stream("GET", "http://x/") as r:
            return [line async for line in sse_lines(r)]

    assert asyncio.run(go()) == [f"data: {ODD}", "data: b", "", "data: c", "", "data: d"]


@pytest.mark.parametrize("tools", [False, True])
def test_a_stream_with_raw_line_separators_in_its_text_reaches_the_client_whole(proxy: Proxy, tools: bool) -> None:
    text = f"PROGRESS: a\nSTALE: -\n{ODD}"
    chunk = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m",
             "choices": [{"index": 0, "delta": {"role": "assistant", "content": text}, "finish_reason": None}]}
    end = {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
    proxy.fake.raw([json.dumps(chunk, ensure_ascii=False), json.dumps(end)])
    bash = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]
    for c in proxy.client():
        r = _post(c, [{"role": "user", "content": "go"}], f"odd-{tools}", stream=True, **({"tools": bash} if tools else {}))
        assert r.status_code == 200, r.text
        events = [json.loads(e[6:]) for e in r.content.decode().split("\n\n") if e.startswith("data: {")]
        assert not any("error" in e for e in events), events
        got = "".join(ch["delta"].get("content") or "" for e in events for ch in e["choices"])
        assert got == text
        # written escaped, so a client splitting lines as str.splitlines does (httpx) reads it too
        assert all(json.loads(x[6:]) for x in r.text.splitlines() if x.startswith("data: {"))

"""Validation before storage: every malformed field is an OpenAI-style 400 naming it and nothing is
stored; odd but legal input (lone surrogates) is accepted and survives hashing, storing, a restart
and the upstream; a malformed upstream reply is a 502 naming its field, never a 500 or a broken
stream. Through the ASGI app in-process and a fake upstream on loopback."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from refold.errors import ProxyError
from refold.proxy import ProxyConfig, create_app
from refold.proxy.validate import (
    check_chat_request,
    check_chunk,
    check_upstream_reply,
    parse_json_body,
)
from refold.scrub import scrub_text

from fake_upstream import FakeUpstream, ServerThread

SYSTEM = {"role": "system", "content": "sys"}
USER = {"role": "user", "content": "task"}
BASH = {"type": "function", "function": {"name": "bash", "parameters": {"type": "object", "properties": {}}}}


def call(cid: str, command: str) -> dict[str, Any]:
    return {"id": cid, "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": command})}}


def nested(depth: int) -> Any:
    v: Any = "x"
    for _ in range(depth):
        v = [v]
    return v


class Env:
    def __init__(self, fake: FakeUpstream, client: TestClient) -> None:
        self.fake, self.c = fake, client

    def post(self, body: Any, session: str = "s", **kw: Any) -> Any:
        if isinstance(body, (bytes, str)):
            return self.c.post(
                "/v1/chat/completions",
                content=body,
                headers={"X-Refold-Session": session, "content-type": "application/json"},
            )
        return self.c.post("/v1/chat/completions", json=body, headers={"X-Refold-Session": session}, **kw)

    def sessions(self) -> list[Any]:
        out: list[Any] = self.c.get("/sessions").json()["sessions"]
        return out


@pytest.fixture()
def env(tmp_path: Path) -> Iterator[Env]:
    fake = FakeUpstream()
    with ServerThread(fake.app) as up:
        cfg = ProxyConfig(upstream=f"{up.url}/v1", store=str(tmp_path / "s.db"), tokenizer="off")
        with TestClient(create_app(cfg), base_url="http://127.0.0.1") as c:
            yield Env(fake, c)


def body(*messages: Any, **extra: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [SYSTEM, USER, *messages], **extra}


BAD: list[tuple[str, Any, str]] = [
    # (case, body, the param the 400 names)
    ("tool call function a string", body({"role": "assistant", "tool_calls": [{"id": "c", "function": "bash"}]}, {"role": "tool", "tool_call_id": "c", "content": "x"}), "messages[2].tool_calls[0].function"),
    ("tool call arguments an object", body({"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "bash", "arguments": {}}}]}), "messages[2].tool_calls[0].function.arguments"),
    ("tool call name missing", body({"role": "assistant", "tool_calls": [{"id": "c", "function": {"arguments": "{}"}}]}), "messages[2].tool_calls[0].function.name"),
    ("tool_calls an object", body({"role": "assistant", "tool_calls": {"id": "c"}}), "messages[2].tool_calls"),
    ("tool message without id", body({"role": "assistant", "content": "a"}, {"role": "tool", "content": "x"}), "messages[3].tool_call_id"),
    ("content part not an object", {"model": "m", "messages": [{"role": "user", "content": ["hi"]}]}, "messages[0].content[0]"),
    ("text part without text", {"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": 3}]}]}, "messages[0].content[0].text"),
    ("name a number", {"model": "m", "messages": [{"role": "user", "content": "x", "name": 5}]}, "messages[0].name"),
    ("tools[0].function a string", body(tools=[{"type": "function", "function": "bash"}]), "tools[0].function"),
    ("tools[0] a string", body(tools=["bash"]), "tools[0]"),
    ("tool parameters a list", body(tools=[{"type": "function", "function": {"name": "b", "parameters": []}}]), "tools[0].function.parameters"),
    ("stream a string", body(stream="false"), "stream"),
    ("stream_options a string", body(stream=True, stream_options="usage"), "stream_options"),
    ("include_usage a string", body(stream=True, stream_options={"include_usage": "yes"}), "stream_options.include_usage"),
    ("n zero", body(n=0), "n"),
    ("a 4,000-digit integer", body(max_tokens=10**3999), "max_tokens"),
    ("a message field nested 500 deep", body({"role": "user", "content": "x", "meta": nested(500)}), "messages[2].meta"),
    ("model missing", {"messages": [USER]}, "model"),
    ("role unknown", {"model": "m", "messages": [{"role": "robot", "content": "x"}]}, "messages[0].role"),
]


@pytest.mark.parametrize(("case", "bad", "param"), BAD, ids=[c for c, _, _ in BAD])
def test_malformed_fields_are_400s_naming_them_and_nothing_is_stored(
    env: Env, case: str, bad: Any, param: str
) -> None:
    r = env.post(bad)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error"
    assert err["param"] is not None and err["param"].startswith(param), err
    assert param.split(".")[0].split("[")[0] in err["message"]
    assert "\n" not in err["message"] and "Traceback" not in err["message"]
    assert env.sessions() == [] and env.fake.requests == []


@pytest.mark.parametrize(
    ("raw", "needle"),
    [
        (b'{"model": "m", "messages": [{"role": "user", "content": "x"}], "temperature": NaN}', "NaN"),
        (b'{"model": "m", "messages": [{"role": "user", "content": "x"}], "top_p": -Infinity}', "Infinity"),
        (b'{"model": "m", "max_tokens": 1' + b"0" * 5000 + b', "messages": []}', "number"),
        (b"[" * 1000 + b"]" * 1000, "nested too deeply"),
        (b'{"model": "m", "messages": [{"role": "user", "content": "x"}]', "not valid JSON"),
    ],
    ids=["nan", "infinity", "5000-digit int", "1000 deep", "truncated"],
)
def test_bodies_python_cannot_take_are_400s(env: Env, raw: bytes, needle: str) -> None:
    r = env.post(raw)
    assert r.status_code == 400, r.text
    assert needle in r.json()["error"]["message"]
    assert env.sessions() == [] and env.fake.requests == []


def test_a_rejected_message_does_not_poison_the_session(env: Env) -> None:
    """Issue 13: a ``function`` given as a string used to be stored, and every later request of
    the session (its view too, and after a restart) got a 500."""
    bad = body({"role": "assistant", "tool_calls": [{"id": "c", "function": "bash"}]}, {"role": "tool", "tool_call_id": "c", "content": "x"}, tools=[BASH])
    assert env.post(bad).status_code == 400
    good = body({"role": "assistant", "content": None, "tool_calls": [call("c", "ls")]}, {"role": "tool", "tool_call_id": "c", "content": "x"}, tools=[BASH])
    r = env.post(good)
    assert r.status_code == 200, r.text
    assert env.c.get("/sessions/s").status_code == 200
    assert env.c.get("/sessions/s/view").status_code in (200, 404)  # 404: the viewer is not installed


def test_a_session_poisoned_before_validation_still_answers(tmp_path: Path) -> None:
    """A store written by an older proxy may hold such a step: matching reads it without a 500."""
    from refold.proxy.mapping import normalize

    assert normalize({"role": "assistant", "tool_calls": [{"function": "bash"}, "junk"]})[2] == (
        (None, "bash", "null"),
        (None, None, "null"),
    )


def test_lone_surrogates_are_kept_through_hash_store_restart_and_upstream(tmp_path: Path) -> None:
    """``"\\udc80"`` (surrogateescape output) in a request: accepted, hashed, stored; the
    upstream gets U+FFFD; the same history sent again, after a restart, matches it."""
    fake = FakeUpstream()
    raw_history = (
        '{"model": "m", "tools": TOOLS, "messages": [{"role": "system", "content": "sys"}, '
        '{"role": "user", "content": "task"}, {"role": "assistant", "content": "PROGRESS: a\\nSTALE: -", '
        '"tool_calls": [{"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{\\"command\\": \\"cat f\\"}"}}]}, '
        '{"role": "tool", "tool_call_id": "c1", "content": "bytes \\udc80\\udcff end"}MORE]}'
    ).replace("TOOLS", json.dumps([BASH]))
    with ServerThread(fake.app) as up:
        cfg = ProxyConfig(upstream=f"{up.url}/v1", store=str(tmp_path / "s.db"), tokenizer="off")
        for more in ("", ', {"role": "assistant", "content": "PROGRESS: b\\nSTALE: -\\nok \\ud800"}, {"role": "user", "content": "next \\udc80"}'):
            with TestClient(create_app(cfg), base_url="http://127.0.0.1") as c:  # a fresh process each time
                r = c.post(
                    "/v1/chat/completions",
                    content=raw_history.replace("MORE", more).encode(),
                    headers={"X-Refold-Session": "sur", "content-type": "application/json"},
                )
                assert r.status_code == 200, r.text
                s = c.get("/sessions/sur").json()
                assert len(s["branches"]) == 1
        sent = json.dumps(fake.requests[-1]["body"]["messages"], ensure_ascii=False)
        assert "bytes \ufffd\ufffd end" in sent and "ok \ufffd" in sent and "next \ufffd" in sent
        assert len(s["steps"]) == 2


def test_an_upstream_reply_with_a_lone_surrogate_reaches_the_client(env: Env) -> None:
    """The paid reply is never lost: a surrogate in it becomes U+FFFD."""
    env.fake.raw({"id": "x", "object": "chat.completion", "choices": [{"index": 0, "message": {"role": "assistant", "content": "PROGRESS: p\nSTALE: -\nbad \udc80 byte"}, "finish_reason": "stop"}]})
    r = env.post(body())
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"].endswith("bad \ufffd byte")
    env.fake.raw(
        [
            json.dumps({"id": "y", "choices": [{"index": 0, "delta": {"role": "assistant", "content": "PROGRESS: q\nSTALE: -\n"}}]}),
            json.dumps({"id": "y", "choices": [{"index": 0, "delta": {"content": "odd \udc80"}, "finish_reason": "stop"}]}),
        ]
    )
    r = env.post(body(stream=True), session="s2")
    assert r.status_code == 200 and r.text.endswith("data: [DONE]\n\n")
    text = "".join(
        (json.loads(x[6:])["choices"] or [{"delta": {}}])[0]["delta"].get("content") or ""
        for x in r.text.splitlines()
        if x.startswith("data: {")
    )
    assert "odd" in text


BAD_REPLIES: list[tuple[str, Any, str]] = [
    ("choices of numbers", {"choices": [1]}, "choices[0]"),
    ("no choices", {"id": "x"}, "choices"),
    ("a list body", [1, 2], "body"),
    ("message a string", {"choices": [{"message": "hi"}]}, "choices[0].message"),
    ("tool call function a string", {"choices": [{"message": {"role": "assistant", "tool_calls": [{"id": "c", "function": "bash"}]}}]}, "choices[0].message.tool_calls[0].function"),
    ("content a number", {"choices": [{"message": {"role": "assistant", "content": 5}}]}, "choices[0].message.content"),
]


@pytest.mark.parametrize(("case", "reply", "param"), BAD_REPLIES, ids=[c for c, _, _ in BAD_REPLIES])
def test_malformed_upstream_replies_are_502s_naming_the_field(env: Env, case: str, reply: Any, param: str) -> None:
    env.fake.raw(reply)
    r = env.post(body(tools=[BASH]))
    assert r.status_code == 502, r.text
    err = r.json()["error"]
    assert err["code"] == "bad_upstream_response" and err["param"] == param
    assert env.post(body(tools=[BASH])).status_code == 200  # the session goes on


CHUNK = {"id": "z", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": "hi"}}]}
BAD_CHUNKS: list[tuple[str, Any]] = [
    ("a list", [1]),
    ("choices an object", {"choices": {"0": 1}}),
    ("choice a number", {"choices": [7]}),
    ("delta a string", {"choices": [{"index": 0, "delta": "hi"}]}),
    ("tool_calls an object", {"choices": [{"index": 0, "delta": {"tool_calls": {"index": 0}}}]}),
    ("tool call function a string", {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": "bash"}]}}]}),
    ("tool call index a string", {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": "0"}]}}]}),
    ("content a list", {"choices": [{"index": 0, "delta": {"content": ["a"]}}]}),
    ("not JSON", "{oops"),
    ("an error event", {"error": {"message": "overloaded"}}),
]


@pytest.mark.parametrize("position", ["first", "later"])
@pytest.mark.parametrize(("case", "chunk"), BAD_CHUNKS, ids=[c for c, _ in BAD_CHUNKS])
def test_wrong_shape_stream_chunks_end_the_stream_cleanly(env: Env, case: str, chunk: Any, position: str) -> None:
    bad = chunk if isinstance(chunk, str) else json.dumps(chunk)
    env.fake.raw([bad, json.dumps(CHUNK)] if position == "first" else [json.dumps(CHUNK), bad, json.dumps(CHUNK)])
    r = env.post(body(stream=True, tools=[BASH]))
    if position == "first":  # nothing was relayed yet: an ordinary HTTP error
        assert r.status_code == 502, r.text
        assert "\n" not in r.json()["error"]["message"]
    else:  # the stream had begun: an error event, then a proper end
        assert r.status_code == 200
        events = [x for x in r.text.splitlines() if x.startswith("data: ")]
        assert events[-1] == "data: [DONE]"
        err = json.loads(events[-2][6:])["error"]
        assert err["type"] == "upstream_error" and err["message"]
        assert "hi" in events[0]
    assert env.post(body(tools=[BASH])).status_code == 200


def test_the_validators_as_plain_functions() -> None:
    assert scrub_text("a\udc80b") == "a\ufffdb" and scrub_text("é😀") == "é😀"
    assert check_chat_request({"model": "m", "messages": [{"role": "user", "content": "\udc80"}]})["messages"][0]["content"] == "\ufffd"
    assert parse_json_body(b'{"a": "\\ud83d\\ude00"}') == {"a": "😀"}
    assert check_upstream_reply({"choices": [{"message": {"content": "x"}, "logprobs": {"v": float("-inf")}}]})["choices"][0]["logprobs"] == {"v": None}
    assert check_chunk({"choices": [{"index": 0, "delta": {"content": "\udc80"}}]})["choices"][0]["delta"]["content"] == "\ufffd"


def test_a_compressed_request_body_is_a_415_saying_so(tmp_path: Path) -> None:
    import gzip

    cfg = ProxyConfig(upstream="http://127.0.0.1:9/v1", store=str(tmp_path / "s.db"), tokenizer="off")
    body = gzip.compress(b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}')
    with TestClient(create_app(cfg), base_url="http://127.0.0.1") as c:
        for path in ("/v1/chat/completions", "/v1/messages", "/v1/responses"):
            r = c.post(path, content=body, headers={"content-type": "application/json", "content-encoding": "gzip"})
            assert r.status_code == 415, (path, r.text)
            assert "Content-Encoding 'gzip'" in r.text


@pytest.mark.parametrize("name", ["bash", "exec_command", "write_stdin", "read_file"])
def test_tool_call_arguments_nested_too_deeply_are_a_400_not_a_500(env: Env, name: str) -> None:
    # the body's own nesting is checked, but arguments are JSON text parsed again later: 5,000
    # levels were a RecursionError (chat: reading the calls; Responses: read_polls), i.e. a 500
    deep = "[" * 5000 + "]" * 5000
    tool_call = {"id": "c", "type": "function", "function": {"name": name, "arguments": deep}}
    r = env.post(body({"role": "assistant", "tool_calls": [tool_call]}, {"role": "tool", "tool_call_id": "c", "content": "x"}))
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "messages[2].tool_calls[0].function.arguments"
    items = [{"type": "message", "role": "user", "content": "go"},
             {"type": "function_call", "name": name, "call_id": "c1", "arguments": deep},
             {"type": "function_call_output", "call_id": "c1", "output": "x"}]  # fmt: skip
    r = env.c.post("/v1/responses", json={"model": "m", "input": items}, headers={"X-Refold-Session": "r"})
    assert r.status_code == 400 and "input.1.arguments" in r.json()["error"]["message"], r.text


def _delta(**delta: Any) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": delta}]}


@pytest.mark.parametrize(
    ("chunk", "param", "what"),
    [
        ({"choices": {}}, "chunk.choices", "is not a list"),
        ({"choices": [3]}, "chunk.choices[0]", "is not an object"),
        ({"choices": [{"index": "0"}]}, "chunk.choices[0].index", "is not an integer"),
        ({"choices": [{"finish_reason": 1}]}, "chunk.choices[0].finish_reason", "is not a string"),
        ({"choices": [{"delta": "hi"}]}, "chunk.choices[0].delta", "is not an object"),
        (_delta(reasoning_content=[]), "chunk.choices[0].delta.reasoning_content", "is not a string"),
        (_delta(function_call="bash"), "chunk.choices[0].delta.function_call", "is not an object"),
        (_delta(function_call={"arguments": 1}), "chunk.choices[0].delta.function_call.arguments", "is not a string"),
        (_delta(tool_calls={}), "chunk.choices[0].delta.tool_calls", "is not a list"),
        (_delta(tool_calls=[None]), "chunk.choices[0].delta.tool_calls[0]", "is not an object"),
        (_delta(tool_calls=[{"index": 5000}]), "chunk.choices[0].delta.tool_calls[0].index", "is not a small non-negative integer"),
        (_delta(tool_calls=[{"id": 7}]), "chunk.choices[0].delta.tool_calls[0].id", "is not a string"),
        (_delta(tool_calls=[{"function": []}]), "chunk.choices[0].delta.tool_calls[0].function", "is not an object"),
        (_delta(tool_calls=[{"function": {"name": 1}}]), "chunk.choices[0].delta.tool_calls[0].function.name", "is not a string"),
        ({"choices": [], "usage": 3}, "chunk.usage", "is not an object"),
    ],
)
def test_a_malformed_upstream_chunk_is_a_502_naming_the_field(chunk: dict[str, Any], param: str, what: str) -> None:
    with pytest.raises(ProxyError) as e:
        check_chunk(chunk)
    assert (e.value.status, e.value.param, str(e.value)) == (502, param, f"upstream reply: {param} {what}")


def test_unset_and_null_upstream_fields_are_no_error() -> None:
    calls = [{"index": 0, "id": None, "function": None}, {"index": 1, "function": {"name": None}}]
    assert check_chunk(_delta(content=None, function_call=None, tool_calls=calls))["choices"][0]["delta"]["tool_calls"] == calls
    assert check_chunk({"choices": None, "usage": None}) == {"choices": None, "usage": None}

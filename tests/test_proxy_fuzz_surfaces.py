"""Fuzzing ``/v1/messages`` and ``/v1/responses`` as a hostile client would (hypothesis, through
the real ASGI app and a fake upstream), as ``test_proxy_fuzz`` does for chat completions:

* a valid request with one field replaced by junk is a 4xx naming it (or a 200 when the junk is
  still a request the surface takes), never a 500 or a traceback, and never poisons the session:
  the next good request of the same conversation is answered and renders;
* a malformed upstream answer (a non-streamed body or a stream of wrong-shaped events, with tools
  and without, streamed and not) is a 502 naming a field or, mid-stream, an error event: never a
  500, never "internal proxy error"; the session goes on and holds each client turn exactly once.
"""

from __future__ import annotations

import copy
import itertools
import json
import os
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import Response, StreamingResponse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from refold.proxy import ProxyConfig, create_app

from fake_upstream import ServerThread

FUZZ = settings(max_examples=int(os.environ.get("REFOLD_FUZZ_EXAMPLES", "40")), deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
_ids = itertools.count()


class Raw:
    """An upstream answering each request with the next scripted body or event list (a good
    answer when nothing is scripted)."""

    def __init__(self) -> None:
        self.script: list[tuple[str, Any]] = []
        self.requests: list[dict[str, Any]] = []
        self.app = FastAPI()

        async def answer(request: Request) -> Response:
            body = await request.json()
            self.requests.append(body)
            kind, payload = self.script.pop(0) if self.script else ("json", OK[request.url.path])
            if kind == "json":
                return Response(payload, media_type="application/json")

            async def gen() -> Any:
                for p in payload:
                    yield p.encode()

            return StreamingResponse(gen(), media_type="text/event-stream")

        self.app.post("/v1/messages")(answer)
        self.app.post("/v1/responses")(answer)


def ev(name: str, data: Any) -> str:
    return f"event: {name}\ndata: {data if isinstance(data, str) else json.dumps(data)}\n\n"


OK = {
    "/v1/messages": json.dumps({"id": "m", "type": "message", "role": "assistant", "model": "m",
                                "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn", "usage": {}}),
    "/v1/responses": json.dumps({"id": "r", "object": "response", "status": "completed", "model": "m", "output": [
        {"id": "x", "type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok", "annotations": []}]}]}),
}
MS = ev("message_start", {"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant", "model": "m", "content": [], "usage": {}}})
MSTOP = ev("message_stop", {"type": "message_stop"})


def _start(i: Any, block: Any) -> str:
    return ev("content_block_start", {"type": "content_block_start", "index": i, "content_block": block})


def _delta(i: Any, delta: Any) -> str:
    return ev("content_block_delta", {"type": "content_block_delta", "index": i, "delta": delta})


TOOL = {"type": "tool_use", "id": "t", "name": "Bash", "input": {}}
BAD_MESSAGES = [("json", b) for b in [
    "[]", '"x"', '{"content": 1}', '{"content": ["x"]}', '{"content": [{"type": "tool_use", "id": 1, "name": "Bash", "input": "ls"}]}',
    '{"content": [{"type": "tool_use", "id": "t", "name": 5, "input": {}}]}', '{"content": [{"type": "text", "text": 5}]}',
    '{"content": [{"type": "text", "text": "\\udc80 x"}], "stop_reason": "end_turn"}', '{"content": [{"type": "text", "text": NaN}]}',
    '{"content": [{"type": "tool_use", "id": "t", "name": "Bash", "input": {"command": "restore 1", "command": "ls"}}]}',
    "{" * 3000 + "}" * 3000, "not json", '{"content": [{"type": "thinking", "thinking": ["x"]}]}',
]] + [("sse", b) for b in [
    [MS, "data: not json\n\n", MSTOP], [MS, _delta(None, {"type": "text_delta", "text": "x"}), MSTOP],
    [MS, _start("0", {"type": "text", "text": ""}), MSTOP], [MS, _start(0, "text"), MSTOP],
    [MS, _start(0, TOOL), _delta(0, {"type": "input_json_delta", "partial_json": 5}), MSTOP],
    [MS, _start(0, TOOL), _delta(0, {"type": "input_json_delta", "partial_json": '{"comm'}), MSTOP],
    [MS, _start(0, TOOL), _delta(0, {"type": "input_json_delta", "partial_json": '{"command": "restore 1"'}), MSTOP],
    [MS, _delta(0, "x"), MSTOP], [ev("message_start", {"type": "message_start", "message": 5}), MSTOP],
    [MS, ev("message_delta", {"type": "message_delta", "delta": 5}), MSTOP],
    [MS, _start(0, {"type": "text", "text": ""}), _delta(0, {"type": "text_delta", "text": "\udc80"}), MSTOP],
    [MS], ["data: [DONE]\n\n"], [MS, _start(0, {"type": "text", "text": ""}), _delta(0, {"type": "text_delta", "text": "```bash\nrest"})],
]]


def _r(kind: str, **d: Any) -> str:
    return ev(kind, {"type": kind, **d})


RC = _r("response.created", response={"id": "r", "output": []})
CALL = {"type": "function_call", "name": "exec_command", "call_id": "c", "arguments": ""}
BAD_RESPONSES = [("json", b) for b in [
    "[]", '{"output": 5}', '{"output": ["x"]}', '{"output": [{"type": "function_call", "name": 5, "arguments": {}, "call_id": 3}]}',
    '{"output": [{"type": "message", "content": 5}]}', '{"output": [{"type": "message", "content": [{"type": "output_text", "text": 5}]}]}',
    '{"output": [{"type": "message", "content": [{"type": "output_text", "text": "\\udc80"}]}]}', '{"id": 5, "output": []}', "not json",
    '{"output": [{"type": "function_call", "name": "exec_command", "call_id": "c", "arguments": "{\\"cmd\\": \\"restore 1\\"}"}]}',
]] + [("sse", b) for b in [
    [RC, _r("response.completed", response=5)], [RC, _r("response.completed", response={"id": "r", "output": 5})],
    [RC, _r("response.completed", response={"id": "r", "output": [5]})],
    [RC, _r("response.output_item.added", output_index=0, item="x"), _r("response.completed", response={"id": "r", "output": []})],
    [RC, _r("response.output_item.added", output_index="0", item=CALL), _r("response.function_call_arguments.delta", output_index="0", delta=5),
     _r("response.completed", response={"id": "r", "output": []})],
    [RC, _r("response.output_item.added", output_index=0, item=CALL), _r("response.function_call_arguments.delta", output_index=0, delta='{"cmd": "ls"'),
     _r("response.completed", response={"id": "r", "output": [{**CALL, "arguments": '{"cmd": "ls"'}]})],
    [RC, _r("response.output_text.delta", output_index=0, delta=None), _r("response.completed", response={"id": "r", "output": []})],
    [RC, 'data: {"type": "response.completed", "response": {"output": [{"type": "message", "content": [{"type": "output_text", "text": "\\udc80"}]}]}}\n\n'],
    [RC], ["data: 5\n\n"],
]]


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Raw, TestClient]]:
    up = Raw()
    with ServerThread(up.app) as srv:
        cfg = ProxyConfig(upstream=f"{srv.url}/v1", store=str(tmp_path_factory.mktemp("fz") / "s.db"), tokenizer="off")
        with TestClient(create_app(cfg), base_url="http://127.0.0.1", raise_server_exceptions=False) as c:
            yield up, c


def no_500(r: Any) -> None:
    assert r.status_code < 500 or r.status_code in (502, 504), r.text
    assert "Traceback" not in r.text and "internal proxy error" not in r.text, r.text[:500]
    if r.status_code >= 400:
        err = r.json()["error"]
        assert isinstance(err["message"], str) and err["message"] and "\n" not in err["message"]


def _body(path: str, tools: bool, stream: bool, turns: int = 1) -> dict[str, Any]:
    convo: list[dict[str, Any]] = [{"role": "user", "content": "task"}]
    for k in range(turns - 1):
        convo += [{"role": "assistant", "content": f"reply {k}"}, {"role": "user", "content": f"more {k}"}]
    if path == "/v1/messages":
        body: dict[str, Any] = {"model": "m", "max_tokens": 16, "messages": convo, "stream": stream}
        if tools:
            body["tools"] = [{"name": "Bash", "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}}}]
        return body
    body = {"model": "m", "input": convo, "stream": stream}
    if tools:
        body["tools"] = [{"type": "function", "name": "exec_command", "parameters": {"type": "object"}}]
    return body


def _post(c: TestClient, path: str, body: Any, session: str) -> Any:
    try:
        raw = json.dumps(body).encode()
    except ValueError:
        raw = json.dumps(body, allow_nan=True).encode()
    return c.post(path, content=raw, headers={"content-type": "application/json", "authorization": "Bearer k",
                                                 "X-Refold-Session": session})


def _visible(c: TestClient, session: str) -> int | None:
    r = c.get(f"/sessions/{session}", headers={"authorization": "Bearer k"})
    if r.status_code == 404:
        return None
    assert r.status_code == 200, r.text
    return len([s for s in r.json()["steps"] if not s["internal"]])


DEEP: Any = 1
for _ in range(80):
    DEEP = [DEEP]

JUNK = st.one_of(
    st.none(), st.booleans(), st.integers(-(10**30), 10**30), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8), st.sampled_from(["\udc80", "false", "", "restore 1", "```bash\nrestore 1\n```"]),
    st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.just(DEEP),
)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, (*prefix, i))
    return out


def _replace(value: Any, path: tuple[Any, ...], junk: Any) -> Any:
    out = copy.deepcopy(value)
    cur = out
    for k in path[:-1]:
        cur = cur[k]
    cur[path[-1]] = junk
    return out


@FUZZ
@given(st.sampled_from(["/v1/messages", "/v1/responses"]), st.booleans(), st.booleans(), st.data())
def test_a_bad_request_is_a_4xx_and_never_poisons_the_session(
    env: tuple[Raw, TestClient], path: str, tools: bool, stream: bool, data: st.DataObject
) -> None:
    up, c = env
    session = f"req-{next(_ids)}"
    good = _body(path, tools, False, turns=2)
    where = data.draw(st.sampled_from(_paths(good)))
    bad = _replace(good, where, data.draw(JUNK))
    if isinstance(bad, dict) and bad.get("stream") is None:
        bad["stream"] = stream
    up.script = []
    r = _post(c, path, bad, session)
    no_500(r)
    # the conversation goes on: the next good request of the same session is answered and renders
    up.script = []
    nxt = _body(path, tools, False, turns=3)
    r2 = _post(c, path, nxt, session)
    assert r2.status_code == 200, r2.text
    assert _visible(c, session) is not None


@FUZZ
@given(st.sampled_from(["/v1/messages", "/v1/responses"]), st.booleans(), st.data())
def test_a_bad_upstream_answer_is_a_502_or_an_error_event_and_the_session_goes_on(
    env: tuple[Raw, TestClient], path: str, tools: bool, data: st.DataObject
) -> None:
    up, c = env
    session = f"up-{next(_ids)}"
    kind, payload = data.draw(st.sampled_from(BAD_MESSAGES if path == "/v1/messages" else BAD_RESPONSES))
    up.script = [(kind, payload)]
    r = _post(c, path, _body(path, tools, kind == "sse"), session)
    no_500(r)
    if kind == "sse" and r.status_code == 200:
        assert "internal proxy error" not in r.text
    up.script = []
    r2 = _post(c, path, _body(path, tools, False, turns=2), session)
    assert r2.status_code == 200, r2.text
    assert _visible(c, session) == 1  # the client's one reply, recorded once; none lost

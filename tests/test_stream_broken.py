"""A broken upstream stream never reaches the client as a normal reply: an upstream that ignores
"stream" with a non-JSON body or a JSON body without ``choices`` is a 502 naming what was wrong;
a stream cut off after its first chunk (no finish_reason, no [DONE]) ends in an error event before
[DONE]; and nothing of a reply that did not complete is kept in the session."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import Response, StreamingResponse
from starlette.testclient import TestClient

from refold.proxy import ProxyConfig, create_app

from fake_upstream import ServerThread

CHUNK = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m"}


def _chunk(delta: dict[str, Any], finish: str | None = None) -> str:
    return "data: " + json.dumps({**CHUNK, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}) + "\n\n"


async def _ok() -> Any:
    yield _chunk({"role": "assistant", "content": "hello"})
    yield _chunk({}, "stop")
    yield "data: [DONE]\n\n"


class Broken:
    """An upstream answering each request as ``mode`` says."""

    def __init__(self) -> None:
        self.mode = "ok"
        self.calls = 0
        self.app = FastAPI()

        @self.app.post("/v1/chat/completions")
        async def chat(request: Request) -> Response:
            await request.body()
            self.calls += 1
            if self.mode == "text":  # ignores stream, not JSON
                return Response("upstream says hello", media_type="text/plain")
            if self.mode == "nochoices":
                return Response(json.dumps({"id": "x", "object": "chat.completion"}), media_type="application/json")
            if self.mode == "whole":  # ignores stream but answers a valid completion
                body = {**CHUNK, "object": "chat.completion", "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": "whole reply"}, "finish_reason": "stop"}]}
                return Response(json.dumps(body), media_type="application/json")
            if self.mode == "cut":
                return Response(_chunk({"role": "assistant", "content": "hel"}), media_type="text/event-stream")
            if self.mode == "garbage":  # an event stream with no data lines at all
                return Response("event: ping\n\n", media_type="text/event-stream")
            if self.mode == "nodone":  # finished properly, only [DONE] missing: a complete reply
                return Response(_chunk({"role": "assistant", "content": "hello"}) + _chunk({}, "stop"),
                                media_type="text/event-stream")

            return StreamingResponse(_ok(), media_type="text/event-stream")

        @self.app.post("/v1/messages")
        async def messages(request: Request) -> Response:
            await request.body()
            self.calls += 1
            if self.mode == "text":
                return Response("upstream says hello", media_type="text/plain")
            start = {"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant",
                     "model": "m", "content": [], "stop_reason": None, "usage": {"input_tokens": 1, "output_tokens": 0}}}
            events = [("message_start", start),
                      ("content_block_start", {"type": "content_block_start", "index": 0,
                                               "content_block": {"type": "text", "text": ""}}),
                      ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                               "delta": {"type": "text_delta", "text": "hel"}})]
            if self.mode != "cut":
                events += [("content_block_stop", {"type": "content_block_stop", "index": 0}),
                           ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"},
                                              "usage": {"output_tokens": 1}}),
                           ("message_stop", {"type": "message_stop"})]
            sse = "".join(f"event: {n}\ndata: {json.dumps(d)}\n\n" for n, d in events)
            return Response(sse, media_type="text/event-stream")

        @self.app.post("/v1/responses")
        async def responses(request: Request) -> Response:
            await request.body()
            if self.mode == "text":
                return Response("upstream says hello", media_type="text/plain")
            resp = {"id": "resp_1", "object": "response", "status": "in_progress", "model": "m", "output": []}
            events = [("response.created", {"type": "response.created", "response": resp}),
                      ("response.output_text.delta", {"type": "response.output_text.delta", "item_id": "m1",
                                                      "output_index": 0, "content_index": 0, "delta": "hel"})]
            if self.mode != "cut":
                item = {"type": "message", "id": "m1", "role": "assistant", "status": "completed",
                        "content": [{"type": "output_text", "text": "hel", "annotations": []}]}
                done = {**resp, "status": "completed", "output": [item]}
                events.append(("response.completed", {"type": "response.completed", "response": done}))
            sse = "".join(f"event: {n}\ndata: {json.dumps(d)}\n\n" for n, d in events)
            return Response(sse, media_type="text/event-stream")



@pytest.fixture()
def broken() -> Iterator[tuple[Broken, str]]:
    b = Broken()
    with ServerThread(b.app) as up:
        yield b, f"{up.url}/v1"


def _body(stream: bool = True) -> dict[str, Any]:
    return {
        "model": "m",
        "stream": stream,
        "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "say hello"}],
    }


def _events(text: str) -> list[str]:
    return [line[6:] for line in text.splitlines() if line.startswith("data: ")]


@pytest.mark.parametrize(("mode", "names"), [("text", "body"), ("nochoices", "choices"), ("garbage", "stream")])
def test_a_stream_that_never_started_properly_is_a_502_naming_the_field(
    broken: tuple[Broken, str], tmp_path: Path, mode: str, names: str
) -> None:
    b, url = broken
    b.mode = mode
    with TestClient(create_app(ProxyConfig(upstream=url, store=str(tmp_path / "s.db"), tokenizer="off")),
                    base_url="http://127.0.0.1") as c:
        r = c.post("/v1/chat/completions", json=_body(), headers={"X-Refold-Session": "s1"})
        assert r.status_code == 502, r.text
        err = r.json()["error"]
        assert err["code"] == "bad_upstream_response" and err["param"] == names
        assert "Traceback" not in r.text
        # the session is still fine: a working upstream answers the same request next
        b.mode = "ok"
        again = c.post("/v1/chat/completions", json=_body(), headers={"X-Refold-Session": "s1"})
        assert again.status_code == 200
        assert [json.loads(e)["choices"][0]["delta"].get("content") for e in _events(again.text)[:-1]][0] == "hello"


def test_a_stream_cut_off_after_one_chunk_ends_in_an_error_event(broken: tuple[Broken, str], tmp_path: Path) -> None:
    b, url = broken
    b.mode = "cut"
    with TestClient(create_app(ProxyConfig(upstream=url, store=str(tmp_path / "s.db"), tokenizer="off")),
                    base_url="http://127.0.0.1") as c:
        r = c.post("/v1/chat/completions", json=_body(), headers={"X-Refold-Session": "s1"})
        assert r.status_code == 200  # the stream had begun: the failure is an event in it
        events = _events(r.text)
        assert events[-1] == "[DONE]"
        err = json.loads(events[-2])["error"]
        assert "cut off" in err["message"] and err["code"] == "bad_upstream_response"
        texts = [json.loads(e)["choices"][0]["delta"].get("content") for e in events[:-2]]
        assert "".join(t for t in texts if t) == "hel"
        # nothing of the cut reply was recorded: the session has no step
        s = c.get("/sessions/s1")
        assert s.status_code == 200 and s.json()["steps"] == []


@pytest.mark.parametrize("mode", ["whole", "nodone"])
def test_a_complete_reply_in_another_shape_is_relayed(broken: tuple[Broken, str], tmp_path: Path, mode: str) -> None:
    """Not errors: a whole completion sent instead of a stream, and a finished stream without [DONE]."""
    b, url = broken
    b.mode = mode
    with TestClient(create_app(ProxyConfig(upstream=url, store=str(tmp_path / "s.db"), tokenizer="off")),
                    base_url="http://127.0.0.1") as c:
        r = c.post("/v1/chat/completions", json=_body())
        assert r.status_code == 200
        events = _events(r.text)
        assert events[-1] == "[DONE]"
        chunks = [json.loads(e) for e in events[:-1]]
        assert not any("error" in ch for ch in chunks)
        text = "".join(ch["choices"][0]["delta"].get("content") or "" for ch in chunks if ch.get("choices"))
        assert text == ("whole reply" if mode == "whole" else "hello")
        assert any(ch["choices"][0].get("finish_reason") == "stop" for ch in chunks if ch.get("choices"))


ANTHROPIC = {"model": "m", "max_tokens": 64, "stream": True, "messages": [{"role": "user", "content": "say hello"}]}


@pytest.mark.parametrize("tools", [False, True])
def test_anthropic_streams_cut_off_or_not_streams_are_errors(
    broken: tuple[Broken, str], tmp_path: Path, tools: bool
) -> None:
    """/v1/messages: a cut-off stream ends in ``event: error`` (relayed live) or is a 502 (a round
    that may be internal is read first); a body that is no event stream is a 502."""
    b, url = broken
    body: dict[str, Any] = dict(ANTHROPIC)
    if tools:  # a shell tool: the round may be an internal context command, so it is read to its end
        body["tools"] = [{"name": "bash", "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}}}]
    with TestClient(create_app(ProxyConfig(upstream=url, store=str(tmp_path / "s.db"), tokenizer="off")),
                    base_url="http://127.0.0.1") as c:
        b.mode = "ok"
        good = c.post("/v1/messages", json=body)
        assert good.status_code == 200 and "event: message_stop" in good.text and "event: error" not in good.text
        b.mode = "cut"
        r = c.post("/v1/messages", json=body)
        if r.status_code == 200:
            assert r.text.rstrip().split("\n\n")[-1].startswith("event: error")
            assert "cut off" in r.text
        else:
            assert r.status_code == 502 and "cut off" in r.text
        b.mode = "text"
        r = c.post("/v1/messages", json=body)
        assert r.status_code == 502 and "not an event stream" in r.text and "Traceback" not in r.text


def test_responses_streams_cut_off_or_not_streams_are_errors(broken: tuple[Broken, str], tmp_path: Path) -> None:
    b, url = broken
    body = {"model": "m", "stream": True, "input": "say hello"}
    with TestClient(create_app(ProxyConfig(upstream=url, store=str(tmp_path / "s.db"), tokenizer="off")),
                    base_url="http://127.0.0.1") as c:
        b.mode = "ok"
        good = c.post("/v1/responses", json=body)
        assert good.status_code == 200 and "response.completed" in good.text and "event: error" not in good.text
        b.mode = "cut"
        r = c.post("/v1/responses", json=body)
        if r.status_code == 200:
            assert r.text.rstrip().split("\n\n")[-1].startswith("event: error") and "cut off" in r.text
        else:
            assert r.status_code == 502 and "cut off" in r.text
        b.mode = "text"
        r = c.post("/v1/responses", json=body)
        assert r.status_code == 502 and "not an event stream" in r.text


def test_a_cut_off_stream_relayed_without_rounds_ends_in_an_error_event(broken: tuple[Broken, str], tmp_path: Path) -> None:
    """``max_rounds=0``: every round is final and relayed as it comes; a cut-off one still ends in
    ``event: error`` (the relay path, not the spliced one)."""
    b, url = broken
    cfg = ProxyConfig(upstream=url, store=str(tmp_path / "s.db"), tokenizer="off", max_rounds=0)
    with TestClient(create_app(cfg), base_url="http://127.0.0.1") as c:
        for path, body in (("/v1/messages", dict(ANTHROPIC)), ("/v1/responses", {"model": "m", "stream": True, "input": "hi"})):
            b.mode = "ok"
            assert c.post(path, json=body).status_code == 200
            b.mode = "cut"
            r = c.post(path, json=body)
            assert r.status_code == 200 and "cut off" in r.text, (path, r.text[-300:])
            assert r.text.rstrip().split("\n\n")[-1].startswith("event: error")

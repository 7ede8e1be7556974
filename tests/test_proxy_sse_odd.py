"""Odd but valid event streams from a chat-completions upstream: an event whose JSON spans several
``data:`` lines (SSE joins them with a newline; pretty-printed chunks), comments, ``event:`` lines
and CRLF line ends are read as one chunk each, a byte order mark opening the stream is dropped;
a malformed chunk is still an error event."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.responses import StreamingResponse
from starlette.testclient import TestClient

from refold.proxy import ProxyConfig, create_app
from test_proxy_held_restart import _sse_message

from fake_upstream import ServerThread


def _upstream(events: list[str]) -> FastAPI:
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def chat() -> StreamingResponse:
        async def gen() -> Any:
            for e in events:
                yield e

        return StreamingResponse(gen(), media_type="text/event-stream")

    return app


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def _multiline(obj: dict[str, Any], eol: str = "\n") -> str:
    return "".join(f"data: {line}{eol}" for line in json.dumps(obj, indent=2).splitlines()) + eol


@pytest.mark.parametrize("max_rounds", [8, 0])  # 0: no round is answered, the chunks are relayed as read
@pytest.mark.parametrize("eol", ["\n", "\r\n"])
def test_a_chunk_spread_over_data_lines_is_one_chunk(tmp_path: Path, eol: str, max_rounds: int) -> None:
    events = [f": keep-alive{eol}{eol}", _multiline(_chunk({"role": "assistant", "content": "Hello"}), eol),
              f"event: message{eol}data: {json.dumps(_chunk({'content': ' world'}))}{eol}{eol}",
              _multiline(_chunk({}, "stop"), eol), f"data: [DONE]{eol}{eol}"]
    with ServerThread(_upstream(events)) as up:
        cfg = ProxyConfig(upstream=f"{up.url}/v1", store=str(tmp_path / "s.db"), tokenizer="off", max_rounds=max_rounds)
        with TestClient(create_app(cfg), base_url="http://127.0.0.1") as c:
            body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
            r = c.post("/v1/chat/completions", json=body)
    assert r.status_code == 200 and '"error"' not in r.text
    # every event the client gets is one data: line (a relayed event kept its newlines: 'data: {' alone)
    assert all(e.startswith("data: ") and "\n" not in e for e in r.text.split("\n\n") if e)
    assert _sse_message(r.text)["content"] == "Hello world"


def test_a_malformed_chunk_is_still_an_error(tmp_path: Path) -> None:
    events = [f"data: {json.dumps(_chunk({'role': 'assistant', 'content': 'Hi'}))}\n\n", 'data: {"choices": [\n\n']
    with ServerThread(_upstream(events)) as up:
        cfg = ProxyConfig(upstream=f"{up.url}/v1", store=str(tmp_path / "s.db"), tokenizer="off")
        with TestClient(create_app(cfg), base_url="http://127.0.0.1") as c:
            body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
            r = c.post("/v1/chat/completions", json=body)
    assert '"error"' in r.text and r.text.endswith("data: [DONE]\n\n")


def test_a_byte_order_mark_opening_the_stream_hides_no_chunk(tmp_path: Path) -> None:
    events = ["\ufeff", f"data: {json.dumps(_chunk({'role': 'assistant', 'content': 'Hello'}))}\n\n",
              f"data: {json.dumps(_chunk({}, 'stop'))}\n\n", "data: [DONE]\n\n"]
    with ServerThread(_upstream(events)) as up:
        cfg = ProxyConfig(upstream=f"{up.url}/v1", store=str(tmp_path / "s.db"), tokenizer="off")
        with TestClient(create_app(cfg), base_url="http://127.0.0.1") as c:
            body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
            r = c.post("/v1/chat/completions", json=body)
    assert r.status_code == 200 and _sse_message(r.text)["content"] == "Hello"

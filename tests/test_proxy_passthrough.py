"""Paths refold does not fold are forwarded to the upstream unchanged: method, path under the
upstream's base URL, query, body bytes and the answer's status, type and body."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import Response, StreamingResponse

from refold.proxy import ProxyConfig, create_app

from fake_upstream import ServerThread


class Echo:
    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []
        self.app = FastAPI()

        @self.app.api_route("/v1/{path:path}", methods=["GET", "POST", "DELETE"])
        async def any_path(request: Request, path: str) -> Response:
            raw = await request.body()
            self.seen.append({"method": request.method, "path": path, "query": request.url.query, "raw": raw,
                              "headers": dict(request.headers)})
            if path == "stream":
                async def chunks() -> Any:
                    for i in range(3):
                        yield f"data: {i}\n\n".encode()
                return StreamingResponse(chunks(), media_type="text/event-stream")
            if path == "embeddings":
                body = json.loads(raw)
                data = [{"object": "embedding", "index": i, "embedding": [0.5, float(len(t))]} for i, t in enumerate(body["input"])]
                return Response(json.dumps({"object": "list", "data": data, "model": body["model"],
                                            "usage": {"prompt_tokens": 2, "total_tokens": 2}}), media_type="application/json")
            status = 418 if "teapot" in path else 200
            return Response(json.dumps({"path": path, "echo": raw.decode()}), status_code=status,
                            media_type="application/json", headers={"x-upstream": "yes"})


@pytest.fixture()
def proxy(tmp_path: Path) -> Iterator[tuple[Echo, str]]:
    echo = Echo()
    with ServerThread(echo.app) as up:
        cfg = ProxyConfig(upstream=f"{up.url}/v1", store=str(tmp_path / "s.db"), tokenizer="off")
        with ServerThread(create_app(cfg)) as px:
            yield echo, px.url


def test_embeddings_through_the_openai_sdk(proxy: tuple[Echo, str]) -> None:
    echo, url = proxy
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="sk-e", max_retries=0)
    r = client.embeddings.create(model="emb", input=["ab", "abcd"])
    assert [d.embedding for d in r.data] == [[0.5, 2.0], [0.5, 4.0]]
    assert echo.seen[-1]["path"] == "embeddings" and echo.seen[-1]["headers"]["authorization"] == "Bearer sk-e"


def test_bytes_status_query_and_methods_unchanged(proxy: tuple[Echo, str]) -> None:
    echo, url = proxy
    raw = b'{"model": "m",   "prompt": "def f(", "max_tokens": 5}'  # odd spacing: bytes, not re-serialized JSON
    with httpx.Client(base_url=url, timeout=30) as h:
        r = h.post("/v1/completions?x=1&y=2", content=raw, headers={"content-type": "application/json", "authorization": "Bearer k"})
        assert r.status_code == 200 and r.headers["x-upstream"] == "yes"
        assert echo.seen[-1]["raw"] == raw and echo.seen[-1]["query"] == "x=1&y=2"
        r = h.post("/v1/responses/compact", content=raw, headers={"content-type": "application/json"})
        assert r.json()["path"] == "responses/compact" and echo.seen[-1]["raw"] == raw
        r = h.get("/v1/responses/resp_1/input_items")
        assert echo.seen[-1]["method"] == "GET" and echo.seen[-1]["path"] == "responses/resp_1/input_items"
        r = h.delete("/v1/responses/resp_1")
        assert echo.seen[-1]["method"] == "DELETE"
        r = h.post("/v1/teapot", content=b"{}", headers={"content-type": "application/json"})
        assert r.status_code == 418  # the upstream's status, not a proxy error
        r = h.get("/v1/stream")
        assert r.text == "data: 0\n\ndata: 1\n\ndata: 2\n\n"
        assert h.get("/v1/models").status_code in (200, 404)  # the proxy's own /v1/models route still answers


def test_proxy_token_is_not_forwarded(tmp_path: Path) -> None:
    echo = Echo()
    with ServerThread(echo.app) as up:
        cfg = ProxyConfig(upstream=f"{up.url}/v1", store=str(tmp_path / "s.db"), tokenizer="off",
                          tokens=("tok",), upstream_key="sk-up")
        with ServerThread(create_app(cfg)) as px, httpx.Client(base_url=px.url, timeout=30) as h:
            assert h.post("/v1/embeddings", json={"model": "e", "input": ["a"]}).status_code == 401
            r = h.post("/v1/embeddings", json={"model": "e", "input": ["a"]}, headers={"authorization": "Bearer tok", "x-api-key": "tok"})
            assert r.status_code == 200
            assert echo.seen[-1]["headers"]["authorization"] == "Bearer sk-up"
            assert "tok" not in json.dumps({k: v for k, v in echo.seen[-1]["headers"].items() if k != "authorization"})

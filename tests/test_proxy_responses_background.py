"""A Response answered in the background (``background: true``: queued, no output yet) and then
continued by ``previous_response_id``: the prompt holds the model's output, read from the upstream
once the response has finished (it was left out: a function_call_output went upstream without
its call); one still running is a 400 saying so; a restart in between changes nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.testclient import TestClient

from refold.config import DEFAULT
from refold.proxy import ProxyConfig, create_app
from test_proxy_responses import fcall, response_object

from fake_upstream import ServerThread


class Background:
    """A Responses upstream whose background responses finish when ``done`` is set."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.stored: dict[str, dict[str, Any]] = {}
        self.done = False
        self.app = FastAPI()

        @self.app.post("/v1/responses")
        async def create(request: Request) -> JSONResponse:
            body = await request.json()
            self.requests.append(body)
            n = len(self.requests)
            final = response_object(n, body["model"], [fcall(f"call_{n}", "shell", {"command": ["ls"]})])
            self.stored[final["id"]] = final
            if body.get("background"):
                return JSONResponse({**final, "status": "queued", "output": []})
            return JSONResponse(final)

        @self.app.get("/v1/responses/{rid}")
        async def get(rid: str) -> JSONResponse:
            resp = self.stored[rid]
            return JSONResponse(resp if self.done else {**resp, "status": "in_progress", "output": []})


def test_a_background_response_is_continued_with_its_output(tmp_path: Path) -> None:
    up = Background()
    h = {"Authorization": "Bearer k"}
    with ServerThread(up.app) as server:
        cfg = ProxyConfig(upstream=f"{server.url}/v1", store=str(tmp_path / "s.db"), tokenizer="off",
                          config=DEFAULT.override(["prompt.deferred=false"]))
        with TestClient(create_app(cfg), base_url="http://127.0.0.1") as c:
            r = c.post("/v1/responses", json={"model": "m", "input": "task", "background": True}, headers=h)
            assert r.status_code == 200 and r.json()["status"] == "queued"
            rid = r.json()["id"]
            more = {"model": "m", "previous_response_id": rid,
                    "input": [{"type": "function_call_output", "call_id": "call_1", "output": "files"}]}
            r = c.post("/v1/responses", json=more, headers=h)
            assert r.status_code == 400, r.text
            assert r.json()["error"]["code"] == "previous_response_not_completed"
            assert len(up.requests) == 1  # nothing was sent
        up.done = True
        with TestClient(create_app(cfg), base_url="http://127.0.0.1") as c:  # after a restart
            r = c.post("/v1/responses", json=more, headers=h)
            assert r.status_code == 200, r.text
            sent = up.requests[-1]["input"]
            assert [(i.get("type"), i.get("call_id")) for i in sent[1:]] == [
                ("function_call", "call_1"), ("function_call_output", "call_1")]
            # the chain goes on from the finished response
            r = c.post("/v1/responses", json={"model": "m", "previous_response_id": r.json()["id"], "input": [
                {"type": "function_call_output", "call_id": "call_2", "output": "more files"}]}, headers=h)
            assert r.status_code == 200, r.text
            assert [i.get("call_id") for i in up.requests[-1]["input"][1:]] == ["call_1", "call_1", "call_2", "call_2"]

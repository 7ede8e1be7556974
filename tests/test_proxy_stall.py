"""One tenant's long first request must not stall another tenant's chat: replaying, hashing and
rendering thousands of steps runs in worker threads, not on the event loop.

Each test blocks one of those stages of a big new session until a small request of another key
has completed. Were the stage on the event loop, the small request could not even start, the hook
would give up waiting and the order check fails (the wait is only a safety net, not a timing)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from refold.proxy import ProxyConfig, create_app
from refold.proxy import chat as chat_mod
from refold.proxy import sessions as sessions_mod

from fake_upstream import FakeUpstream, ServerThread

BIG = "many4"


def _big_body(steps: int) -> dict[str, Any]:
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "Fix the bug in the parser."},
    ]
    for i in range(steps):
        msgs.append({"role": "assistant", "content": f"PROGRESS: step {i}\nSTALE: -\n```bash\ncat f{i % 7}.py\n```"})
        msgs.append({"role": "user", "content": f"output {i}\n" + "x = 1\n" * 5})
    return {"model": "m", "messages": msgs}


@pytest.fixture()
def upstream() -> Iterator[tuple[FakeUpstream, str]]:
    f = FakeUpstream()
    with ServerThread(f.app) as up:
        yield f, f"{up.url}/v1"


class Gate:
    """Blocks the big session's stage until the small request is done; records the order."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.released = threading.Event()
        self.order: list[str] = []
        self.lock = threading.Lock()

    def hold(self) -> None:
        self.entered.set()
        if not self.released.wait(20):  # a safety net: the loop was blocked, the small one never ran
            self.note("gave up")

    def note(self, what: str) -> None:
        with self.lock:
            self.order.append(what)


def _hook(monkeypatch: pytest.MonkeyPatch, stage: str, gate: Gate) -> None:
    if stage == "replay":
        build = sessions_mod.Session.build

        def blocking_build(self: sessions_mod.Session, digest: str, renderer: Any) -> Any:
            if self.name == BIG:
                gate.hold()
            return build(self, digest, renderer)

        monkeypatch.setattr(sessions_mod.Session, "build", blocking_build)
    elif stage == "hash":
        stored = sessions_mod._stored_steps

        def blocking_stored(base: str, new: Any, now: float) -> Any:
            if len(new) > 100:
                gate.hold()
            return stored(base, new, now)

        monkeypatch.setattr(sessions_mod, "_stored_steps", blocking_stored)
    else:
        render = chat_mod.ChatService._render_with

        def blocking_render(self: Any, renderer: Any, view: Any, tail: Any) -> Any:
            if view.history.source == f"session:{BIG}":
                gate.hold()
            return render(self, renderer, view, tail)

        monkeypatch.setattr(chat_mod.ChatService, "_render_with", blocking_render)


@pytest.mark.parametrize("stage", ["replay", "hash", "render"])
@pytest.mark.parametrize("stream", [False, True])
def test_a_long_first_request_does_not_block_another_tenant(
    upstream: tuple[FakeUpstream, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    stage: str,
    stream: bool,
) -> None:
    f, url = upstream
    gate = Gate()
    _hook(monkeypatch, stage, gate)
    app = create_app(ProxyConfig(upstream=url, store=str(tmp_path / "s.db"), tokenizer="off"))
    big = {**_big_body(300), "stream": stream}
    small = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": stream}

    async def run() -> tuple[httpx.Response, httpx.Response]:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1", timeout=60) as c:

                async def send_big() -> httpx.Response:
                    r = await c.post(
                        "/v1/chat/completions", json=big,
                        headers={"Authorization": "Bearer k2", "X-Refold-Session": BIG},
                    )
                    gate.note("big")
                    return r

                async def send_small() -> httpx.Response:
                    await asyncio.to_thread(gate.entered.wait, 30)  # the big one is inside the stage
                    r = await c.post("/v1/chat/completions", json=small, headers={"Authorization": "Bearer k9"})
                    gate.note("small")
                    gate.released.set()
                    return r

                out = await asyncio.gather(send_big(), send_small())
                # nothing lost or doubled: the big session holds its 300 steps, once
                got = await c.get(f"/sessions/{BIG}", headers={"Authorization": "Bearer k2"})
                assert got.status_code == 200 and len(got.json()["steps"]) == 300
                return out

    r_big, r_small = asyncio.run(run())
    assert gate.order == ["small", "big"]
    assert r_small.status_code == 200 and r_big.status_code == 200, (r_small.text, r_big.text)
    assert int(r_big.headers["X-Refold-Steps"]) == 300
    assert len(f.requests) == 2

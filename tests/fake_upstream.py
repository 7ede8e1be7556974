"""Test helpers: a scripted OpenAI-compatible upstream, servers on loopback threads, redis-server.

The fake upstream decides each reply from the request alone, so any number of sessions and
proxy processes can share it:

* the reply is a shell tool call ``echo turn-<n>`` (``n`` = assistant messages so far + 1), or a
  ```bash block when the request has no tools, always opening with PROGRESS/STALE lines;
* ``RESTORE:<n>`` in the last message makes it call ``restore`` first (the advertised function
  tool if present, else ``restore <n>`` as a shell command), once; a ``[context-manager] Step``
  answer in the last message ends that;
* ``FAIL:<status>`` answers with an OpenAI-style error, ``SLOW:<seconds>`` sleeps first;
* ``script(...)`` queues tool calls (one per upstream request, in order) that win over the rules
  above: span and ledger commands through the proxy's function tools or a shell command;
* ``HOLD`` in the last message makes a stream pause after its first content delta until
  ``release`` is set (shows whether the proxy relays deltas as they arrive); a scripted
  ``("__hold__", {})`` makes the next request wait for ``release`` before answering (``holding``
  is set meanwhile), e.g. to kill the proxy during that request;
* ``raw(...)`` queues exact answers that win over everything: a JSON body (any value, even a
  malformed reply) or, for a stream, a list of SSE ``data:`` payloads sent as they are;
* ``TALK`` in the last message adds a line of reasoning after the head;
* ``DELAY:<ms>`` in the last message makes a stream wait that long before each event (a model
  generating tokens; the TTFT benchmark's upstream);
* usage reports ``cached_tokens`` as the character prefix shared with the previous request / 4.

``Scripted`` is a streaming upstream that answers scripted deltas, one reply per request, pausing
at ``PAUSE`` (``call`` builds a streamed tool call); ``asgi_proxy`` runs the proxy app in-process
behind an httpx client. conftest.py serves both upstreams as fixtures (``upstream``, ``scripted``).
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager, suppress
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

# the browser tests' Chromium (Debian's; CI installs it with apt-get install chromium)
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
    "--disable-quic",
]


AUTH = {"Authorization": "Bearer k"}
BASH_TOOLS = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}}]
"""One function tool, ``bash(command)``: what the proxy tests' clients offer."""


@asynccontextmanager
async def asgi_proxy(cfg: Any, base: str = "http://127.0.0.1:8077", **kw: Any) -> AsyncIterator[Any]:
    """``create_app(cfg, **kw)`` started (its lifespan) and an httpx client calling it in-process."""
    import httpx

    from refold.proxy import create_app

    app = create_app(cfg, **kw)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=base, timeout=60) as c:
            yield c


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content or ""


class FakeUpstream:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._last = ""
        self._script: collections.deque[tuple[str, dict[str, Any]]] = collections.deque()
        self._scripted = 0
        self._raw: collections.deque[Any] = collections.deque()
        self.release = threading.Event()
        self.holding = threading.Event()
        self.app = self._build()

    def script(self, *calls: tuple[str, dict[str, Any]]) -> None:
        """Answer the next requests with these tool calls, one each: ``("fold_span", {"conclusion":
        ...})`` calls the function tool, ``("bash", {"command": ...})`` the shell."""
        with self._lock:
            self._script.extend(calls)

    def raw(self, *answers: Any) -> None:
        """Answer the next requests with exactly these: a JSON value, or for a stream a list of
        ``data:`` payloads (strings; ``[DONE]`` is added)."""
        with self._lock:
            self._raw.extend(answers)

    def scripted_left(self) -> int:
        with self._lock:
            return len(self._script)

    def _build(self) -> FastAPI:
        app = FastAPI()

        @app.get("/v1/models")
        async def models(request: Request) -> dict[str, Any]:
            return {"object": "list", "data": [{"id": "fake-model", "object": "model", "owned_by": "tests"}]}

        @app.post("/v1/chat/completions")
        async def chat(request: Request) -> Response:
            body = await request.json()
            with self._lock:
                self.requests.append({"body": body, "auth": request.headers.get("authorization")})
            with self._lock:
                hold = bool(self._script) and self._script[0][0] == "__hold__"
                if hold:
                    self._script.popleft()
            if hold:
                self.holding.set()
                await asyncio.to_thread(self.release.wait, 60)
            with self._lock:
                raw = self._raw.popleft() if self._raw else None
            if raw is not None:
                if isinstance(raw, list):
                    events = "".join(f"data: {e}\n\n" for e in raw) + "data: [DONE]\n\n"
                    return Response(events, media_type="text/event-stream")
                return Response(json.dumps(raw), media_type="application/json")
            last = _text(body["messages"][-1].get("content"))
            if m := re.search(r"SLOW:(\d+(?:\.\d+)?)", last):
                await asyncio.sleep(float(m.group(1)))
            if m := re.search(r"FAIL:(\d{3})", last):
                return JSONResponse(
                    {"error": {"message": "scripted failure", "type": "server_error", "code": None}},
                    status_code=int(m.group(1)),
                )
            message = self.reply(body)
            usage = self.usage(body, message)
            if body.get("stream"):
                return StreamingResponse(self._stream(body, message, usage), media_type="text/event-stream")
            return JSONResponse(
                {
                    "id": "chatcmpl-fake",
                    "object": "chat.completion",
                    "created": 1,
                    "model": body["model"],
                    "choices": [
                        {
                            "index": 0,
                            "message": message,
                            "finish_reason": "tool_calls" if message.get("tool_calls") else "stop",
                        }
                    ],
                    "usage": usage,
                }
            )

        return app

    def reply(self, body: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            item = self._script.popleft() if self._script else None
            self._scripted += item is not None
            k = self._scripted
        if item is not None:
            message = _call(f"PROGRESS: {item[0]} {k}\nSTALE: -", item[0], item[1], k)
            message["tool_calls"][0]["id"] = f"call_s{k}"
            return message
        msgs = body["messages"]
        n = sum(1 for m in msgs if m.get("role") == "assistant") + 1
        last = _text(msgs[-1].get("content"))
        tools = body.get("tools")
        names = {(t.get("function") or {}).get("name") for t in tools or []}
        want = re.search(r"RESTORE:(\d+)", last)
        if want and "[context-manager] Step" not in last:
            head = f"PROGRESS: restore step {want.group(1)}\nSTALE: -"
            if "restore" in names:
                return _call(head, "restore", {"steps": want.group(1)}, n)
            if tools:
                return _call(head, "bash", {"command": f"restore {want.group(1)}"}, n)
            return {"role": "assistant", "content": f"{head}\n```bash\nrestore {want.group(1)}\n```"}
        head = f"PROGRESS: step {n}\nSTALE: -"
        if "TALK" in last:  # some reasoning between the head and the command, as models write
            head += "\nThe last output shows what I expected, so the next command checks the result."
        if tools:
            return _call(head, "bash", {"command": f"echo turn-{n}"}, n)
        return {"role": "assistant", "content": f"{head}\n```bash\necho turn-{n}\n```"}

    def usage(self, body: dict[str, Any], message: dict[str, Any]) -> dict[str, Any]:
        text = json.dumps(body["messages"], sort_keys=True)
        with self._lock:
            shared = len(_common_prefix(self._last, text))
            self._last = text
        return {
            "prompt_tokens": len(text) // 4,
            "completion_tokens": len(json.dumps(message)) // 4,
            "total_tokens": len(text) // 4 + len(json.dumps(message)) // 4,
            "prompt_tokens_details": {"cached_tokens": shared // 4},
        }

    async def _stream(self, body: dict[str, Any], message: dict[str, Any], usage: dict[str, Any]) -> Any:
        base = {
            "id": "chatcmpl-fake",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": body["model"],
        }

        def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
            return (
                "data: "
                + json.dumps({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
                + "\n\n"
            )

        last = _text(body["messages"][-1].get("content"))
        delay = float(m.group(1)) / 1000 if (m := re.search(r"DELAY:(\d+(?:\.\d+)?)", last)) else 0.0
        yield chunk({"role": "assistant", "content": ""})
        content = message.get("content") or ""
        hold = "HOLD" in last
        for i in range(0, len(content), 7):
            if delay:
                await asyncio.sleep(delay)
            yield chunk({"content": content[i : i + 7]})
            if hold and i == 0:
                await asyncio.to_thread(self.release.wait, 60)
        for i, call in enumerate(message.get("tool_calls") or []):
            fn = call["function"]
            yield chunk(
                {
                    "tool_calls": [
                        {
                            "index": i,
                            "id": call["id"],
                            "type": "function",
                            "function": {"name": fn["name"], "arguments": ""},
                        }
                    ]
                }
            )
            args = fn["arguments"]
            for j in range(0, len(args), 5):
                if delay:
                    await asyncio.sleep(delay)
                yield chunk({"tool_calls": [{"index": i, "function": {"arguments": args[j : j + 5]}}]})
        yield chunk({}, "tool_calls" if message.get("tool_calls") else "stop")
        if (body.get("stream_options") or {}).get("include_usage"):
            yield "data: " + json.dumps({**base, "choices": [], "usage": usage}) + "\n\n"
        yield "data: [DONE]\n\n"


def _call(content: str, name: str, args: dict[str, Any], n: int) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": content,
        "tool_calls": [
            {
                "id": f"call_{n}_{name}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)},
            }
        ],
    }


def _common_prefix(a: str, b: str) -> str:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return a[:n]


class _Server(uvicorn.Server):
    """uvicorn's server, stopped by an event instead of its 0.1 s polling tick and without the 0.1 s
    grace sleep before closing: a test's server has no request worth finishing, and those 0.2 s per
    server were about a tenth of the suite's wall time."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop = asyncio.Event()

    async def main_loop(self) -> None:
        self._stop = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        await self.on_tick(0)  # the date header
        if not self.should_exit:  # set before the loop was known: stop() could not wake us
            await self._stop.wait()

    def stop(self) -> None:
        self.should_exit = True
        self.force_exit = True  # the test is over: do not wait for a request still sleeping (SLOW:n)
        loop = self._loop
        if loop is not None:
            with suppress(RuntimeError):  # the loop already closed
                loop.call_soon_threadsafe(self._stop.set)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        for server in self.servers:
            server.close()
        for connection in list(self.server_state.connections):
            connection.shutdown()
        for server in self.servers:
            await server.wait_closed()


PAUSE = "PAUSE"
"""In a ``Scripted`` reply: wait for ``release`` before the next delta."""


class Scripted:
    """An upstream streaming scripted replies, one per request: each a list of deltas, with
    ``PAUSE`` where it waits for ``release`` (set by the test once it has seen what came before)."""

    def __init__(self) -> None:
        self.replies: list[list[Any]] = []
        self.requests: list[dict[str, Any]] = []
        self.release = threading.Event()
        self.app = FastAPI()

        @self.app.post("/v1/chat/completions")
        async def chat(request: Request) -> StreamingResponse:
            body = await request.json()
            self.requests.append(body)
            script = self.replies.pop(0)
            return StreamingResponse(self._stream(script), media_type="text/event-stream")

    async def _stream(self, script: list[Any]) -> Any:
        base = {"id": "chatcmpl-s", "object": "chat.completion.chunk", "created": 1, "model": "m"}
        yield "data: " + json.dumps({**base, "choices": [{"index": 0, "delta": {"role": "assistant"}}]}) + "\n\n"
        finish = "stop"
        for d in script:
            if d == PAUSE:
                await asyncio.to_thread(self.release.wait, 30)
                continue
            finish = "tool_calls" if "tool_calls" in d else finish
            yield "data: " + json.dumps({**base, "choices": [{"index": 0, "delta": d, "finish_reason": None}]}) + "\n\n"
        yield "data: " + json.dumps({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}) + "\n\n"
        usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
        yield "data: " + json.dumps({**base, "choices": [], "usage": usage}) + "\n\n"
        yield "data: [DONE]\n\n"


def call(index: int, name: str, args: str, cid: str, pause_at: int | None = None) -> list[Any]:
    """A streamed tool call: its name first, then its arguments in 4-character pieces."""
    out: list[Any] = [{"tool_calls": [{"index": index, "id": cid, "type": "function", "function": {"name": name, "arguments": ""}}]}]
    for j in range(0, len(args), 4):
        if pause_at is not None and j == pause_at:
            out.append(PAUSE)
        out.append({"tool_calls": [{"index": index, "function": {"arguments": args[j : j + 4]}}]})
    return out


class ServerThread:
    """Run an ASGI app with uvicorn on a loopback port in a daemon thread."""

    def __init__(self, app: Any, port: int | None = None) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = _Server(
            uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="on")
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError(f"server on port {self.port} did not start")
            time.sleep(0.002)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.stop()
        self.thread.join(timeout=20)


def wait_http(url: str, timeout: float = 30.0, alive: Callable[[], bool] | None = None) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while True:
        try:
            if httpx.get(url, timeout=2).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        if alive is not None and not alive():
            raise RuntimeError(f"{url}: the server exited before it came up")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{url} did not come up")
        time.sleep(0.01)


class ServeProcess:
    """``refold serve ARGS`` in a process of its own, with the parts of ``subprocess.Popen`` the
    durability tests use (``send_signal``, ``kill``, ``terminate``, ``wait``, ``poll``, ``pid``).

    The process is forked from a fork server (one per test process) that has already imported the
    serve path, instead of a new interpreter importing it each time (~1.1 s of CPU per start, 15
    starts in the suite). It is still a separate process that a SIGKILL takes down mid-request,
    and every start runs ``main(["serve", ...])`` from the beginning: nothing of a killed process
    survives except what it wrote to its store."""

    def __init__(self, args: list[str]) -> None:
        fd, self.log = tempfile.mkstemp(prefix="refold-serve-", suffix=".log")
        os.close(fd)
        self._proc = _forkserver().Process(target=_serve_main, args=(args, self.log), daemon=True)
        self._proc.start()
        self.pid = self._proc.pid

    def send_signal(self, sig: int) -> None:
        if self._proc.exitcode is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def poll(self) -> int | None:
        return self._proc.exitcode

    def wait(self, timeout: float | None = None) -> int:
        self._proc.join(timeout)
        if self._proc.exitcode is None:
            raise subprocess.TimeoutExpired(["refold", "serve"], timeout or 0)
        with suppress(OSError):
            os.unlink(self.log)
        return self._proc.exitcode

    def stderr_tail(self, chars: int = 2000) -> str:
        try:
            with open(self.log, encoding="utf-8", errors="replace") as f:
                return f.read()[-chars:]
        except OSError:
            return ""


_SERVE_PRELOAD = [
    "refold.cli",
    "refold.cli.serve",
    "refold.proxy.app",
    "refold.proxy.store",
    "refold.proxy.redis_store",
    "uvicorn",
    "fake_upstream",
]


def _forkserver() -> Any:
    import multiprocessing

    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(_SERVE_PRELOAD)
    return ctx


def _serve_main(args: list[str], log: str) -> None:
    from refold.cli import main

    # stdout to nowhere, stderr to a file (the fork server's own descriptors belong to whichever
    # test started it)
    with open(os.devnull, "wb") as null, open(log, "ab") as err:
        os.dup2(null.fileno(), 1)
        os.dup2(err.fileno(), 2)
    raise SystemExit(main(["serve", *args]))


def start_serve(args: list[str], port: int) -> ServeProcess:
    """``refold serve ARGS --port PORT`` in its own process, once it answers /healthz."""
    proc = ServeProcess([*args, "--port", str(port)])
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz", alive=lambda: proc.poll() is None)
    except RuntimeError as e:
        proc.kill()
        tail = proc.stderr_tail()
        with suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=20)
        raise RuntimeError(f"{e}; its stderr ends:\n{tail}") from None
    return proc


@contextmanager
def redis_server() -> Iterator[str]:
    """A private redis-server on a free loopback port; yields its URL."""
    binary = shutil.which("redis-server")
    if binary is None:
        import pytest

        pytest.skip("redis-server binary is not installed (apt-get install redis-server)")
    port = free_port()
    with tempfile.TemporaryDirectory() as d:
        proc = subprocess.Popen(
            [
                binary,
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                d,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            import redis

            client = redis.Redis(host="127.0.0.1", port=port)
            deadline = time.monotonic() + 20
            while True:
                try:
                    client.ping()
                    break
                except redis.ConnectionError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
            client.close()
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            proc.terminate()
            proc.wait(timeout=20)


def collect_stream(stream: Any) -> dict[str, Any]:
    """The assistant message an openai SDK chat-completion stream adds up to."""
    content, calls = "", {}
    for ch in stream:
        d = ch.choices[0].delta if ch.choices else None
        if d is None:
            continue
        content += d.content or ""
        for tc in d.tool_calls or []:
            slot = calls.setdefault(
                tc.index, {"id": None, "type": "function", "function": {"name": "", "arguments": ""}}
            )
            slot["id"] = tc.id or slot["id"]
            slot["function"]["name"] += tc.function.name or ""
            slot["function"]["arguments"] += tc.function.arguments or ""
    return {"role": "assistant", "content": content, "tool_calls": [calls[k] for k in sorted(calls)]}

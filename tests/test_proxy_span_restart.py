"""A span opened before a SIGKILL of the proxy folds correctly after a restart (SQLite and Redis).

The proxy answers ``begin_span`` in an internal round, then is killed while its next upstream call
is in flight. The restarted process rebuilds the session from the store, including each answer's
recorded outcome, so the client's retry continues after the internal step, the span is still
open, and ``fold_span`` later collapses it exactly as a proxy that never died would.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import openai
import pytest

from refold.config import Config
from refold.render import Renderer
from test_proxy_spans import AUTH, Agent, rebuilt, texts

from fake_upstream import FakeUpstream, ServeProcess, ServerThread, free_port, redis_server, start_serve

CONCLUSION = "the crash comes from parse.py:12 because the loop skips the last token"


def start_proxy(upstream: str, store: str, port: int) -> ServeProcess:
    return start_serve(["--upstream", upstream, "--store", store, "--tokenizer", "off", "--k", "2", "--context-tools-beside-shell"], port)


@contextmanager
def store_url(kind: str, tmp_path: Path) -> Iterator[str]:
    if kind == "redis":
        with redis_server() as url:
            yield url
    else:
        yield str(tmp_path / "sessions.db")


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
def test_open_span_survives_sigkill_and_folds_after_restart(kind: str, tmp_path: Path) -> None:
    fake = FakeUpstream()
    port = free_port()
    with ServerThread(fake.app) as up, store_url(kind, tmp_path) as store:
        proc = start_proxy(f"{up.url}/v1", store, port)
        try:
            a = Agent(f"http://127.0.0.1:{port}", "restart")
            a.turn()
            a.turn()
            fake.script(("begin_span", {"question": "why does the parser crash"}), ("__hold__", {}))
            failed: list[BaseException] = []

            def call() -> None:
                try:
                    a.turn()
                except BaseException as e:  # noqa: BLE001 - the connection dies with the proxy
                    failed.append(e)

            t = threading.Thread(target=call)
            t.start()
            assert fake.holding.wait(60), "the request after begin_span never reached the upstream"
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=20)
            t.join(timeout=60)
            fake.release.set()
            assert failed and isinstance(failed[0], openai.APIConnectionError)
        finally:
            if proc.poll() is None:
                proc.kill()
        proc = start_proxy(f"{up.url}/v1", store, port)
        try:
            a.client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="sk-s", max_retries=0)
            a.turn()  # the retry: same messages as the request that died
            retry = texts(fake.requests[-1]["body"])
            assert 'Span S1 opened at step 3: "why does the parser crash"' in retry
            a.turn()
            a.turn()
            fake.script(
                ("fold_span", {"conclusion": "it crashes"}), ("fold_span", {"conclusion": CONCLUSION})
            )
            a.turn()
            a.turn()
            bodies = [r["body"] for r in fake.requests]
            assert any("fold_span refused, span S1" in texts(b) for b in bodies)
            last = texts(bodies[-1])
            assert "Span S1 folded: steps 3-8" in last and f"Conclusion: {CONCLUSION}" in last
            assert "output of echo turn-4" not in last
            view = httpx.get(f"http://127.0.0.1:{port}/sessions/restart", headers=AUTH).json()
            assert [s["internal"] for s in view["steps"]] == [False, False, True] + [False] * 3 + [
                True,
                True,
                False,
            ]
            # the history rebuilt from the store renders exactly what the upstream received last
            rendered = Renderer(Config.parse(k=2)).render(rebuilt(view))  # serve's defaults
            assert rendered.messages == bodies[-1]["messages"]
        finally:
            proc.terminate()
            proc.wait(timeout=20)

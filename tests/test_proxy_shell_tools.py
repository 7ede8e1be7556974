"""A client with a shell tool gets no context function tools by default: its shell calls carry the
context commands (``restore 1`` as a command), which the proxy answers; the schemas would only
add several hundred prompt tokens to every call. ``context_tools_beside_shell`` offers them too."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from refold.proxy import ProxyConfig, create_app

from fake_upstream import FakeUpstream, ServerThread

BASH = {"type": "function", "function": {"name": "bash", "parameters": {"type": "object",
        "properties": {"command": {"type": "string"}}, "required": ["command"]}}}
READ = {"type": "function", "function": {"name": "read_file", "parameters": {"type": "object",
        "properties": {"path": {"type": "string"}}, "required": ["path"]}}}


def serve(db: Path, **kw: Any) -> Iterator[tuple[FakeUpstream, str]]:
    fake = FakeUpstream()
    with ServerThread(fake.app) as up:
        cfg = ProxyConfig(upstream=f"{up.url}/v1", store=str(db), tokenizer="off", **kw)
        with ServerThread(create_app(cfg)) as px:
            yield fake, px.url


@pytest.fixture()
def default(tmp_path: Path) -> Iterator[tuple[FakeUpstream, str]]:
    yield from serve(tmp_path / "default.db")


@pytest.fixture()
def beside(tmp_path: Path) -> Iterator[tuple[FakeUpstream, str]]:
    yield from serve(tmp_path / "beside.db", context_tools_beside_shell=True)


def loop(url: str, tools: list[dict[str, Any]], turns: int, last: str) -> dict[str, Any]:
    """A tool agent's turns; the last tool output asks the fake model to restore step 1."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Fix the bug."}]
    with httpx.Client(base_url=url, timeout=30) as c:
        for t in range(turns):
            r = c.post("/v1/chat/completions", json={"model": "m", "messages": messages, "tools": tools})
            assert r.status_code == 200, r.text
            msg = r.json()["choices"][0]["message"]
            messages.append(msg)
            for call in msg.get("tool_calls") or []:
                out = last if t == turns - 1 else f"output {t} " + "x" * 400
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": out})
        r = c.post("/v1/chat/completions", json={"model": "m", "messages": messages, "tools": tools})
        assert r.status_code == 200, r.text
        return dict(r.json()["choices"][0]["message"])


def names(request: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in request["body"].get("tools") or []]


def test_a_shell_client_is_offered_no_context_tools_and_its_shell_restore_is_answered(
    default: tuple[FakeUpstream, str],
) -> None:
    fake, url = default
    reply = loop(url, [BASH], 3, "done RESTORE:1")
    assert all(names(r) == ["bash"] for r in fake.requests)
    # the fake model ran `restore 1` through bash; the proxy answered it and the client never saw it
    restore_calls = [r for r in fake.requests if "[context-manager] Step 1" in str(r["body"]["messages"][-1])]
    assert restore_calls, "the shell-carried restore was not answered inside the proxy"
    assert "restore" not in str(reply.get("tool_calls"))


def test_beside_shell_offers_them_and_a_client_without_a_shell_always_gets_them(
    beside: tuple[FakeUpstream, str], default: tuple[FakeUpstream, str]
) -> None:
    fake, url = beside
    loop(url, [BASH], 1, "done")
    assert "restore" in names(fake.requests[0]) and names(fake.requests[0])[0] == "bash"
    fake, url = default
    loop(url, [READ], 1, "done")
    assert names(fake.requests[0])[0] == "read_file" and "restore" in names(fake.requests[0])

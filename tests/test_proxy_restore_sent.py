"""``restore`` through the proxy shows a reply's tool calls as the client sent them (Claude Code's
``Bash`` with ``{"command", "description"}``, Codex's ``shell`` with its argv), not as the session
stores them (``bash`` with ``{"command"}``); the command, the reply text and the outputs exact. The
core reads no proxy data: the proxy hands ``restore`` a reader of the native blocks it kept
(``proxy.sent_calls``), and without one ``restore`` shows the stored form."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest

from refold.config import DEFAULT
from refold.history import History
from refold.proxy import ProxyConfig, anthropic_wire, create_app, responses_wire
from refold.proxy.sent_calls import KEYS, call_lines
from refold.restore import restore_text
from test_proxy_anthropic import BASH, Env, FakeAnthropic, _text_of
from test_proxy_responses import SHELL, FakeResponses, as_input, fcall, item_text
from test_proxy_responses import Env as REnv

from fake_upstream import ServerThread


def _proxy(fake: Any, tmp_path: Path) -> Iterator[str]:
    with ServerThread(fake.app) as up:
        cfg = ProxyConfig(context_tools_beside_shell=True, upstream=f"{up.url}/v1", store=str(tmp_path / "s.db"),
                          tokenizer="chars4", config=DEFAULT.override(["prompt.deferred=false"]))
        with ServerThread(create_app(cfg)) as px:
            yield px.url


@pytest.fixture()
def env(tmp_path: Path) -> Iterator[Env]:
    fake = FakeAnthropic()
    for url in _proxy(fake, tmp_path):
        yield Env(fake, url)


@pytest.fixture()
def renv(tmp_path: Path) -> Iterator[REnv]:
    fake = FakeResponses()
    for url in _proxy(fake, tmp_path):
        yield REnv(fake, url)


def test_claude_codes_bash_call_is_restored_as_sent(env: Env) -> None:
    client = anthropic.Anthropic(base_url=env.url, api_key="k", max_retries=0, default_headers={"X-Refold-Session": "cc"})
    messages: list[Any] = [{"role": "user", "content": "Task"}]
    sent_input = {"command": "cat src/app.py | head -40", "description": "Show the app's first lines"}
    for t in range(3):
        inp = sent_input if t == 0 else {"command": f"echo {t}", "description": f"Say {t}"}
        env.fake.script.append([{"type": "text", "text": f"Looking {t}."}, {"type": "tool_use", "id": f"toolu_{t}", "name": "Bash", "input": inp}])
        r = client.messages.create(model="m", max_tokens=64, messages=messages, tools=[BASH])
        messages += [{"role": "assistant", "content": r.content},
                     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"toolu_{t}", "content": f"out {t}\nline ü"}]}]
    messages[-1]["content"].append({"type": "text", "text": "RESTORE:1"})
    client.messages.create(model="m", max_tokens=64, messages=messages, tools=[BASH])
    answer = env.fake.messages_requests[-1]["body"]["messages"][-1]["content"]
    text = _text_of([next(b for b in answer if b["type"] == "tool_result")])
    assert "[context-manager] Step 1 restored from history" in text and "Looking 0." in text
    assert f"(tool call Bash: {json.dumps(sent_input, ensure_ascii=False)})" in text
    assert "(tool call bash:" not in text
    assert "out 0\nline ü" in text  # the output exact
    with httpx.Client(base_url=env.url, timeout=30) as h:  # the session page's expand shows it so too
        shown = h.get("/sessions/cc/expand", params={"item": "1"}, headers={"x-api-key": "k"}).json()["text"]
    assert f"(tool call Bash: {json.dumps(sent_input, ensure_ascii=False)})" in shown and "(tool call bash:" not in shown


def test_codexs_shell_call_is_restored_as_sent(renv: REnv) -> None:
    client = renv.client()
    items: list[dict[str, Any]] = [{"role": "user", "content": "Task"}]
    args = {"command": ["bash", "-lc", "rg -n total src"], "workdir": "/work"}
    for t in range(3):
        renv.fake.script.append([fcall(f"call_{t}", "shell", args if t == 0 else {"command": ["echo", str(t)]})])
        resp = client.responses.create(model="m", input=items, tools=[SHELL])
        items += [*as_input(resp.output), {"type": "function_call_output", "call_id": f"call_{t}", "output": f"out {t} RESTORE:1" if t == 2 else f"out {t}"}]
    client.responses.create(model="m", input=items, tools=[SHELL])
    text = item_text(renv.fake.requests[-1]["body"]["input"][-1])
    assert "[context-manager] Step 1 restored from history" in text
    assert f"(tool call shell: {json.dumps(args)})" in text and "out 0" in text


def test_restore_without_a_reader_or_with_a_mismatched_one_shows_the_stored_form() -> None:
    h = History([{"role": "user", "content": "task"}])
    native = [{"type": "text", "text": "Look."}, {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls", "description": "List"}}]
    reply = {"role": "assistant", "content": "Look.", "extra": {"anthropic": native},
             "tool_calls": [{"id": "t1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}]}
    h.append(reply, [{"role": "tool", "tool_call_id": "t1", "content": "a.py"}])
    stored = '(tool call bash: {"command": "ls"})'
    assert stored in restore_text(h, 1)
    as_sent = restore_text(h, 1, call_lines=call_lines("anthropic"))
    assert '(tool call Bash: {"command": "ls", "description": "List"})' in as_sent and stored not in as_sent
    assert as_sent.replace('(tool call Bash: {"command": "ls", "description": "List"})', stored) == restore_text(h, 1)
    assert stored in restore_text(h, 1, call_lines=call_lines("responses"))  # no such native form: as stored
    assert stored in restore_text(h, 1, call_lines=lambda m: ["a", "b"])  # not one line per call: as stored
    assert KEYS == (anthropic_wire.KEY, responses_wire.KEY)

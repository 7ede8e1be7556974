"""The budget line of a replayed Claude Code / Codex log counts the ESTIMATED request prefix the log
leaves out (its system prompt and tool schemas), as the model read it: replay's line then agrees
with what the renderer ``refold serve`` uses shows for the same session with that prefix recorded
(as its system prompt). Serve does not count tool schemas yet (README, Known gaps: an xfail below)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

import refold.lab.replay.runner as runner
from refold.config import Config
from refold.errors import SettingError
from refold.history import History
from refold.lab.replay.runner import iter_prompts
from refold.lab.viewer import build_report
from refold.loaders import load
from refold.mechanisms.ledger import LedgerPolicy, budget_line
from refold.render import Renderer
from refold.types import Message, content_text
from test_prefix_estimate import PREFIX, claude_run, replay

_LINE = re.compile(r"\[context-manager\] context: (\d+)% of 128k tokens")


def lines_of(messages: list[Message]) -> list[int]:
    return [int(m) for msg in messages for m in _LINE.findall(content_text(msg.get("content")))]


def test_the_line_adds_the_unrecorded_tokens_and_zero_changes_nothing() -> None:
    plain = LedgerPolicy(budget_tokens=100_000)
    assert budget_line(40_000, plain) == "[context-manager] context: 10% of 100k tokens"
    assert budget_line(40_000, LedgerPolicy(budget_tokens=100_000, unrecorded_tokens=0)) == budget_line(40_000, plain)
    assert budget_line(40_000, LedgerPolicy(budget_tokens=100_000, unrecorded_tokens=15_000)).endswith(" 25% of 100k tokens")
    with pytest.raises(SettingError, match="unrecorded_tokens"):
        LedgerPolicy(unrecorded_tokens=-1)


def test_replay_counts_the_estimate_as_serve_counts_the_recorded_prefix(tmp_path: Path) -> None:
    logged = load(claude_run(tmp_path, PREFIX))
    replayed = list(iter_prompts(logged, "self-gc", tokenizer="chars4", unrecorded_tokens=PREFIX))
    without = list(iter_prompts(logged, "self-gc", tokenizer="chars4"))
    # the same session through the proxy: its requests carry the prefix (PREFIX tokens at 4 chars each)
    served = History([{"role": "system", "content": "x" * (4 * PREFIX)}, *logged.prefix])
    for s in logged.steps:
        served.append(s.reply, s.observations)
    config = Config.parse(preset="self-gc", reminders=False)
    renderer = Renderer(config)
    serve = [lines_of(list(renderer.render(served, t).messages)) for t in range(1, len(served))]
    got = [lines_of(p.messages) for p in replayed[1:]]
    assert got and all(got) and got == serve
    low = [lines_of(p.messages) for p in without[1:]]
    assert all(a[-1] >= b[-1] + 12 for a, b in zip(got, low, strict=True))  # 16k of 128k: 12.5 points


def test_replay_and_view_pass_the_estimate_to_the_policies(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = claude_run(tmp_path, PREFIX)
    seen: list[int] = []
    make = runner.make_projector

    def spy(name: str, opts: Any) -> Any:
        seen.append(opts.unrecorded_tokens)
        return make(name, opts)

    monkeypatch.setattr(runner, "make_projector", spy)
    replay(path, ("base", "self-gc"))
    assert seen and seen[-1] == PREFIX  # the self-gc projector's
    seen.clear()
    replay(path, ("base", "self-gc"), prefix_estimate=False)
    assert seen and set(seen) == {0}
    page = build_report(load(path), variants=["self-gc"], tokenizer="chars4", mechanisms=False)
    shown = {int(n) for n in _LINE.findall(page)}
    h = load(path)
    want = {n for p in iter_prompts(h, "self-gc", tokenizer="chars4", unrecorded_tokens=PREFIX) for n in lines_of(p.messages)}
    assert want and shown == want


def test_a_run_that_records_its_prompt_is_unchanged() -> None:
    from conftest import DATA

    h = load(str(DATA / "mswea11_toolcall_refold.traj.json"))
    prompts = list(iter_prompts(h, "self-gc", tokenizer="chars4"))
    assert any(lines_of(p.messages) for p in prompts)
    (r,) = replay(str(DATA / "mswea11_toolcall_refold.traj.json"), ("self-gc",))
    assert r.prefix is None


# ---- refold serve: the tool schemas a request sends (not counted yet: a known gap) -------------

_BIG = "Runs a shell command. " * 800  # ~17,600 characters: 4,400 tokens at 4 a token, 44% of 10k


def _served_line(tmp_path: Path, surface: str, description: str) -> tuple[int, int]:
    """The budget line (percent) the upstream is sent on the second call of a one-tool session,
    and the characters of the tools the client sent."""
    import httpx

    from refold.proxy import ProxyConfig, create_app
    from test_proxy_anthropic import FakeAnthropic

    from fake_upstream import FakeUpstream, ServerThread

    config = Config.parse(ledger={"budget_tokens": 10_000}, prompt={"deferred": False})
    fake: Any = FakeUpstream() if surface == "chat" else FakeAnthropic()
    app = fake._build() if surface == "chat" else fake.app
    headers = {"Authorization": "Bearer k", "x-api-key": "k", "anthropic-version": "2023-06-01", "X-Refold-Session": "b"}
    with ServerThread(app) as up:
        cfg = ProxyConfig(upstream=f"{up.url}/v1", store=str(tmp_path / f"{surface}{len(description)}.db"), tokenizer="off",
                          config=config, context_tools=False)
        with ServerThread(create_app(cfg)) as px, httpx.Client(base_url=px.url, timeout=30, headers=headers) as c:
            if surface == "chat":
                tools: list[dict[str, Any]] = [{"type": "function", "function": {"name": "bash", "description": description,
                                                "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}}]
                msgs: list[dict[str, Any]] = [{"role": "user", "content": "Fix calc.py."}]
                reply = c.post("/v1/chat/completions", json={"model": "m", "messages": msgs, "tools": tools}).json()["choices"][0]["message"]
                msgs += [reply, {"role": "tool", "tool_call_id": reply["tool_calls"][0]["id"], "content": "x = 1\n" * 300}]
                assert c.post("/v1/chat/completions", json={"model": "m", "messages": msgs, "tools": tools}).status_code == 200
                sent = fake.requests[-1]["body"]["messages"]
            else:
                tools = [{"name": "Bash", "description": description, "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}}}]
                fake.script.append([{"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "cat calc.py"}}])
                msgs = [{"role": "user", "content": "Fix calc.py."}]
                r = c.post("/v1/messages", json={"model": "m", "max_tokens": 64, "messages": msgs, "tools": tools}).json()
                msgs += [{"role": "assistant", "content": r["content"]},
                         {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "x = 1\n" * 300}]}]
                assert c.post("/v1/messages", json={"model": "m", "max_tokens": 64, "messages": msgs, "tools": tools}).status_code == 200
                sent = fake.messages_requests[-1]["body"]["messages"]
    text = json.dumps(sent)
    found = _LINE_ANY.findall(text)
    assert found, text[-500:]
    return int(found[-1]), len(json.dumps(tools, ensure_ascii=False))


_LINE_ANY = re.compile(r"\[context-manager\] context: (\d+)% of 10k tokens")


@pytest.mark.xfail(strict=True, reason="known gap (README): serve and mini leave the tool schemas out of the budget line")
@pytest.mark.parametrize("surface", ["chat", "messages"])
def test_serve_counts_the_tool_schemas_a_request_sends(tmp_path: Path, surface: str) -> None:
    small, small_chars = _served_line(tmp_path, surface, "Run a command.")
    big, big_chars = _served_line(tmp_path, surface, _BIG)
    added = 100 * (big_chars - small_chars) / 4 / 10_000
    assert abs((big - small) - added) <= 1 and big - small >= 40

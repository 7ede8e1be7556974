"""The budget line of a replayed Claude Code / Codex log counts the ESTIMATED request prefix the log
leaves out (its system prompt and tool schemas), as the model read it: replay's line then agrees
with what ``refold serve`` shows, whose requests carry that prefix and count it."""

from __future__ import annotations

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

"""Unparseable replies, model errors and interrupted runs: mini's trajectory on disk stays complete
up to that point, the error is reported, and refold keeps rendering what replay computes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from minisweagent.agents.default import DefaultAgent

from refold.integrations.saved import renderer_for
from refold.loaders import load
from refold.policy import Policy
from test_minisweagent_e2e import FakeLLM, Turn, run_mini, scenario


def short(n: int) -> list:
    return list(scenario()[:n]) + [Turn("submit", "-", "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT")]


@pytest.mark.parametrize("style", ["tool", "text"])
def test_unparseable_reply_is_recorded_and_rendering_recovers(
    style: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    turns = short(8)
    turns.insert(5, "PROGRESS: oops\nSTALE: -\n\nI forgot to issue a command.")
    llm = FakeLLM(turns, style)
    agent, _, traj = run_mini(tmp_path, style, llm, monkeypatch)
    assert agent.run("x")["exit_status"] == "Submitted"

    data = json.loads(traj.read_text())
    errors = [m for m in data["messages"] if (m.get("extra") or {}).get("interrupt_type") == "FormatError"]
    assert len(errors) == 1
    assert errors[0]["extra"]["refold"]["t"] == 5  # what the billed call was sent is kept too
    # the next call shows the format error to the model, and every prompt equals the replay
    history = load(traj)
    assert len(history) == 9  # the unparseable reply is not a step (mini does not keep it)
    renderer = renderer_for(data)  # the shipped config's policies, spans, ledger and budget line
    assert renderer.config.policy == Policy(k=3, mask_after=None) and renderer.config.boundary.rule == "fixed"
    assert renderer.config.ledger.budget_tokens == 128000
    live = [p for i, p in enumerate(llm.prompts) if i != 5]
    assert [renderer.render(history, t).messages for t in range(len(history))] == live
    # the format error is appended to step 5; the budget line moves to it (the last output of the step)
    before, after = llm.prompts[5], llm.prompts[6]
    assert after[:-2] == before[:-1] and len(after) == len(before) + 1
    assert after[-2]["content"] == before[-1]["content"].rsplit("\n", 1)[0]
    assert "% of 128k tokens" in before[-1]["content"] and "% of 128k tokens" in after[-1]["content"]
    assert "[step 5]" in str(llm.prompts[6][-1]["content"])


def test_model_error_keeps_the_trajectory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    llm = FakeLLM(short(10), "tool", fail_at=6, error=RuntimeError("upstream exploded"))
    agent, _, traj = run_mini(tmp_path, "tool", llm, monkeypatch)
    with pytest.raises(RuntimeError, match="upstream exploded"):
        agent.run("x")
    data = json.loads(traj.read_text())
    assert data["info"]["exit_status"] == "RuntimeError"
    assert data["messages"][-1]["role"] == "exit"
    assert "upstream exploded" in data["messages"][-1]["extra"]["exception_str"]
    history = load(traj)
    assert len(history) == 6 and all("refold" in s.meta for s in history.steps)


def test_interrupted_run_keeps_the_trajectory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    llm = FakeLLM(short(10), "text", fail_at=4, error=KeyboardInterrupt())
    mini_agent, _, traj = run_mini(tmp_path, "text", llm, monkeypatch)
    # the default agent: mini's interactive one turns Ctrl-C into a prompt for the user
    agent = DefaultAgent(
        mini_agent.model,
        mini_agent.env,
        **mini_agent.config.model_dump(
            include={"system_template", "instance_template", "output_path", "cost_limit"}
        ),
    )
    with pytest.raises(KeyboardInterrupt):
        agent.run("x")
    history = load(traj)
    assert len(history) == 4
    assert history.step(4).observations  # the last finished step is on disk with its output


def test_anthropic_models_get_refold_breakpoints(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    llm = FakeLLM(short(9), "tool")
    agent, _, traj = run_mini(tmp_path, "tool", llm, monkeypatch, model_name="anthropic/claude-sonnet-4-5")
    agent.run("x")
    last = llm.prompts[-1]
    marks = [i for i, m in enumerate(last) if "cache_control" in json.dumps(m)]
    assert 2 < len(marks) <= 4 and marks[-1] == len(last) - 1
    info = [m for m in agent.messages if m["role"] == "assistant"][-1]["extra"]["refold"]
    assert info["cache_breakpoints"] == marks
    assert not any("cache_control" in json.dumps(m) for m in agent.messages)  # mini's history untouched

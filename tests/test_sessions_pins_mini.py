"""Pins through mini-swe-agent's real agent loop: ``refold sessions pin RUN 3`` while the run goes
on, and mini's next model call is sent step 3 as first shown; a run without pins is sent the same
prompts as before, and the saved trajectory carries the pins."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from minisweagent.agents import get_agent  # noqa: E402  (test_minisweagent_e2e skips without mini)
from minisweagent.config import get_config_from_spec  # noqa: E402
from minisweagent.environments import get_environment  # noqa: E402
from minisweagent.models import get_model  # noqa: E402
from minisweagent.utils.serialize import recursive_merge  # noqa: E402

from refold.cli import main  # noqa: E402
from refold.integrations import config_path  # noqa: E402
from refold.loaders import load  # noqa: E402
from test_minisweagent_e2e import CONFIGS, FakeLLM, litellm, make_repo, outputs_of, scenario

PIN_AT = 20  # the call during which the user pins step 3 (`cat notes.txt`, masked by then)


class PinningLLM(FakeLLM):
    def __init__(self, turns: list[Any], style: str, traj: Path) -> None:
        super().__init__(turns, style)
        self.traj = traj

    def __call__(self, **kwargs: Any) -> Any:
        if len(self.prompts) == PIN_AT:  # the user, between two calls, as mini saved step PIN_AT
            assert main(["sessions", "pin", str(self.traj), "3"]) == 0
        return super().__call__(**kwargs)


def run(tmp: Path, monkeypatch: pytest.MonkeyPatch, pin: bool) -> tuple[FakeLLM, Path]:
    tmp.mkdir()
    repo, bin_dir, _ = make_repo(tmp)
    traj = tmp / "traj.json"
    llm = PinningLLM(list(scenario()), "tool", traj) if pin else FakeLLM(list(scenario()), "tool")
    monkeypatch.setattr(litellm, "completion", llm)
    monkeypatch.setenv("MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT", "1")
    config = recursive_merge(
        get_config_from_spec(str(config_path(CONFIGS["tool"]))),
        {
            "agent": {"mode": "yolo", "confirm_exit": False, "output_path": str(traj), "cost_limit": 0},
            "model": {
                "model_name": "fake/scripted",
                "cost_tracking": "ignore_errors",
                "refold_boundary": {"rule": "fixed"},  # masking due on time, every k calls
                "refold_pins": str(tmp / "pins.json"),
            },
            "environment": {"cwd": str(repo), "env": {"PATH": f"{bin_dir}:/usr/bin:/bin"}},
        },
    )
    agent = get_agent(get_model(config=config["model"]), get_environment(config["environment"], default_type="local"), config["agent"], default_type="interactive")
    assert agent.run("Make add() robust.")["exit_status"] == "Submitted"
    return llm, traj


def test_a_pin_set_during_a_mini_run_shows_in_its_next_prompt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    plain, _ = run(tmp_path / "plain", monkeypatch, pin=False)
    pinned, traj = run(tmp_path / "pinned", monkeypatch, pin=True)
    assert "pinned 3" in capsys.readouterr().out
    notes = json.dumps((tmp_path / "plain" / "repo" / "notes.txt").read_text())[1:-1]  # as mini shows it, in JSON
    # up to the call during which the user pinned: the very same prompts
    assert pinned.prompts[: PIN_AT + 1] == plain.prompts[: PIN_AT + 1]
    (masked,) = outputs_of(plain.prompts[PIN_AT + 1], 3)
    assert notes not in masked  # without the pin step 3's output is a note by now
    for t in range(PIN_AT + 1, len(pinned.prompts)):
        (shown,) = outputs_of(pinned.prompts[t], 3)
        assert notes in shown, t  # from the next call on: as first shown
    # the saved run carries the pin, and loading it renders the same
    data = json.loads(traj.read_text())
    assert [(r["item"], r["on"]) for r in data["info"]["refold_pins"]] == [("3", True)]
    assert [p.target for p in load(traj).pins] == ["r3 3"]
    assert json.loads((tmp_path / "pinned" / "pins.json").read_text())["refold_pins"] == data["info"]["refold_pins"]

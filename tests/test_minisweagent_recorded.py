"""A recorded run driven through mini's real agent loop with refold on sends exactly the prompts
that replaying the file through the Renderer computes (recorded replies are the model's outputs,
recorded observations the environment's)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")
pytest.importorskip("minisweagent")

from minisweagent.agents.default import DefaultAgent  # noqa: E402
from minisweagent.exceptions import Submitted  # noqa: E402
from minisweagent.models import get_model  # noqa: E402
from minisweagent.models.test_models import DeterministicModel  # noqa: E402

from refold.config import Config
from refold.json_file import read_json  # noqa: E402
from refold.loaders import load  # noqa: E402
from refold.policy import Policy  # noqa: E402
from refold.render import Renderer  # noqa: E402

FIXTURE = Path(__file__).parent / "data" / "mswea-gemini3pro__django__django-16255.traj.json"
_BASH = re.compile(r"```(?:bash|sh|shell)?\s*\n(.*?)\n```", re.DOTALL)
PROMPTS: list[list[dict[str, Any]]] = []


class RecordingModel(DeterministicModel):
    """mini's DeterministicModel that also keeps every prompt it is sent."""

    def query(self, messages: list[dict[str, str]], **kwargs: Any) -> dict:
        PROMPTS.append(messages)
        return super().query(messages, **kwargs)


class RecordedEnvironment:
    """Answers the i-th command with the i-th recorded observation; the last one submits."""

    def __init__(self, observations: list[str]) -> None:
        self.config: dict[str, Any] = {}
        self.observations = observations
        self.commands: list[str] = []

    def execute(self, action: dict, cwd: str = "") -> dict[str, Any]:
        self.commands.append(action["command"])
        i = len(self.commands) - 1
        if i == len(self.observations) - 1:
            raise Submitted(
                {"role": "exit", "content": "", "extra": {"exit_status": "Submitted", "submission": ""}}
            )
        return {"output": self.observations[i], "returncode": 0, "exception_info": ""}

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        return {}

    def serialize(self) -> dict:
        return {}


@pytest.mark.parametrize(
    "refold", [{}, {"k": 2}, {"chunk": False, "k": 4}, {"dedup": False, "reversible": False}]
)
def test_live_prompts_equal_replay(refold: dict[str, Any], tmp_path: Path) -> None:
    messages = read_json(FIXTURE)["messages"]
    system, task = messages[0]["content"], messages[1]["content"]
    replies = [m["content"] for m in messages if m["role"] == "assistant"]
    observations = [m["content"] for m in messages[2:] if m["role"] == "user"]
    assert len(replies) == len(observations) == 17
    outputs = [
        {
            "role": "assistant",
            "content": r,
            "extra": {"actions": [{"command": c.strip()} for c in _BASH.findall(r)[:1]]},
        }
        for r in replies
    ]
    PROMPTS.clear()
    model = get_model(
        config={
            "model_class": "refold.integrations.minisweagent.RefoldModel",
            "inner_model_class": f"{__name__}.RecordingModel",
            "model_name": "deterministic",
            "refold": refold,
            "refold_tokenizer": "chars4",
            "outputs": outputs,
            "observation_template": "{{ output.output }}",
        }
    )
    env = RecordedEnvironment(observations)
    agent = DefaultAgent(
        model,
        env,
        system_template="{{ sys }}",
        instance_template="{{ problem }}",
        output_path=tmp_path / "live.traj.json",
        cost_limit=0,
    )
    assert agent.run("", sys=system, problem=task)["exit_status"] == "Submitted"

    replay = load(FIXTURE)
    renderer = Renderer(Config(policy=Policy.parse(**refold)))
    expected = [renderer.render(replay, t).messages for t in range(len(replay))]
    assert len(PROMPTS) == len(expected) == 17
    for t, (live, want) in enumerate(zip(PROMPTS, expected, strict=True)):
        assert live == want, f"prompt for call {t + 1} differs from the replay"
    # and the live run's own trajectory replays to the same prompts
    live_history = load(tmp_path / "live.traj.json")
    again = Renderer(Config(policy=Policy.parse(**refold)))
    assert [again.render(live_history, t).messages for t in range(len(live_history))] == expected

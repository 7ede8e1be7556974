"""``refold view`` of a saved refold mini run opens on ``sent``: the prompts under the Config the
run saved, equal call by call to what its model received (mini's own agent, environment and
DeterministicModel wrapped by RefoldModel; the run saved as mini saves it)."""

from __future__ import annotations

import copy
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
pytest.importorskip("minisweagent")

from minisweagent.agents.default import DefaultAgent  # noqa: E402
from minisweagent.environments.local import LocalEnvironment  # noqa: E402
from minisweagent.models.test_models import make_output  # noqa: E402

from refold.cli import main  # noqa: E402
from refold.integrations.minisweagent import RefoldModel  # noqa: E402
from refold.integrations.saved import config_of  # noqa: E402
from refold.lab.viewer.encode import decode  # noqa: E402
from refold.lab.viewer.preview import display_text  # noqa: E402
from refold.lab.viewer.variants import SENT, sent_variant  # noqa: E402
from refold.loaders import load  # noqa: E402

STEPS = 14


def _run(tmp_path: Path) -> tuple[Path, list[list[dict[str, Any]]]]:
    """A mini run of STEPS large outputs, then a submission; returns the saved file and the
    messages the inner model received at every call."""
    outputs = [
        make_output(f"PROGRESS: read block {i}\nSTALE: -\n\nTHOUGHT: the next block.", [{"command": f"seq {i}000 {i}700"}])
        for i in range(1, STEPS + 1)
    ]
    outputs.append(make_output("PROGRESS: done\nSTALE: -", [{"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"}]))
    model = RefoldModel(
        inner_model_class="minisweagent.models.test_models.DeterministicModel",
        model_name="deterministic",
        outputs=outputs,
        refold_tokenizer="chars4",
    )
    received: list[list[dict[str, Any]]] = []
    query = model.inner.query

    def recorded(messages: list[dict[str, Any]], **kwargs: Any) -> dict[str, Any]:
        received.append(copy.deepcopy(messages))
        out: dict[str, Any] = query(messages, **kwargs)
        return out

    model.inner.query = recorded
    agent = DefaultAgent(
        model, LocalEnvironment(cwd=str(tmp_path)),
        system_template="You are a careful engineer.", instance_template="Read every block. {{task}}",
        step_limit=0, cost_limit=0,
    )
    assert agent.run("Then submit.")["exit_status"] == "Submitted"
    path = tmp_path / "run.traj.json"
    agent.save(path)
    assert len(received) == STEPS + 1
    return path, received


def _sent_prompts(page: str) -> tuple[str, list[list[str]]]:
    raw = re.search(r'<script type="application/json" id="refold-data">(.*?)</script>', page, re.S)
    assert raw is not None
    data = json.loads(raw.group(1))
    variants = {v["id"]: v for v in data["variants"]}
    v = variants[SENT]
    while "same_as" in v:
        v = variants[v["same_as"]]
    out, prev = [], []
    for keep, add in v["calls"]:
        prev = prev[:keep] + add
        out.append([decode(data["strings"], data["pieces"][i][1]) for i in prev])
    return data["default"], out


def _clean(prompt: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in m.items() if k != "extra"} for m in prompt]


def _check_sent(path: Path, received: list[list[dict[str, Any]]], tmp_path: Path) -> None:
    history = load(path)
    config = config_of(history)
    assert config is not None
    prompts = [p.messages for p in sent_variant(config).projector.prompts(history)]
    assert len(prompts) == len(received)  # one per model call, the submission's too
    for t, (prompt, got) in enumerate(zip(prompts, received, strict=True)):
        assert _clean(prompt) == _clean(got), f"call {t + 1}"
    out = tmp_path / f"{path.stem}.html"
    assert main(["view", str(path), "-o", str(out), "--tokenizer", "chars4", "--policy", "base", "--no-mechanisms"]) == 0
    default, shown = _sent_prompts(out.read_text(encoding="utf-8"))
    assert default == SENT and json.dumps("sent (this run's settings)")[1:-1] in out.read_text(encoding="utf-8")
    assert shown == [[display_text(m) for m in p] for p in prompts]


def test_refold_view_of_a_saved_mini_run_opens_on_what_its_model_was_sent(tmp_path: Path) -> None:
    path, received = _run(tmp_path)
    saved = json.loads(path.read_text())["info"]["config"]["refold"]
    assert saved["prompt"]["deferred"] is True and saved["prompt"]["format_in_system"] is True
    # the run began with its plain history and switched to the protocol's prompt mid-run: the
    # two settings of prompt.deferred render it differently, so the check can fail
    texts = ["".join(str(m.get("content")) for m in p) for p in received]
    assert "PROGRESS" not in texts[0].split("Read every block")[0] and any("[step 1]" in t for t in texts)
    _check_sent(path, received, tmp_path)


def test_a_run_saved_without_the_prompt_key_renders_as_it_was_sent(tmp_path: Path) -> None:
    """Runs saved before the integration stored ``prompt``: Config.from_saved takes them for runs
    older than prompt.deferred (protocol from the first call), but a run whose first call was its
    plain history was deferring, and is rendered so."""
    path, received = _run(tmp_path)
    data = json.loads(path.read_text())
    del data["info"]["config"]["refold"]["prompt"]
    old = tmp_path / "old.traj.json"
    old.write_text(json.dumps(data))
    _check_sent(old, received, tmp_path)

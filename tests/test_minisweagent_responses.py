"""mini-swe-agent's Responses-API model class (``litellm_response``) wrapped by RefoldModel: mini's
real LitellmResponseModel with ``litellm.responses`` replaced by a scripted fake, the shipped tool-call
config, mini's interactive agent in yolo mode and the real LocalEnvironment."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network on import

pytest.importorskip("minisweagent")
litellm = pytest.importorskip("litellm")

from litellm.types.llms.openai import ResponsesAPIResponse  # noqa: E402
from minisweagent.agents import get_agent  # noqa: E402
from minisweagent.config import get_config_from_spec  # noqa: E402
from minisweagent.environments import get_environment  # noqa: E402
from minisweagent.models import get_model  # noqa: E402
from minisweagent.utils.serialize import recursive_merge  # noqa: E402

from refold.formats.mini_responses import to_chat, to_items  # noqa: E402
from refold.integrations import config_path  # noqa: E402
from refold.loaders import load  # noqa: E402
from refold.protocol import CM  # noqa: E402

NOTES = "".join(f"note line {i}: the quick brown fox jumps over the lazy dog\n" for i in range(40))


class FakeResponses:
    """Stands in for ``litellm.responses``: one bash call per turn, records every input it is sent."""

    def __init__(self, commands: list[str | tuple[str, dict[str, Any]]]) -> None:
        self.commands = commands  # a bash command, or (context tool, arguments)
        self.inputs: list[list[dict[str, Any]]] = []
        self.tools: list[list[str]] = []

    def __call__(self, *, model: str, input: list[dict[str, Any]], **kwargs: Any) -> Any:
        self.inputs.append(json.loads(json.dumps(input)))
        self.tools.append([t["name"] for t in kwargs.get("tools") or []])
        i = len(self.inputs) - 1
        command = self.commands[i]
        name, args = ("bash", {"command": command}) if isinstance(command, str) else command
        text = f"PROGRESS: step {i + 1}\nSTALE: -\n\nTHOUGHT: running {command!r}."
        return ResponsesAPIResponse(
            id=f"resp_{i}",
            object="response",
            created_at=0,
            model=model,
            status="completed",
            parallel_tool_calls=True,
            tool_choice="auto",
            tools=[],
            output=[
                {"type": "reasoning", "id": f"rs_{i}", "summary": [], "encrypted_content": f"ENC-{i}"},
                {
                    "type": "message",
                    "id": f"msg_{i}",
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": text, "annotations": []}],
                },
                {
                    "type": "function_call",
                    "id": f"fc_{i}",
                    "call_id": f"call_{i}",
                    "name": name,
                    "arguments": json.dumps(args),
                    "status": "completed",
                },
            ],
            usage={
                "input_tokens": 500 + i,
                "output_tokens": 10,
                "total_tokens": 510 + i,
                "input_tokens_details": {"cached_tokens": 400},
            },
        )


def run(tmp: Path, commands: list[Any], monkeypatch: pytest.MonkeyPatch) -> tuple[FakeResponses, Any, Path]:
    repo = tmp / "repo"
    repo.mkdir()
    (repo / "notes.txt").write_text(NOTES)
    bin_dir = tmp / "bin"  # a `restore` program: if the environment ever ran `restore`, it says so
    bin_dir.mkdir()
    (bin_dir / "restore").write_text("#!/bin/sh\necho EXECUTED-BY-SHELL\n")
    (bin_dir / "restore").chmod(0o755)
    fake = FakeResponses(commands)
    monkeypatch.setattr(litellm, "responses", fake)
    monkeypatch.setenv("MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT", "1")
    traj = tmp / "traj.json"
    config = recursive_merge(
        get_config_from_spec(str(config_path("mini"))),
        {
            "agent": {"mode": "yolo", "confirm_exit": False, "output_path": str(traj), "cost_limit": 0},
            "model": {
                "model_name": "openai/gpt-5-mini",
                "inner_model_class": "litellm_response",
                "cost_tracking": "ignore_errors",
                "refold_boundary": {"rule": "fixed"},  # moves every k steps: masking shows in a short run
            },
            "environment": {"cwd": str(repo), "env": {"PATH": f"{bin_dir}:{os.environ['PATH']}"}},
        },
    )
    model = get_model(config=config["model"])
    agent = get_agent(model, get_environment(config["environment"], default_type="local"), config["agent"], default_type="interactive")
    agent.run("Read the notes.")
    return fake, agent, traj


def test_responses_model_is_sent_the_run_with_refold(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    commands = ["cat notes.txt", "ls", "restore 1", *[f"echo probe {i}" for i in range(12)], "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"]
    fake, agent, traj = run(tmp_path, commands, monkeypatch)
    n = len(commands)
    assert len(fake.inputs) == n
    for t, items in enumerate(fake.inputs):
        calls = [i for i in items if i.get("type") == "function_call"]
        outputs = [i for i in items if i.get("type") == "function_call_output"]
        # every earlier step reached the model (it was sent only system + task before), in pairs
        assert [c["call_id"] for c in calls] == [f"call_{s}" for s in range(t)]
        assert [o["call_id"] for o in outputs] == [f"call_{s}" for s in range(t)]
        # reasoning items go back as received (encrypted_content intact), never an `extra`
        assert [i["encrypted_content"] for i in items if i.get("type") == "reasoning"] == [f"ENC-{s}" for s in range(t)]
        assert not any("extra" in i for i in items)
        assert all(i.get("role") != "tool" for i in items)  # no chat-format message
    # `restore 1` was answered from the history as a function_call_output, never run
    third = next(o for o in fake.inputs[3] if o.get("type") == "function_call_output" and o["call_id"] == "call_2")
    assert third["output"].startswith("[step 3]\n" + CM) and "note line 39" in third["output"]
    assert not any("EXECUTED-BY-SHELL" in json.dumps(x) for x in fake.inputs)
    # the notes read of step 1 is masked in the last prompt (default policy), restorable by step
    last = {o["call_id"]: o["output"] for o in fake.inputs[-1] if o.get("type") == "function_call_output"}
    assert "note line 39" not in last["call_0"] and CM in last["call_0"]
    # the provider's Responses usage is recorded per call
    replies = [m for m in agent.messages if m.get("object") == "response"]
    info = replies[-1]["extra"]["refold"]
    assert info["provider_prompt_tokens"] == 500 + n - 1 and info["provider_cached_tokens"] == 400
    assert info["prompt_tokens"] > 0 and info["base_prompt_tokens"] > 0
    # the saved run loads as the run it was (refold replay / view read it)
    saved = load(traj)
    assert len(saved) == n and saved.step(3).restore_of == (1,)


def test_to_items_round_trip_is_what_mini_sends_unrendered() -> None:
    """With nothing hidden, the items refold sends are the ones mini itself would send."""
    run_items: list[dict[str, Any]] = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "task"},
        {
            "object": "response",
            "output": [
                {"type": "reasoning", "id": "rs", "summary": [], "encrypted_content": "E"},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "hi", "annotations": []}]},
                {"type": "function_call", "call_id": "c1", "name": "bash", "arguments": '{"command": "ls"}'},
            ],
            "extra": {"actions": [{"command": "ls", "tool_call_id": "c1"}]},
        },
        {"type": "function_call_output", "call_id": "c1", "output": "a\nb", "extra": {"returncode": 0}},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "format error"}], "extra": {}},
    ]
    from refold import Config, History, Renderer

    history = History.from_messages(to_chat(run_items))
    rendered = Renderer(Config.parse(policy={"protocol": False})).render(history)
    mini_would_send = [{k: v for k, v in m.items() if k != "extra"} for m in run_items[:2]]
    mini_would_send += [dict(i) for i in run_items[2]["output"]]
    mini_would_send += [{k: v for k, v in m.items() if k != "extra"} for m in run_items[3:]]
    assert to_items(rendered.messages, rendered.origins, history) == mini_would_send


def test_responses_model_is_offered_the_context_tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the shipped config (refold_context_tools: true) the Responses model gets restore & co as
    function tools next to bash, and a call of one is answered from the history, never run."""
    commands: list[Any] = ["cat notes.txt", ("restore", {"step": "1"}), "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"]
    fake, agent, traj = run(tmp_path, commands, monkeypatch)
    assert len(fake.inputs) == 3
    assert fake.tools[0][0] == "bash" and {"restore", "fold_span", "search_ledger"} <= set(fake.tools[0])
    (answer,) = [o for o in fake.inputs[2] if o.get("type") == "function_call_output" and o["call_id"] == "call_1"]
    assert answer["output"].startswith("[step 2]\n" + CM + " Step 1 restored") and "note line 39" in answer["output"]
    assert not any("EXECUTED-BY-SHELL" in json.dumps(x) for x in fake.inputs)
    assert load(traj).step(2).restore_of == (1,)


def test_openrouter_responses_model_is_wrapped_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """OpenRouterResponseModel (its own HTTP call, the task as an ``input_text`` message item): each
    call is sent the earlier steps, and a restore is answered from the history."""
    import requests

    commands = ["cat notes.txt", "restore 1", "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"]
    fake = FakeResponses(commands)

    class Reply:
        status_code = 200

        def __init__(self, data: dict[str, Any]) -> None:
            self.data, self.text = data, json.dumps(data)

        def raise_for_status(self) -> None:
            pass

        def json(self) -> dict[str, Any]:
            return self.data

    def post(url: str, headers: Any = None, data: str = "", timeout: Any = None) -> Reply:
        body = json.loads(data)
        out = fake(model=body["model"], input=body["input"]).model_dump(mode="json")
        out["usage"]["cost"] = 0.001  # OpenRouter reports the cost
        return Reply(out)

    monkeypatch.setattr(requests, "post", post)
    monkeypatch.setenv("OPENROUTER_API_KEY", "test")
    monkeypatch.setenv("MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT", "1")
    (tmp_path / "notes.txt").write_text(NOTES)
    config = recursive_merge(
        get_config_from_spec(str(config_path("mini"))),
        {
            "agent": {"mode": "yolo", "confirm_exit": False, "output_path": str(tmp_path / "t.json"), "cost_limit": 0},
            "model": {"model_name": "openai/gpt-5-mini", "inner_model_class": "openrouter_response", "cost_tracking": "ignore_errors"},
            "environment": {"cwd": str(tmp_path)},
        },
    )
    agent = get_agent(get_model(config=config["model"]), get_environment(config["environment"], default_type="local"), config["agent"], default_type="interactive")
    assert agent.run("Read the notes.")["exit_status"] == "Submitted"
    assert [len([i for i in x if i.get("type") == "function_call_output"]) for x in fake.inputs] == [0, 1, 2]
    task = fake.inputs[0][1]
    assert task["type"] == "message" and task["content"][0]["type"] == "input_text"  # as mini sends it
    (answer,) = [o for o in fake.inputs[2] if o.get("type") == "function_call_output" and o["call_id"] == "call_1"]
    assert "Step 1 restored" in answer["output"] and "note line 39" in answer["output"]

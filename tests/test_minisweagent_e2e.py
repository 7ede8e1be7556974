"""mini-swe-agent end to end with refold on: the shipped configs, mini's real LiteLLM model classes
(with ``litellm.completion`` replaced by a scripted fake), mini's interactive agent in yolo mode
and the real LocalEnvironment running bash in a temporary git repository.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network on import

pytest.importorskip("minisweagent")
litellm = pytest.importorskip("litellm")

from minisweagent.agents import get_agent  # noqa: E402
from minisweagent.config import get_config_from_spec  # noqa: E402
from minisweagent.environments import get_environment  # noqa: E402
from minisweagent.models import get_model  # noqa: E402
from minisweagent.utils.serialize import recursive_merge  # noqa: E402

from refold.history import History  # noqa: E402
from refold.integrations import config_path  # noqa: E402
from refold.loaders import load  # noqa: E402
from refold.messages import clean  # noqa: E402
from refold.policy import Policy  # noqa: E402
from refold.prompts import response_format_lines  # noqa: E402
from refold.protocol import CM  # noqa: E402
from refold.restore import restore_text  # noqa: E402
from refold.types import content_text  # noqa: E402

APP = "\n".join(
    ["def add(a, b):", "    return a + b", ""]
    + [
        f"def helper_{i}(x):\n    # helper number {i} keeps this file long enough to dedup\n    return x * {i}\n"
        for i in range(12)
    ]
)
NOTES = "\n".join(f"note line {i}: the quick brown fox jumps over the lazy dog" for i in range(30)) + "\n"


@dataclass
class Turn:
    progress: str
    stale: str
    command: str


def scenario() -> list[Turn]:
    """33 steps: reads, a repeated read, an edit between two reads, STALE marks and restores."""
    t = [
        Turn("list the repository", "-", "ls"),  # 1
        Turn("read app.py", "-", "cat app.py"),  # 2
        Turn("read the notes", "-", "cat notes.txt"),  # 3
        Turn("find functions", "-", "grep -n 'def ' app.py | head -3"),  # 4
        Turn("read app.py again", "-", "cat app.py"),  # 5: same bytes as step 2 -> stub
        Turn("edit add()", "4", "sed -i 's/return a + b$/return a + b + 0/' app.py"),  # 6
        Turn("read app.py after the edit", "-", "cat app.py"),  # 7: changed file, not a stub
        Turn("read the notes again", "-", "cat notes.txt"),  # 8: same as step 3 -> stub
        Turn("count lines", "8", "wc -l app.py notes.txt"),  # 9
        Turn("check git status", "-", "git status --short"),  # 10
        Turn("bring back the first read", "9", "restore 2"),  # 11
        Turn("show the diff", "-", "git diff"),  # 12
    ]
    for i in range(13, 30):
        stale = str(i - 2) if i % 3 == 0 else "-"
        t.append(Turn(f"probe {i}", stale, f"echo probe {i} && date +%Y >/dev/null"))
    t += [
        Turn("restore a stubbed read", "-", "restore 5"),  # 30
        Turn("restore something that does not exist", "-", "restore 99"),  # 31
        Turn("run the app", "30", "python3 -c 'import app; print(app.add(2, 3))'"),  # 32
        Turn("submit", "-", "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"),  # 33
    ]
    return t


def reply_text(turn: Turn, style: str) -> str:
    head = f"PROGRESS: {turn.progress}\nSTALE: {turn.stale}\n\nTHOUGHT: doing '{turn.progress}'."
    return f"{head}\n\n```bash\n{turn.command}\n```" if style == "text" else head


@dataclass
class FakeLLM:
    """Stands in for ``litellm.completion``: replays a script, records every prompt it is sent."""

    turns: list[Any]
    style: str
    prompts: list[list[dict[str, Any]]] = field(default_factory=list)
    fail_at: int | None = None
    error: BaseException | None = None

    def __call__(self, *, model: str, messages: list[dict[str, Any]], **kwargs: Any) -> Any:
        self.prompts.append(json.loads(json.dumps(messages)))
        i = len(self.prompts) - 1
        if self.fail_at is not None and i == self.fail_at:
            assert self.error is not None
            raise self.error
        turn = self.turns[i]
        if isinstance(turn, str):  # a raw reply (e.g. unparseable)
            message: dict[str, Any] = {"role": "assistant", "content": turn}
        elif self.style == "text":
            message = {"role": "assistant", "content": reply_text(turn, "text")}
        else:
            call = {
                "id": f"call_{i + 1}",
                "type": "function",
                "function": {"name": "bash", "arguments": json.dumps({"command": turn.command})},
            }
            message = {"role": "assistant", "content": reply_text(turn, "tool"), "tool_calls": [call]}
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        usage = {
            "prompt_tokens": 1000 + i,
            "completion_tokens": 20,
            "total_tokens": 1020 + i,
            "prompt_tokens_details": {"cached_tokens": 900},
        }
        return litellm.ModelResponse(
            model=model, choices=[{"index": 0, "message": message, "finish_reason": finish}], usage=usage
        )


def make_repo(tmp: Path) -> tuple[Path, Path, Path]:
    repo = tmp / "repo"
    repo.mkdir()
    (repo / "app.py").write_text(APP)
    (repo / "notes.txt").write_text(NOTES)
    for cmd in (
        ["git", "init", "-q"],
        ["git", "add", "."],
        ["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "init"],
    ):
        subprocess.run(cmd, cwd=repo, check=True)
    # a `restore` program on PATH: if the environment ever ran `restore`, the marker appears
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    marker = tmp / "restore-was-executed"
    (bin_dir / "restore").write_text(f"#!/bin/sh\ntouch {marker}\necho EXECUTED-BY-SHELL\n")
    (bin_dir / "restore").chmod(0o755)
    return repo, bin_dir, marker


CONFIGS = {"tool": "mini", "text": "mini_textbased"}


def run_mini(
    tmp: Path,
    style: str,
    llm: FakeLLM,
    monkeypatch: pytest.MonkeyPatch,
    *,
    k: int = 3,
    model_name: str = "fake/scripted",
) -> Any:
    repo, bin_dir, marker = make_repo(tmp)
    monkeypatch.setattr(litellm, "completion", llm)
    monkeypatch.setenv("MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT", "1")
    config = recursive_merge(
        get_config_from_spec(str(config_path(CONFIGS[style]))),
        {
            "agent": {
                "mode": "yolo",
                "confirm_exit": False,
                "output_path": str(tmp / "traj.json"),
                "cost_limit": 0,
            },
            # the seed's rendering (fixed boundary, no masking): these runs pin its mechanics end to end
            "model": {
                "model_name": model_name,
                "cost_tracking": "ignore_errors",
                "refold": {"k": k, "mask_after": None},
                "refold_boundary": {"rule": "fixed"},
            },
            "environment": {"cwd": str(repo), "env": {"PATH": f"{bin_dir}:{os.environ['PATH']}"}},
        },
    )
    model = get_model(config=config["model"])
    env = get_environment(config["environment"], default_type="local")
    agent = get_agent(model, env, config["agent"], default_type="interactive")  # what `mini` builds
    return agent, marker, tmp / "traj.json"


def outputs_of(prompt: list[dict[str, Any]], step: int) -> list[str]:
    """Texts of the observation messages labeled ``[step N]`` in a prompt."""
    texts = [content_text(m.get("content")) for m in prompt if m["role"] in ("user", "tool")]
    return [t for t in texts if t.startswith(f"[step {step}]\n")]


@pytest.mark.parametrize("style", ["tool", "text"])
def test_mini_with_refold_end_to_end(style: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    turns = scenario()
    llm = FakeLLM(list(turns), style)
    agent, marker, traj_path = run_mini(tmp_path, style, llm, monkeypatch)
    result = agent.run("Make add() robust.")
    n = len(turns)
    policy = Policy(k=3)

    assert result["exit_status"] == "Submitted"
    assert len(llm.prompts) == n
    # the environment never ran `restore`; the shell stand-in would have left a marker
    assert not marker.exists()
    assert not any("EXECUTED-BY-SHELL" in content_text(m.get("content")) for m in agent.messages)

    # the prompt texts refold adds
    first = llm.prompts[0]
    assert "## Context management" in content_text(first[0]["content"])
    assert response_format_lines(3) in content_text(first[1]["content"])

    # every call: boundary as the policy says, prefix stable while the boundary stays put
    replies = [m for m in agent.messages if m["role"] == "assistant"]
    assert len(replies) == n
    for t, reply in enumerate(replies):
        info = reply["extra"]["refold"]
        assert info["t"] == t and info["boundary"] == policy.boundary(t)
        assert info["prompt_tokens"] > 0 and info["base_prompt_tokens"] > 0
        assert info["provider_prompt_tokens"] == 1000 + t and info["provider_cached_tokens"] == 900
        if t and policy.boundary(t) == policy.boundary(t - 1):
            prev = llm.prompts[t - 1]
            assert llm.prompts[t][: len(prev)] == prev, f"prefix changed at t={t} without a boundary move"
    # (savings are asserted on a real run with the default config: tests/test_proxy_default_savings.py;
    # this scripted run pins the seed's mechanics, whose protocol text can outweigh them on 27 short steps)
    assert sorted({r["extra"]["refold"]["boundary"] for r in replies}) == list(range(0, 28, 3))

    last = llm.prompts[-1]  # sent at t = 32, boundary 27
    # labels on outputs of the tail (steps after the boundary are shown as received)
    for step in range(28, 33):
        assert len(outputs_of(last, step)) == 1
    # step 5 repeated step 2's read of an unchanged file: a stub pointing at step 2
    (s5,) = outputs_of(last, 5)
    assert CM in s5 and "step 2" in s5 and "helper number 11" not in s5
    # step 7 read the file after the edit: the changed line is shown, not deduplicated away
    (s7,) = outputs_of(last, 7)
    assert "return a + b + 0" in s7
    # step 8 was marked STALE at step 9: folded into a note once behind the boundary
    notes = [content_text(m["content"]) for m in last if content_text(m.get("content")).startswith(CM)]
    assert any("Step 8 folded" in x or "Steps 8-" in x or "[step 8] read the notes again" in x for x in notes)
    assert outputs_of(last, 8) == []
    assert replies[-1]["extra"]["refold"]["stubs"] >= 1 and replies[-1]["extra"]["refold"]["notes"] >= 1

    # restores: answered from the history, byte-exact as first shown
    saved = load(traj_path)
    assert len(saved) == n
    for step, target in ((11, 2), (30, 5)):
        obs = saved.step(step).observations
        assert len(obs) == 1 and obs[0]["extra"]["restore_of"] == [target]
        before = History(saved.prefix)
        for s in saved.steps[: step - 1]:
            before.append(s.reply, s.observations, meta=s.meta)
        assert content_text(obs[0]["content"]) == restore_text(before, [target], policy)
        original = content_text(saved.step(target).observations[0]["content"])
        assert f"[step {target}]\n{original}" in content_text(obs[0]["content"])
        assert saved.step(step).restore_of == (target,)
        # the model saw the restore answer (labeled, then the budget line) on its next call
        (seen,) = outputs_of(llm.prompts[step], step)
        answer, budget = seen.rsplit("\n", 1)
        assert answer == f"[step {step}]\n" + content_text(obs[0]["content"])
        assert budget.startswith(f"{CM} context: ") and budget.endswith("% of 128k tokens")
    bad = content_text(saved.step(31).observations[0]["content"])
    assert bad.startswith(CM) and "no step 99" in bad
    if style == "tool":
        assert saved.step(30).observations[0]["tool_call_id"] == "call_30"

    # the trajectory on disk is mini's: full, unrendered, complete
    data = json.loads(traj_path.read_text())
    assert data["trajectory_format"] == "mini-swe-agent-1.1"
    assert data["info"]["exit_status"] == "Submitted"
    assert data["info"]["config"]["refold"]["policy"]["k"] == 3
    assert data["messages"][-1]["role"] == "exit"
    on_disk = [m for m in data["messages"] if m["role"] == "assistant"]
    assert [content_text(m["content"]) for m in on_disk] == [reply_text(x, style) for x in turns]
    texts = [content_text(m["content"]) for m in data["messages"]]
    assert not any(x.startswith("[step ") for x in texts), "rendered labels leaked into mini's messages"
    assert sum("return a + b + 0" in x for x in texts) >= 2  # step 7 and the diff at step 12


def test_refold_disabled_sends_full_history(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    turns = scenario()[:6] + [Turn("submit", "-", "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT")]
    llm = FakeLLM(turns, "tool")
    agent, marker, _ = run_mini(tmp_path, "tool", llm, monkeypatch)
    agent.model.enabled = False
    agent.run("x")
    last = llm.prompts[-1]
    assert all(not content_text(m.get("content")).startswith("[step") for m in last)
    assert agent.messages[-1]["role"] == "exit"
    cut = max(i for i, m in enumerate(agent.messages) if m["role"] == "assistant")
    assert last == [clean(m) for m in agent.messages[:cut]]  # exactly mini's history before the last reply


@pytest.mark.parametrize("style", ["tool", "text"])
@pytest.mark.parametrize(
    ("command", "named"),
    [("ls; restore 2", "`ls`"), ("ls && restore 2", "`ls`"), ("ls\nrestore 2", "`ls`"),
     ("for f in a b; do restore 2; done", "`for f in a b; do \u2026; done`")],
)
def test_mini_a_restore_after_another_command_never_reaches_the_shell(
    style: str, command: str, named: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """mini reads the whole command before it runs: a restore after another command (or inside
    a loop) is answered "Not run" naming both parts (as the proxy does), and the environment
    runs neither."""
    turns = [
        Turn("list", "-", "ls"),
        Turn("read", "-", "cat app.py"),
        Turn("list and restore", "-", command),
        Turn("submit", "-", "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"),
    ]
    llm = FakeLLM(list(turns), style)
    agent, marker, _ = run_mini(tmp_path, style, llm, monkeypatch)
    assert agent.run("Look around.")["exit_status"] == "Submitted"
    assert not marker.exists()
    answer = content_text(llm.prompts[3][-1]["content"])
    assert "Not run" in answer and "`restore 2`" in answer and named in answer

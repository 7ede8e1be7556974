"""mini-swe-agent end to end with every context command: nested spans (one fold refused, then
accepted), ledger fold/drop/expand/search_ledger, restore, the budget line, and coreutils ``fold``
still run by the shell. The shipped configs, mini's real LiteLLM model classes (``litellm.completion``
replaced by a scripted fake), mini's interactive agent in yolo mode and the real LocalEnvironment
in a temporary git repository; the saved trajectory replays to exactly the prompts sent.
"""

from __future__ import annotations

import json
import os
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

from refold.context.tools import TAUGHT  # noqa: E402
from refold.integrations import config_path  # noqa: E402
from refold.integrations.saved import renderer_for  # noqa: E402
from refold.json_file import read_json  # noqa: E402
from refold.loaders import load  # noqa: E402
from refold.prompts import response_format_lines  # noqa: E402
from refold.protocol import CM, COMMAND_NAMES  # noqa: E402
from refold.types import content_text  # noqa: E402
from test_minisweagent_e2e import make_repo, outputs_of  # noqa: E402

ARG = {"restore": "steps", "begin_span": "question", "fold_span": "conclusion", "search_ledger": "query"}
QUOTED = ("begin_span", "fold_span", "search_ledger")
REFUSED = "the notes file only contains filler lines about a fox and a dog"
S2_END = "notes.txt is irrelevant to add() because it only holds filler text about a fox"
S1_END = "add() is defined at app.py:1; it now returns a + b + 0, so callers always get a number"


@dataclass
class Turn:
    progress: str
    stale: str
    command: str  # a shell command, or the argument of a context command
    tool: str = "bash"  # a context command name: issued as that command
    via_bash: bool = False  # in tool mode, issue the context command through the bash tool

    def shell(self) -> str:
        if self.tool == "bash":
            return self.command
        return f'{self.tool} "{self.command}"' if self.tool in QUOTED else f"{self.tool} {self.command}"


def scenario() -> list[Turn]:
    return [
        Turn("list the repository", "-", "ls"),  # 1
        Turn("open a span", "-", "where is add() defined and what does it return?", "begin_span"),  # 2: S1
        Turn("find add", "-", "grep -n 'def add' app.py"),  # 3
        Turn("open an inner span", "-", "do the notes say anything about add()?", "begin_span"),  # 4: S2
        Turn("read the notes", "-", "cat notes.txt"),  # 5
        Turn("close the inner span", "-", REFUSED, "fold_span"),  # 6: refused, no rationale
        Turn("close it with the why", "-", S2_END, "fold_span"),  # 7: S2 = steps 4-7
        Turn("edit add()", "-", "sed -i 's/return a + b$/return a + b + 0/' app.py"),  # 8
        Turn("commit", "-", "git -c user.email=t@t -c user.name=t commit -am 'make add robust'"),  # 9
        Turn("close the outer span", "-", S1_END, "fold_span"),  # 10: S1 = steps 2-10
        Turn("wrap the notes", "-", "fold -w 5 notes.txt | head -3"),  # 11: coreutils fold
        Turn("read app.py", "-", "cat app.py"),  # 12
        Turn("fold the read", "-", "12", "fold"),  # 13
        Turn("probe", "-", "echo probe one"),  # 14
        Turn("drop the wrapped notes", "14", "11", "drop"),  # 15; STALE 14
        Turn("look at the read again", "-", "12", "expand"),  # 16
        Turn("look into the span", "-", "S1", "expand"),  # 17
        Turn("search", "-", "helper number", "search_ledger", via_bash=True),  # 18
        Turn("probe again", "-", "echo probe two"),  # 19
        Turn("tabs", "-", "expand -t 4 notes.txt | head -1"),  # 20: coreutils expand
        Turn("bring back the grep", "-", "3", "restore"),  # 21
        Turn("submit", "-", "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"),  # 22
    ]


@dataclass
class ScriptedLLM:
    """Stands in for ``litellm.completion``; records every prompt and the tools it was offered."""

    turns: list[Turn]
    style: str  # tool | text | mswea (text with mini's ```mswea_bash_command blocks)
    prompts: list[list[dict[str, Any]]] = field(default_factory=list)
    tools: list[list[str] | None] = field(default_factory=list)

    def __call__(self, *, model: str, messages: list[dict[str, Any]], **kwargs: Any) -> Any:
        self.prompts.append(json.loads(json.dumps(messages)))
        self.tools.append([t["function"]["name"] for t in kwargs["tools"]] if "tools" in kwargs else None)
        i = len(self.prompts) - 1
        turn = self.turns[i]
        head = f"PROGRESS: {turn.progress}\nSTALE: {turn.stale}\n\nTHOUGHT: {turn.progress}."
        if self.style != "tool":
            fence = "mswea_bash_command" if self.style == "mswea" else "bash"
            message: dict[str, Any] = {
                "role": "assistant",
                "content": f"{head}\n\n```{fence}\n{turn.shell()}\n```",
            }
        else:
            if turn.tool == "bash" or turn.via_bash:
                name, args = "bash", {"command": turn.shell()}
            else:
                name, args = turn.tool, {ARG.get(turn.tool, "id"): turn.command}
            call = {
                "id": f"call_{i + 1}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)},
            }
            message = {"role": "assistant", "content": head, "tool_calls": [call]}
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        usage = {"prompt_tokens": 1000 + i, "completion_tokens": 20, "total_tokens": 1020 + i}
        return litellm.ModelResponse(
            model=model, choices=[{"index": 0, "message": message, "finish_reason": finish}], usage=usage
        )


def run(
    tmp: Path, style: str, llm: ScriptedLLM, monkeypatch: pytest.MonkeyPatch, rule: str = "fixed"
) -> tuple[Any, Path, Path, list[str]]:
    repo, bin_dir, marker = make_repo(tmp)
    calls = tmp / "shell-calls.log"
    for name in COMMAND_NAMES:  # if the environment ever ran a context command, the log shows it
        real = f"/usr/bin/{name}" if name in ("fold", "expand") else None
        tail = f'exec {real} "$@"' if real else "echo EXECUTED-BY-SHELL"
        (bin_dir / name).write_text(f'#!/bin/sh\necho "{name} $*" >> {calls}\n{tail}\n')
        (bin_dir / name).chmod(0o755)
    monkeypatch.setattr(litellm, "completion", llm)
    monkeypatch.setenv("MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT", "1")
    model: dict[str, Any] = {
        "model_name": "fake/scripted",
        "cost_tracking": "ignore_errors",
        "refold": {"k": 3, "mask_after": None},  # the seed's rendering: this run pins its mechanics
        "refold_boundary": {"rule": rule},
    }
    if style == "mswea":
        model["action_regex"] = r"```mswea_bash_command\s*\n(.*?)\n```"
    config = recursive_merge(
        get_config_from_spec(str(config_path("mini" if style == "tool" else "mini_textbased"))),
        {
            "agent": {
                "mode": "yolo",
                "confirm_exit": False,
                "output_path": str(tmp / "traj.json"),
                "cost_limit": 0,
            },
            "model": model,
            "environment": {"cwd": str(repo), "env": {"PATH": f"{bin_dir}:{os.environ['PATH']}"}},
        },
    )
    agent = get_agent(
        get_model(config=config["model"]),
        get_environment(config["environment"], default_type="local"),
        config["agent"],
        default_type="interactive",
    )
    executed: list[str] = []
    execute = agent.env.execute

    def recording(action: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        executed.append(action["command"])
        return execute(action, *args, **kwargs)

    agent.env.execute = recording
    return agent, tmp / "traj.json", calls, executed


def texts(prompt: list[dict[str, Any]]) -> list[str]:
    return [content_text(m.get("content")) for m in prompt]


@pytest.mark.parametrize("style", ["tool", "text", "mswea"])
def test_context_commands_end_to_end(style: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    turns = scenario()
    llm = ScriptedLLM(turns, style)
    agent, traj, calls, executed = run(tmp_path, style, llm, monkeypatch)
    assert agent.run("Make add() robust.")["exit_status"] == "Submitted"
    n = len(turns)
    assert len(llm.prompts) == n

    # the environment ran exactly the shell commands; coreutils fold/expand with files among them
    assert executed == [t.shell() for t in turns if t.tool == "bash"]
    assert calls.read_text().splitlines() == ["fold -w 5 notes.txt", "expand -t 4 notes.txt"]
    assert not any("EXECUTED-BY-SHELL" in x for x in texts(agent.messages))

    # tools offered: bash and the context commands in tool mode, none in text mode
    offered = [c for c in COMMAND_NAMES if c not in TAUGHT]  # fold_steps, pin, unpin: once taught
    assert llm.tools == ([["bash", *offered]] * n if style == "tool" else [None] * n)

    # the prompt texts: one copy of the format lines; span and ledger sections; the budget line
    first = texts(llm.prompts[0])
    assert "\n".join(first).count(response_format_lines(3)) == 1
    assert response_format_lines(3) in first[1]
    for title in ("## Context management", "## Folding an investigation", "## The ledger of outputs"):
        assert first[0].count(title) == 1
    assert f"`{CM} context: N% of 128k tokens`" in first[0]
    for t in range(1, n):
        if t in (7, 10):  # the step closed a span: its block ends the prompt
            continue
        last = texts(llm.prompts[t])[-1]
        assert last.startswith(f"[step {t}]\n") and last.splitlines()[-1].startswith(f"{CM} context: ")
        assert last.endswith("% of 128k tokens")

    # what the commands answered (as saved; the model saw each with the next call unless a span folded it)
    history = load(traj)

    def answer(step: int) -> str:
        text = content_text(history.step(step).observations[0]["content"])
        if step not in (7, 10):
            (seen,) = outputs_of(llm.prompts[step], step)
            assert seen.startswith(f"[step {step}]\n{text}\n{CM} context: ")
        return text

    assert history.step(11).observations[0]["extra"]["raw_output"].splitlines() == ["note ", "line ", "0: th"]

    assert "Span S1 opened at step 2" in answer(2) and "Span S2 opened at step 4, inside span S1" in answer(4)
    assert "fold_span refused, span S2" in answer(6) and "says what but not why" in answer(6)
    assert "Span S2 folded: steps 4-7" in answer(7) and "Span S1 folded: steps 2-10" in answer(10)
    assert "12: replaced by its one-line summary" in answer(13) and "11: removed" in answer(15)
    assert "Output 12 restored from history" in answer(16) or "Step 12 restored from history" in answer(16)
    assert "Span S1 expanded one level (steps 2-10)" in answer(
        17
    ) and f"{CM} Span S2 folded: steps 4-7" in answer(17)
    # as the prompt of call 18 shows step 12: folded, and its expand (step 16) shows it again
    assert 'search_ledger "helper number"' in answer(18) and "\n12 [folded, shown again at step 16] file app.py" in answer(18)
    assert "Step 3 restored from history" in answer(21) and "def add(a, b):" in answer(21)

    # spans collapse as soon as they close: S2 at the call after step 7, S1 (with S2 inside) after 10
    def block(t: int, span: str) -> str:
        found = [x for x in texts(llm.prompts[t]) if x.startswith(f"{CM} Span {span} folded: steps")]
        assert len(found) == 1, (t, span)
        return found[0]

    s2 = block(7, "S2")
    assert f"Conclusion: {S2_END}" in s2 and "Question: do the notes say anything about add()?" in s2
    assert outputs_of(llm.prompts[7], 5) == []  # the notes read folded away
    s1 = block(10, "S1")
    assert (
        f"Conclusion: {S1_END}" in s1
        and f"Inner span S2 (steps 4-7): do the notes say anything about add()? -> {S2_END}" in s1
    )
    assert "Kept:\n- step 8 edited app.py:\n    sed -i 's/return a + b$/return a + b + 0/' app.py" in s1
    assert "- step 9 commit " in s1 and "make add robust" in s1
    final = llm.prompts[-1]  # t = 21, boundary 18
    assert block(n - 1, "S1") == s1 and all(outputs_of(final, i) == [] for i in range(2, 11))
    # ledger fold/drop in effect behind the boundary; STALE step 14 folded into a note
    (s12,) = outputs_of(final, 12)
    assert s12.startswith(f"[step 12]\n{CM} Output 12 folded: file app.py:1-")
    assert s12.endswith("`expand 12` (or `restore 12`) shows it.") and "helper number" not in s12
    assert outputs_of(final, 11) == [
        f"[step 11]\n{CM} Output 11 dropped. `expand 11` (or `restore 11`) shows it."
    ]
    notes = [x for x in texts(final) if x.startswith(f"{CM} Step 14 folded (marked STALE)")]
    assert notes == [
        f"{CM} Step 14 folded (marked STALE); reply and output omitted, `restore 14` shows them:\n[step 14] probe"
    ]

    # the saved trajectory: mini's format, full history, context commands kept as issued
    data = read_json(traj)
    assert data["trajectory_format"] == "mini-swe-agent-1.1" and data["messages"][-1]["role"] == "exit"
    saved = data["info"]["config"]["refold"]
    assert saved["context_tools"] is (style == "tool") and saved["format_in_system"] is False
    assert saved["ledger"]["budget_tokens"] == 128000 and saved["spans"]["prompt"] is True
    assert len(history) == n
    for turn, step in zip(turns, history.steps, strict=True):
        (action,) = step.actions
        cmd = action.context  # the typed fact: coreutils fold/expand are no context commands
        if turn.tool == "bash":
            assert action.command == turn.command and cmd is None
        else:
            assert cmd is not None and (cmd.name, cmd.argument) == (turn.tool, turn.command)
            assert step.reply["extra"]["actions"] == []  # taken out before the environment saw them
            assert step.observations[0]["extra"]["refold_command"] == turn.tool
    assert [r.ok for r in history.step(6).outcomes] == [False]
    assert history.step(21).restore_of == (3,)

    # replaying the saved file renders exactly the prompts the model saw, call by call
    renderer = renderer_for(data)
    assert [renderer.render(history, t).messages for t in range(n)] == llm.prompts


FOLD_END = "steps 2-3 were a dead end: the error at line 1 is not raised there, so the cause lies elsewhere"


@pytest.mark.parametrize("style", ["tool", "text"])
def test_a_fold_after_the_fact_waits_for_the_next_boundary_move(style: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The cost rule: everything after step 2 is cached, so the fold of steps 2-3 is shown with the
    next boundary move (call 16, after step 15), not at once; the answer says so."""
    turns = [Turn(f"print block {i}", "-", f"seq {i}000 {i}999") for i in range(1, 13)]
    turns += [Turn("fold the dead end", "-", f'2-3 "{FOLD_END}"', "fold_steps", via_bash=True)]  # 13
    turns += [Turn("probe", "-", "echo a"), Turn("probe", "-", "echo b"), Turn("submit", "-", "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT")]
    llm = ScriptedLLM(turns, style)
    agent, traj, _, executed = run(tmp_path, style, llm, monkeypatch, rule="cost")
    assert agent.run("Find the cause.")["exit_status"] == "Submitted"
    assert not any(c.startswith("fold_steps") for c in executed)
    history = load(traj)
    said = content_text(history.step(13).observations[0]["content"])
    assert "Span S1 folded after the fact: steps 2-3 become one block" in said
    assert "at the next cache-boundary move (within 5 calls); folding now would recompute ~" in said

    def block(t: int) -> list[str]:
        return [x for x in texts(llm.prompts[t]) if x.startswith(f"{CM} Span S1 folded: steps 2-3")]

    assert block(13) == [] and block(14) == []  # the calls after steps 13 and 14: the cached prefix stays
    assert texts(llm.prompts[14])[: len(llm.prompts[13])] == texts(llm.prompts[13])
    assert len(block(15)) == 1 and f"Conclusion: {FOLD_END}" in block(15)[0]
    assert outputs_of(llm.prompts[15], 2) == [] and outputs_of(llm.prompts[15], 3) == []
    renderer = renderer_for(read_json(traj))  # the saved run replays to the prompts sent
    assert [renderer.render(history, t).messages for t in range(len(turns))] == llm.prompts

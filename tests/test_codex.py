"""Codex CLI rollouts (refold.formats.codex) read as a History: one step per model response, its
shell calls as the command lines they run, outputs paired by call_id, recorded usage per call,
each compacted context its own part, and a bad line named by its number."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from codex_rollouts import FIXTURE, PATCH, Lines, fix_bug, freeform, structured, unified, unified_exec
from refold.errors import TrajectoryError
from refold.formats.codex import read_rollout
from refold.history import is_kept
from refold.json_file import read_json
from refold.lab.replay.recorded_calls import reasoning_tokens
from refold.loaders import agent_names, detect_format, load, load_all
from refold.mechanisms.summary_wrap import unwrap
from refold.shell_tools import _CONTEXT_WORD as CONTEXT_WORD
from refold.shell_tools import canonical_call


def write(tmp_path: Path, r: Lines | str, name: str = "rollout.jsonl") -> Path:
    path = tmp_path / name
    path.write_text(r if isinstance(r, str) else r.text(), encoding="utf-8")
    return path


def calls(step: Any) -> list[tuple[str, str]]:
    return [(c["function"]["name"], c["function"]["arguments"]) for c in step.reply.get("tool_calls") or []]


def commands(step: Any) -> list[str]:
    return [json.loads(args)["command"] for name, args in calls(step) if name == "bash"]


def task(r: Lines) -> Lines:
    return r.meta().turn().user("Fix the bug.")


def test_the_fixture_is_what_the_builder_writes() -> None:
    # the CLI tests replay the file: it must not drift from the builder the other tests use
    assert FIXTURE.read_text(encoding="utf-8") == fix_bug().text()


def test_each_response_is_one_step_with_its_usage() -> None:
    h = load(FIXTURE)
    assert detect_format(read_json(FIXTURE)) == "codex" and h.meta["format"] == "codex"
    assert [m["role"] for m in h.prefix] == ["system", "developer", "user", "user"]
    assert h.prefix[0]["content"] == "You are Codex, a coding agent." and h.meta["instructions_recorded"]
    assert len(h) == 7 and h.meta["model"] == "gpt-5-codex" and h.meta["cli_version"] == "0.63.0"
    assert h.step(1).meta["usage"] == {"prompt_tokens": 5200, "cached_tokens": 0, "completion_tokens": 90}
    assert h.step(7).meta["usage"] == {"prompt_tokens": 7100, "cached_tokens": 6784, "completion_tokens": 25}
    assert [reasoning_tokens(s.reply) for s in h.steps] == [64, 32, 16, 48, 0, 0, 0]
    assert "unreplied" not in h.meta and h.meta["tool_calls"]
    # timestamps: replay's idle gaps and the viewer's clock read them
    assert h.step(2).meta["time"] > h.step(1).meta["time"]


def test_shell_argv_is_the_command_it_runs() -> None:
    h = load(FIXTURE)
    assert commands(h.step(1)) == ["rg -n 'total' src"]
    assert commands(h.step(2)) == ["sed -n '1,27p' src/app.py"]
    assert commands(h.step(3)) == ["cat src/app.py"]  # exec_command's cmd
    assert commands(h.step(5)) == ["python -m pytest -q tests/test_app.py"]  # shell_command's string
    kinds = [[(a.effects.kind, a.effects.reads) for a in s.actions if a.effects] for s in h.steps]
    assert kinds[1] == [("read", ("src/app.py",))] and kinds[2] == [("read", ("src/app.py",))]
    assert h.step(5).actions[0].effects and h.step(5).actions[0].effects.kind == "test"


@pytest.mark.parametrize(
    ("argv", "command"),
    [
        (["bash", "-lc", "cd x && rg foo"], "cd x && rg foo"),
        (["/bin/zsh", "-c", "ls"], "ls"),
        (["ls", "-la", "my dir"], "ls -la 'my dir'"),  # no shell: the argv quoted back into a line
    ],
)
def test_argv_forms(tmp_path: Path, argv: list[str], command: str) -> None:
    r = task(Lines()).shell("c1", argv).usage(100, 0, 5, 0).output("c1", freeform("ok"))
    assert commands(load(write(tmp_path, r)).step(1)) == [command]


def test_local_shell_call_is_a_shell_command(tmp_path: Path) -> None:
    r = task(Lines())
    r.add("response_item", {"type": "local_shell_call", "call_id": "ls1", "status": "completed",
                            "action": {"type": "exec", "command": ["bash", "-lc", "cat a.py"]}})  # fmt: skip
    r.usage(100, 0, 5, 0).output("ls1", structured("x = 1"))
    step = load(write(tmp_path, r)).step(1)
    assert commands(step) == ["cat a.py"] and step.observations[0]["tool_call_id"] == "ls1"


def test_apply_patch_is_an_edit(tmp_path: Path) -> None:
    h = load(FIXTURE)
    (action,) = h.step(4).actions
    assert calls(h.step(4)) == [("apply_patch", PATCH)]
    assert action.effects and action.effects.kind == "edit" and action.effects.writes == ("src/app.py",)
    # the older function form ({"input": patch}) and a patch run through the shell edit the same file
    r = task(Lines()).call("p1", "apply_patch", {"input": PATCH}).usage(100, 0, 5, 0).output("p1", "Done!")
    r.shell("p2", ["apply_patch", PATCH]).usage(120, 100, 5, 0).output("p2", structured("Done!"))
    h = load(write(tmp_path, r))
    assert [[a.effects.writes for a in s.actions if a.effects] for s in h.steps] == [[("src/app.py",)], [("src/app.py",)]]


def test_parallel_calls_are_one_response_paired_by_call_id(tmp_path: Path) -> None:
    r = task(Lines()).reasoning("two reads").shell("a", ["bash", "-lc", "cat a.py"]).shell("b", ["bash", "-lc", "cat b.py"])
    r.usage(100, 0, 20, 10).output("b", structured("B")).output("a", structured("A"))
    r.say("done").usage(150, 100, 5, 0)
    h = load(write(tmp_path, r))
    assert len(h) == 2 and commands(h.step(1)) == ["cat a.py", "cat b.py"]
    assert [o["tool_call_id"] for o in h.step(1).observations] == ["b", "a"]
    items = h.step(1).reply["extra"]["responses"]
    assert [i["type"] for i in items] == ["reasoning", "function_call", "function_call"]  # kept as received
    assert items[0]["encrypted_content"].startswith("gAAAAB") and h.step(1).reply["content"] == ""


def test_older_codex_reports_usage_before_its_interleaved_items(tmp_path: Path) -> None:
    # older Codex: the usage event first, then each call followed by its output
    r = task(Lines()).usage(100, 0, 20, 0).shell("a", ["bash", "-lc", "cat a.py"]).output("a", structured("A"))
    r.shell("b", ["bash", "-lc", "cat b.py"]).output("b", structured("B"))
    r.usage(150, 100, 5, 0).say("done")
    h = load(write(tmp_path, r))
    assert len(h) == 2 and commands(h.step(1)) == ["cat a.py", "cat b.py"]
    assert [o["tool_call_id"] for o in h.step(1).observations] == ["a", "b"]
    assert [s.meta["usage"]["prompt_tokens"] for s in h.steps] == [100, 150]


def test_a_response_whose_tools_ran_while_it_streamed_is_one_step(tmp_path: Path) -> None:
    # each output written right after its call, the usage event after the whole response
    r = task(Lines()).shell("a", ["bash", "-lc", "cat a.py"]).output("a", structured("A"))
    r.shell("b", ["bash", "-lc", "cat b.py"]).output("b", structured("B")).usage(100, 0, 20, 0)
    r.say("done").usage(150, 100, 5, 0)
    h = load(write(tmp_path, r))
    assert len(h) == 2 and commands(h.step(1)) == ["cat a.py", "cat b.py"]
    assert [o["tool_call_id"] for o in h.step(1).observations] == ["a", "b"]
    assert [s.meta["usage"]["prompt_tokens"] for s in h.steps] == [100, 150]


def test_without_usage_events_a_tool_output_ends_a_response(tmp_path: Path) -> None:
    r = task(Lines()).shell("a", ["bash", "-lc", "cat a.py"]).output("a", structured("A"))
    r.shell("b", ["bash", "-lc", "cat b.py"]).output("b", structured("B")).say("done")
    h = load(write(tmp_path, r))
    assert len(h) == 3 and all("usage" not in s.meta for s in h.steps)


def test_a_repeated_usage_event_is_one_call_and_a_lone_one_a_call_without_reply(tmp_path: Path) -> None:
    r = task(Lines()).shell("a", ["bash", "-lc", "ls"]).usage(100, 0, 5, 0)
    r.rows.append(r.rows[-1])  # the same totals again (a rate-limit update)
    r.output("a", structured("a.py")).usage(130, 100, 7, 0)  # a call whose reply was not stored
    r.add("event_msg", {"type": "turn_aborted", "reason": "interrupted"})
    h = load(write(tmp_path, r))
    assert len(h) == 1 and h.meta["unreplied"] == [{"step": 1, "observations": 1, "type": "no reply stored", "prompt_tokens": 130, "output_tokens": 7}]


def test_a_rollback_drops_the_last_turns_from_later_prompts(tmp_path: Path) -> None:
    # Codex's thread_rolled_back: the history loses the last num_turns user turns (and the
    # context update just before them); the calls made in them were still made
    r = task(Lines()).shell("a", ["bash", "-lc", "cat a.py"]).usage(100, 0, 5, 0).output("a", structured("x = 1"))
    r.say("Fixed.").usage(130, 100, 6, 0).turn()
    r.user("<permissions instructions>on-request</permissions instructions>", role="developer").user("Now add a test.")
    r.shell("b", ["bash", "-lc", "cat test_a.py"]).usage(150, 130, 7, 0).output("b", structured("def test(): pass"))
    r.say("Added.").usage(180, 150, 8, 0)
    r.add("event_msg", {"type": "thread_rolled_back", "num_turns": 1}).turn().user("Add a changelog line instead.")
    r.say("Done.").usage(140, 130, 9, 0)
    h = load(write(tmp_path, r))
    assert [s.reply["content"] for s in h.steps] == ["", "Fixed.", "Done."]
    assert [m["content"] for m in h.step(2).observations] == ["Add a changelog line instead."]
    assert "Now add a test." not in json.dumps(h.messages()) and "on-request" not in json.dumps(h.messages())
    assert h.meta["rollbacks"] == 1 and h.meta["rolled_back_calls"] == 2
    assert h.meta["unreplied"] == [  # made after step 2, before the turn that replaced them
        {"step": 2, "observations": 0, "type": "rolled back", "prompt_tokens": 150, "output_tokens": 7},
        {"step": 2, "observations": 0, "type": "rolled back", "prompt_tokens": 180, "output_tokens": 8},
    ]  # fmt: skip


def test_a_rollback_past_every_turn_keeps_the_session_context(tmp_path: Path) -> None:
    r = task(Lines()).say("one").usage(100, 0, 5, 0).add("event_msg", {"type": "thread_rolled_back", "num_turns": 3})
    r.user("Again.").say("two").usage(90, 0, 5, 0)
    h = load(write(tmp_path, r))
    assert [m["content"] for m in h.prefix] == ["You are Codex, a coding agent.", "Again."]
    assert len(h) == 1 and h.meta["unreplied"] == [{"step": 0, "observations": 1, "type": "rolled back", "prompt_tokens": 100, "output_tokens": 5}]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.one_of(st.integers(0, 3), st.integers(-3, -1)), min_size=1, max_size=8))
def test_rollbacks_keep_every_call_and_only_the_live_turns(plan: list[int]) -> None:
    """A session of turns (n >= 0: a turn with n tool calls and a final answer) and rollbacks
    (-n: the last n turns dropped): every call is still counted (a step or an unreplied call),
    and the prompts hold exactly the turns not rolled back, in order."""
    r, live, calls, turn = Lines().meta().turn(), [], 0, 0
    for n in plan:
        if n < 0:
            r.add("event_msg", {"type": "thread_rolled_back", "num_turns": -n})
            del live[max(0, len(live) + n) :]
            continue
        turn += 1
        r.turn().user(f"Ask {turn}.")
        live.append(f"Ask {turn}.")
        for k in range(n):
            r.shell(f"c{turn}.{k}", ["bash", "-lc", f"cat f{k}.py"]).usage(100, 0, 5, 0).output(f"c{turn}.{k}", structured("x"))
        r.say(f"Answer {turn}.").usage(100, 0, 5, 0)
        calls += n + 1
    parts, _ = read_rollout([json.loads(line) for line in r.text().splitlines()], "r.jsonl")
    (part,) = parts
    assert sum(1 for m in part.messages if m["role"] == "assistant") + len(part.unreplied) == calls
    assert [m["content"] for m in part.messages if m["role"] == "user"] == live


def compacted(replacement: bool) -> Lines:
    r = task(Lines()).shell("a", ["bash", "-lc", "cat a.py"]).usage(100, 0, 5, 0).output("a", structured("x = 1"))
    r.usage(900, 100, 300, 0)  # the summarization call
    payload: dict[str, Any] = {"message": "Summary: a.py sets x."}
    if replacement:
        payload["replacement_history"] = [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Fix the bug."}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Summary: a.py sets x."}]},
        ]
    r.add("compacted", payload).turn()
    r.shell("b", ["bash", "-lc", "cat b.py"]).usage(300, 0, 5, 0).output("b", structured("y = 2")).say("done").usage(320, 300, 5, 0)
    return r


@pytest.mark.parametrize("replacement", [True, False])
def test_each_compacted_context_is_a_part(tmp_path: Path, replacement: bool) -> None:
    path = write(tmp_path, compacted(replacement))
    assert agent_names(read_json(path)) == ["part1", "part2"]
    with pytest.raises(TrajectoryError, match=r"holds 2 contexts \(Codex compacted its history\).*#part1"):
        load(path)
    first, second = load_all(path)
    assert first.source.endswith("#part1") and second.meta["agent"] == "part2"
    assert len(first) == 1 and first.meta["unreplied"] == [{"step": 1, "observations": 1, "type": "compaction", "prompt_tokens": 900, "output_tokens": 300}]
    # the second context's prompts were built from the summary, not from the first's steps
    texts = [(m["role"], m["content"]) for m in second.prefix]
    assert texts == [("system", "You are Codex, a coding agent."), ("user", "Fix the bug."), ("user", "Summary: a.py sets x.")]
    assert len(second) == 2 and commands(second.step(1)) == ["cat b.py"]
    assert ("compactions_rebuilt" in second.meta) is not replacement
    assert load(f"{path}#part2").prefix[-1]["content"] == "Summary: a.py sets x."


def test_a_replacement_history_keeps_the_answers_it_holds(tmp_path: Path) -> None:
    # Codex 0.10x (seen in real rollouts): the replacement keeps earlier final answers verbatim,
    # then the context messages, then the summary as an encrypted ``compaction`` item
    r = task(Lines()).say("First answer.").usage(100, 0, 5, 0)
    r.add("compacted", {"message": "", "replacement_history": [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Fix the bug."}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "First answer."}], "phase": "final_answer"},
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "<permissions>"}]},
        {"type": "compaction", "encrypted_content": "gAAAA"},
    ]}).turn()  # fmt: skip
    r.say("done").usage(300, 0, 5, 0)
    _, second = load_all(write(tmp_path, r))
    shown = [(m["role"], m["content"], is_kept(m)) for m in second.prefix]
    assert shown == [
        ("system", "You are Codex, a coding agent.", False), ("user", "Fix the bug.", False),
        ("assistant", "First answer.", True), ("developer", "<permissions>", False),
    ]  # fmt: skip  (a prefix message, as Codex sends it: no call of this context wrote it)
    assert len(second) == 1 and second.meta["replacement_replies"] == 1
    assert second.meta["replacement_items_skipped"] == 1  # the encrypted summary


def test_a_poll_of_a_running_command_is_read_as_that_command(tmp_path: Path) -> None:
    # Codex 0.12x (seen in real rollouts): exec_command answers that the command runs, the
    # model polls it with write_stdin, whose output is the command's
    r = task(Lines()).exec("e1", "sed -n '1,5p' src/app.py").usage(100, 0, 5, 0).output("e1", unified_exec(None, session=48230))
    r.poll("p1", 48230).usage(140, 100, 5, 0).output("p1", unified_exec("import sys\n"))
    r.poll("p2", 48230, chars="\u0003").poll("p3", 999).usage(180, 140, 5, 0)
    r.output("p2", "write_stdin failed: stdin is closed").output("p3", "no such session").say("done").usage(200, 180, 5, 0)
    h = load(write(tmp_path, r))
    assert commands(h.step(1)) == commands(h.step(2)) == ["sed -n '1,5p' src/app.py"]
    assert h.step(2).actions[0].effects.kind == "read" and h.meta["polls_read_as_commands"] == 1
    # typing into the process, or polling a session the file never started: kept as issued
    assert [name for name, _ in calls(h.step(3))] == ["write_stdin", "write_stdin"]


def test_a_remote_compaction_of_codex_0_144(tmp_path: Path) -> None:
    # the shape of a real 0.144 rollout: world_state lines, the compaction's usage event repeating
    # the totals (no call of the session's), the context injected again after the compaction
    def context(r: Lines) -> Lines:
        r.user("<permissions instructions>sandbox</permissions instructions>", role="developer")
        return r.user("<environment_context><cwd>/w</cwd></environment_context>").add("world_state", {"full": True, "state": {}})

    r = context(Lines().meta().add("event_msg", {"type": "task_started", "turn_id": "t1"})).turn().user("Create notes.md.")
    r.say("I'll create it.").patch("c1", PATCH).output("c1", "Success.", kind="custom_tool_call_output").usage(13463, 9984, 171, 0)
    r.say("Created.").usage(13690, 13056, 67, 0)
    r.add("compacted", {"message": "", "window_number": 1, "replacement_history": [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Create notes.md."}]},
        {"type": "compaction", "id": "cmp_1", "encrypted_content": "gAAAA"},
    ]})  # fmt: skip
    total = {**r.totals, "total_tokens": r.totals["input_tokens"] + r.totals["output_tokens"]}
    zero = {"input_tokens": 0, "cached_input_tokens": 0, "output_tokens": 0, "reasoning_output_tokens": 0, "total_tokens": 4643}
    r.add("event_msg", {"type": "token_count", "info": {"total_token_usage": total, "last_token_usage": zero}})
    context(r.add("event_msg", {"type": "context_compacted"})).turn().user("What is in notes.md?").say("Facts.").usage(13651, 9984, 13, 0)
    first, second = load_all(write(tmp_path, r))
    assert [s.meta["usage"]["prompt_tokens"] for s in (*first.steps, *second.steps)] == [13463, 13690, 13651]
    assert "unreplied" not in first.meta and "unreplied" not in second.meta
    assert [m["role"] for m in second.prefix] == ["system", "user", "developer", "user", "user"]
    assert second.prefix[-1]["content"] == "What is in notes.md?" and second.meta["replacement_items_skipped"] == 1


def test_an_output_of_content_items_keeps_its_image(tmp_path: Path) -> None:
    parts = [{"type": "input_text", "text": "the screenshot"}, {"type": "input_image", "image_url": "data:image/png;base64,AAAA"}]
    r = task(Lines()).call("v", "view_image", {"path": "shot.png"}).usage(100, 0, 5, 0).output("v", parts)
    (obs,) = load(write(tmp_path, r)).step(1).observations
    assert obs["content"] == [{"type": "text", "text": "the screenshot"}, {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]


def test_the_old_form_reads_without_usage(tmp_path: Path) -> None:
    rows = [
        {"id": "0199aaaa", "timestamp": "2025-06-01T10:00:00Z", "instructions": None},
        {"record_type": "state"},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "List files."}]},
        {"type": "function_call", "name": "shell", "arguments": json.dumps({"command": ["bash", "-lc", "ls"]}), "call_id": "c1"},
        {"type": "function_call_output", "call_id": "c1", "output": {"content": "a.py", "success": True}},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "One file."}]},
    ]
    h = load(write(tmp_path, "".join(json.dumps(r) + "\n" for r in rows)))
    assert h.meta["format"] == "codex" and not h.meta["instructions_recorded"]
    assert "partial" not in h.meta  # the old form's first line is its session meta
    assert len(h) == 2 and commands(h.step(1)) == ["ls"] and h.step(1).observations[0]["content"] == "a.py"


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ("{not json", "invalid JSON Lines at line 3"),
        ("[1, 2]", "line 3: is list, not a JSON object"),
        ('{"timestamp": "t", "type": "response_item", "payload": 5}', "line 3: the payload of a 'response_item' line is not an object"),
        ('{"timestamp": "t", "type": "response_item", "payload": {"role": 1}}', "line 3: a message whose role is 1, not user"),
        ('{"timestamp": "t", "type": "response_item", "payload": {"content": "x"}}', "line 3: a response item without a 'type'"),
        ('{"timestamp": "t", "type": "response_item", "payload": {"type": "function_call_output", "output": "x"}}',
         "line 3: a 'function_call_output' item without a 'call_id'"),
    ],
)  # fmt: skip
def test_a_malformed_line_is_named(tmp_path: Path, line: str, words: str) -> None:
    good = Lines().meta().turn().text()
    path = write(tmp_path, good + line + "\n" + Lines().user("hi").text())
    with pytest.raises(TrajectoryError) as e:
        load(path)
    assert str(e.value) == f"{path}: {words}" or (words in str(e.value) and str(path) in str(e.value))
    assert "\n" not in str(e.value)


def test_a_rollout_without_a_response_has_no_calls(tmp_path: Path) -> None:
    with pytest.raises(TrajectoryError, match="Codex rollout holds no finished model response"):
        load(write(tmp_path, task(Lines())))


@pytest.mark.parametrize(
    ("text", "status", "body"),
    [
        (structured("a\nb", 0), 0, "a\nb"),
        (freeform("a\nb", 2), 2, "a\nb"),
        (unified("a\nb", 1), 1, "a\nb"),
        ("Wall time: 1.0 seconds\nProcess running with session ID 7\nOutput:\nwaiting", None, "waiting"),
        ("Exit code: 0\nWall time: 0 seconds\nTotal output lines: 900\nOutput:\nhead\n[... omitted 880 of 900 lines ...]\ntail", 0,
         "head\n[... omitted 880 of 900 lines ...]\ntail"),
        ("Exit code: 0 is what it printed", None, "Exit code: 0 is what it printed"),  # no header: printed text
    ],
)  # fmt: skip
def test_codex_output_framing_is_unwrapped(text: str, status: int | None, body: str) -> None:
    u = unwrap(text)
    assert (u.status, u.body) == (status, body)


@settings(max_examples=60, deadline=None)
@given(
    shape=st.lists(st.integers(min_value=0, max_value=3), min_size=1, max_size=6),
    order=st.sampled_from(["after", "before", "inline", "none"]),
)
def test_any_responses_read_back_as_written(shape: list[int], order: str) -> None:
    """Responses of 0-3 parallel calls, in each order Codex writes them: one step per response,
    its calls and outputs paired in order, its usage (where written) on that step."""
    r = task(Lines())
    for n, k in enumerate(shape):
        ids = [f"r{n}c{j}" for j in range(k)]
        if order == "before":
            r.usage(1000 + n, 0, 5, 0)
        r.say(f"response {n}")
        for i in ids:
            r.shell(i, ["bash", "-lc", f"cat {i}.py"])
            if order in ("before", "inline"):
                r.output(i, freeform(i))
        if order in ("after", "inline"):
            r.usage(1000 + n, 0, 5, 0)
        if order in ("after", "none"):
            for i in ids:
                r.output(i, freeform(i))
        if not k and n + 1 < len(shape):
            r.turn().user(f"go on {n}")  # a response without calls ends the turn
    rows = [json.loads(line) for line in r.text().splitlines()]
    (part,), _ = read_rollout(rows, "x")
    replies = [m for m in part.messages if m["role"] == "assistant"]
    assert [m["content"] for m in replies] == [f"response {n}" for n in range(len(shape))]
    for n, (k, m) in enumerate(zip(shape, replies, strict=True)):
        ids = [f"r{n}c{j}" for j in range(k)]
        assert [c["id"] for c in m.get("tool_calls") or []] == ids
        at = part.messages.index(m)
        assert [o.get("tool_call_id") for o in part.messages[at + 1 : at + 1 + k]] == ids
        usage = m["extra"].get("response", {}).get("usage")
        assert (usage["prompt_tokens"] if usage else None) == (None if order == "none" else 1000 + n)
    assert part.unreplied == []


@pytest.mark.parametrize("session", [[48230], {"id": 48230}])
def test_a_poll_naming_a_session_by_a_list_or_object_is_kept_as_issued(tmp_path: Path, session: Any) -> None:
    # was a TypeError traceback (an unhashable session id looked up in a dict); the proxy's
    # Responses parse reads polls the same way (a 500 for a client's request)
    from refold.proxy.responses_wire import parse

    r = task(Lines()).exec("e1", "sleep 9").usage(100, 0, 5, 0).output("e1", unified_exec(None, session=48230))
    r.call("p1", "write_stdin", {"session_id": session, "chars": ""}).usage(140, 100, 5, 0).output("p1", "done").say("ok")
    h = load(write(tmp_path, r))
    assert [name for name, _ in calls(h.step(2))] == ["write_stdin"]
    items = [{"type": "message", "role": "user", "content": "go"},
             {"type": "function_call", "name": "exec_command", "call_id": "c1", "arguments": json.dumps({"cmd": "sleep 9"})},
             {"type": "function_call_output", "call_id": "c1", "output": unified_exec(None, session=48230)},
             {"type": "function_call", "name": "write_stdin", "call_id": "c2", "arguments": json.dumps({"session_id": session, "chars": ""})},
             {"type": "function_call_output", "call_id": "c2", "output": "done"}]  # fmt: skip
    parsed = parse({"model": "m", "input": items})
    assert parsed.messages[-2]["tool_calls"][0]["function"]["name"] == "write_stdin"


def test_code_mode_exec_is_read_as_the_commands_it_runs(tmp_path: Path) -> None:
    # Codex 0.14x code mode: a free-form ``exec`` call whose JavaScript calls tools.exec_command
    def code(call_id: str, program: str) -> dict[str, Any]:
        return {"type": "custom_tool_call", "status": "completed", "call_id": call_id, "name": "exec", "input": program}

    r = task(Lines()).add("response_item", code("x1", 'const r = await tools.exec_command({cmd: "sed -n 1,40p src/app.py", workdir: "/w"});\ntext(r.output);'))
    r.usage(100, 0, 5, 0).output("x1", [{"type": "input_text", "text": "import sys\n"}], kind="custom_tool_call_output")
    r.add("response_item", code("x2", "for (const f of files) text(await tools.exec_command({cmd: `cat ${f}`}));"))
    r.usage(120, 100, 5, 0).output("x2", "a\n", kind="custom_tool_call_output").say("done").usage(130, 120, 5, 0)
    h = load(write(tmp_path, r))
    assert commands(h.step(1)) == ["sed -n 1,40p src/app.py"] and h.step(1).actions[0].effects.kind == "read"
    assert calls(h.step(2))[0][0] == "exec"  # a loop: what it runs is not known from its text
    # nor analyzed as a shell line ('for (const f ...' with its 'cat' was a read writing nothing)
    effects = h.step(2).actions[0].effects
    assert (effects.kind, effects.reads, effects.writes_anything) == ("command", (), True)


@pytest.mark.parametrize(("program", "read"), [
    ('text(await tools.exec_command({"cmd": "ls -la"}))', ("bash", {"command": "ls -la"})),
    ("const a = await tools.exec_command({cmd: 'git status'});\nconst b = await tools.exec_command({workdir: '/w', cmd: `pytest -q`});",
     ("bash", {"command": "git status\npytest -q"})),
    ('await tools.apply_patch("*** Begin Patch\\n*** End Patch\\n")', ("apply_patch", "*** Begin Patch\n*** End Patch\n")),
    ('if (ok) await tools.exec_command({cmd: "ls"})', None),  # a branch
    ('await tools.exec_command({cmd: "grep -n if a.py"})', ("bash", {"command": "grep -n if a.py"})),  # a word in a literal
    ('await tools.exec_command({cmd: "echo tools"})', ("bash", {"command": "echo tools"})),
    ('const t = tools; await tools.exec_command({cmd: "ls"})', None),  # tools by another name
    ('await tools.exec_command({cmd: "ls"}); await tools.apply_patch("p")', None),  # two kinds of call
    ('await tools.exec_command({cmd: "restore 3"})', None),  # never a command refold would answer
    ("await tools.exec_command({cmd: `cat ${f}`})", None),
    ('await tools.exec_command({cmd: "\\u0041"})', None),
    ('const f = "a.py";\nawait tools.exec_command({cmd: "cat " + f})', None),  # was read as `cat ` alone
    ('await tools.apply_patch("*** Begin Patch\\n" + rest)', None),
    ('await tools.exec_command({cmd: "ls".trim()})', None),
])  # fmt: skip
def test_code_mode_programs(program: str, read: tuple[str, Any] | None) -> None:
    name, args = canonical_call("exec", program, free_form=True)
    got = (name, json.loads(args) if name == "bash" else args)
    assert got == (read if read is not None else ("exec", program))


@settings(max_examples=60, deadline=None)
@given(st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\u2028\u2029"), min_size=1, max_size=40))
def test_a_code_mode_command_literal_reads_back(command: str) -> None:
    program = f"text(await tools.exec_command({{cmd: {json.dumps(command, ensure_ascii=False)}}}))"
    name, args = canonical_call("exec", program, free_form=True)
    readable = all(ch >= " " or ch in "\n\t\r" for ch in command) and not CONTEXT_WORD.search(command)
    assert name == ("bash" if readable else "exec")  # not read: \b, \u escapes; a context command's name
    assert (json.loads(args)["command"] if readable else args) == (command if readable else program)

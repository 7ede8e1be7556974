"""Claude Code session logs (refold.formats.claude_code): split replies merged, tool results paired by id,
the live chain only, compactions and subagents as sessions of their own, usage as reported usage,
and every malformed line one error naming the file and line."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from claude_code_log import CALC, Log, call, numbered, session, text
from refold.errors import TrajectoryError
from refold.formats.claude_code import NOTE, session_messages
from refold.history import History
from refold.json_file import read_json
from refold.lab.replay.paths import collect_paths
from refold.lab.replay.runner import iter_prompts, replay_sessions
from refold.lab.replay.settings import Settings
from refold.loaders import agent_names, detect_format, load, load_all
from refold.mechanisms.summary import summarize
from refold.mechanisms.summary_wrap import exit_status, unwrap
from refold.outline_lines import strip_line_numbers
from refold.shell import analyze
from refold.types import content_text

from conftest import run_cli

SHIPPED = Path(__file__).parent / "data" / "claude_code_session.jsonl"


@pytest.fixture
def log_path(tmp_path: Path) -> Path:
    return session(tmp_path / "session.jsonl")


def calls_of(m: dict[str, Any]) -> list[str]:
    return [c["id"] for c in m.get("tool_calls") or []]


def test_shipped_fixture_is_the_builders_session(tmp_path: Path) -> None:
    """tests/data/claude_code_session.jsonl is synthetic (claude_code_log.session), kept in step."""
    assert SHIPPED.read_text(encoding="utf-8") == session(tmp_path / "s.jsonl").read_text(encoding="utf-8")


def test_detected_as_claude_code_and_split_into_sessions(log_path: Path) -> None:
    data = read_json(log_path)
    assert detect_format(data) == "claude-code"
    assert agent_names(data) == ["main", "compact-1", "sidechain-1"]
    with pytest.raises(TrajectoryError, match=r"holds 3 sessions \(main, compact-1, sidechain-1\); name one as '.*#main'"):
        load(log_path)
    assert [h.source for h in load_all(log_path)] == [f"{log_path}#{n}" for n in ("main", "compact-1", "sidechain-1")]


def test_split_reply_lines_are_one_reply_with_every_block(log_path: Path) -> None:
    h = load(f"{log_path}#main")
    first = h.step(1).reply
    assert first["content"] == "I'll read calc.py and look for the tests."
    assert calls_of(first) == ["toolu_01", "toolu_02"]
    assert first["reasoning_content"] == "Look at the code first."  # thinking: kept aside, not in the text
    assert [c["function"]["name"] for c in first["tool_calls"]] == ["Read", "Grep"]
    assert len(h) == 5 and h.meta["model"] == "claude-sonnet-4-5-20250929"


def test_tool_results_follow_their_reply_in_the_order_written(log_path: Path) -> None:
    """Results were written out of call order (as they finished) and hang off different lines of
    the response: Claude Code sends them as written (its in-memory list, which the log mirrors)."""
    h = load(f"{log_path}#main")
    obs = h.step(1).observations
    assert [o["tool_call_id"] for o in obs] == ["toolu_02", "toolu_01"]
    assert obs[1]["role"] == "tool" and obs[1]["content"].startswith("     1\u2192")
    for s in h.steps:
        assert sorted(o["tool_call_id"] for o in s.observations if o["role"] == "tool") == sorted(calls_of(s.reply))


def test_only_the_live_branch_is_loaded(log_path: Path) -> None:
    h = load(f"{log_path}#main")
    ids = [cid for s in h.steps for cid in calls_of(s.reply)]
    assert "toolu_04x" not in ids and "toolu_04" in ids  # the rejected Write is a dead branch
    assert "doesn't want to proceed" not in json.dumps(h.messages())


def test_compaction_starts_a_new_context_from_the_summary(log_path: Path) -> None:
    h = load(f"{log_path}#compact-1")
    assert [m["role"] for m in h.prefix] == ["user"]  # the summary and the next ask: one API turn
    summary, ask = h.prefix[0]["content"]
    assert summary["text"].startswith("This session is being continued") and ask["text"] == "Now add a docstring to mean()."
    assert "toolu_01" not in json.dumps(h.messages())  # nothing from before the compaction
    assert [calls_of(s.reply) for s in h.steps] == [["toolu_06"], ["toolu_07"], ["toolu_08"], []]
    # the local command that asked for it stays with the context it was typed in
    assert load(f"{log_path}#main").step(5).observations[0]["content"].startswith("<command-name>/compact")


def test_subagent_conversation_is_its_own_session(log_path: Path) -> None:
    h = load(f"{log_path}#sidechain-1")
    assert h.prefix[0]["content"] == "Check calc.py for style problems."
    assert [a.command for s in h.steps for a in s.actions] == ["ruff check calc.py"]
    main = load(f"{log_path}#compact-1")
    assert "ruff check" not in json.dumps(main.messages())  # the parent sees only the Task result


def test_subagent_file_alone_is_one_session(tmp_path: Path) -> None:
    """Newer versions write each subagent to its own agent-*.jsonl: every line a sidechain line."""
    log = Log(sidechain=True)
    task = log.user("Find the config loader.")
    ids = log.reply("msg_a1", [call("t1", "Glob", pattern="**/config*.py")], parent=task)
    r = log.results(("t1", "src/config.py"), parent=ids[-1])
    log.reply("msg_a2", [text("It is src/config.py.")], parent=r)
    path = log.write(tmp_path / "agent-a1b2c3.jsonl")
    assert agent_names(read_json(path)) == []
    h = load(path)
    assert len(h) == 2 and h.step(1).actions[0].effects.kind == "search"


def test_usage_is_the_providers_prompt_with_cache_reads_and_writes(log_path: Path) -> None:
    h = load(f"{log_path}#main")
    assert h.step(1).meta["usage"] == {"prompt_tokens": 3 + 12000 + 4000, "cached_tokens": 12000, "completion_tokens": 120}
    results = replay_sessions(str(log_path), Settings(policies=("base",), tokenizer="chars4", validate=False))
    assert [r.error for r in results] == [None, None, None]
    assert results[0].reported["prompt_tokens"] == 16003 + 16605 + 16906 + 17106 + 17206
    assert results[0].reported["cached_tokens"] == 12000 + 16000 + 16600 + 16900 + 17100
    assert h.meta["note"] == NOTE


def test_split_lines_take_the_largest_output_count(tmp_path: Path) -> None:
    log = Log()
    task = log.user("hi")
    ids = log.reply("msg_1", [text("a"), call("t1", "Bash", command="ls")], parent=task)
    log.lines[-2]["message"]["usage"]["output_tokens"] = 1  # written before the response ended
    log.lines[-1]["message"]["usage"]["output_tokens"] = 33
    log.results(("t1", "x"), parent=ids[-1])
    h = load(log.write(tmp_path / "s.jsonl"))
    assert h.step(1).meta["usage"]["completion_tokens"] == 33


def test_a_mid_stream_output_count_is_left_out(tmp_path: Path) -> None:
    # Claude Code 2.1.x (seen in real logs): every line keeps the stream's first report (8 output
    # tokens) and no stop_reason, for a reply of thousands of characters
    log = Log()
    task = log.user("plan it")
    thought = {"type": "thinking", "thinking": "Let me think about the plan. " * 100, "signature": "sig"}
    usage = {"input_tokens": 1, "cache_creation_input_tokens": 500, "cache_read_input_tokens": 9000, "output_tokens": 8}
    ids = log.reply("msg_1", [thought, text("Here is the plan."), call("t1", "Bash", command="ls")], parent=task, usage=usage)
    r = log.results(("t1", "x"), parent=ids[-1])
    (short,) = log.reply("msg_2", [text("ok")], parent=r, usage=usage)  # a short reply: 8 may be its count
    final = log.reply("msg_3", [text("Done. " * 50)], parent=log.user("go on", parent=short), usage=usage)
    log.lines[-1]["message"]["stop_reason"] = "end_turn"  # the final report was written: kept
    h = load(log.write(tmp_path / "s.jsonl"))
    assert final and [s.meta["usage"]["completion_tokens"] for s in h.steps] == [None, 8, 8]
    assert h.step(1).meta["usage"]["prompt_tokens"] == 9501  # the prompt side is complete at the start


def test_a_failed_bash_gives_its_exit_status(tmp_path: Path) -> None:
    # Claude Code prints a failure as "Exit code N" then the output, a success as the output alone
    log = Log()
    ids = log.reply("msg_1", [call("t1", "Bash", command="make test"), call("t2", "Bash", command="echo hi")], parent=log.user("test it"))
    log.results(("t1", "Exit code 2\nmake: *** [test] Error 2"), ("t2", "hi"), parent=ids[-1], error=True)
    log.reply("msg_2", [text("It fails.")], parent=log.last)
    (failed, ok) = load(log.write(tmp_path / "s.jsonl")).step(1).observations
    assert exit_status(failed["content"]) == 2 and unwrap(failed["content"]).body == "make: *** [test] Error 2"
    assert exit_status(ok["content"]) is None
    assert summarize("make test", failed["content"], "bash").status == 2


def test_a_compaction_ends_its_context_with_the_summarization_call(log_path: Path) -> None:
    main, after, side = load_all(log_path)
    # after the last reply, the /compact command: that context, then the instruction, was summarized
    (entry,) = main.meta["unreplied"]
    assert {k: entry[k] for k in ("step", "observations", "type")} == {"step": len(main), "observations": 1, "type": "compaction"}
    # its reply: what the next session starts with (joined with the next ask into one user turn)
    assert entry["summary"].startswith("This session is being continued")
    assert entry["summary"] in content_text(after.prefix[0]["content"])
    assert "unreplied" not in after.meta and "unreplied" not in side.meta
    results = replay_sessions(str(log_path), Settings(policies=("base",), tokenizer="chars4", validate=False))
    assert results[0].calls == len(main) + 1


def test_a_compaction_whose_parent_was_never_written_takes_the_line_before(tmp_path: Path) -> None:
    # 2.1.x (seen in a real log): logicalParentUuid names a line the file does not hold
    log = Log()
    ids = log.reply("msg_1", [call("t1", "Bash", command="ls")], parent=log.user("list"))
    log.results(("t1", "a.py"), parent=ids[-1])
    boundary = log.other("system", None, subtype="compact_boundary", logicalParentUuid="never-written",
                         compactMetadata={"trigger": "auto", "preTokens": 1234})
    log.reply("msg_2", [text("ok")], parent=log.user("Summary: listed.", parent=boundary, isCompactSummary=True))
    main, after = load_all(log.write(tmp_path / "s.jsonl"))
    assert main.meta["unreplied"] == [{"step": 1, "observations": 1, "type": "compaction", "summary": "Summary: listed.", "prompt_tokens": 1234}]
    assert "unreplied" not in after.meta


def test_a_folder_leaves_out_the_compaction_call_its_session_ends_with(tmp_path: Path) -> None:
    log = Log()
    log.reply("msg_1", [text("hi")], parent=log.user("hello"))
    main = log.write(tmp_path / "abc.jsonl")
    (tmp_path / "abc" / "subagents").mkdir(parents=True)
    agent = Log(sidechain=True)
    agent.reply("msg_9", [text("<summary>")], parent=agent.user("Summarize."))
    compaction = agent.write(tmp_path / "abc" / "subagents" / "agent-acompact-1f2e3d.jsonl")
    helper = agent.write(tmp_path / "abc" / "subagents" / "agent-a1b2c3d.jsonl")
    assert collect_paths([tmp_path]) == [str(main), str(helper)]
    assert collect_paths([tmp_path / "abc"]) == [str(helper), str(compaction)]  # its session log not read
    assert collect_paths([compaction]) == [str(compaction)]  # named: read


def test_bookkeeping_and_synthetic_lines_are_skipped_meta_lines_kept(tmp_path: Path) -> None:
    log = Log()
    log.other("queue-operation", None, operation="dequeue")
    log.other("file-history-snapshot", None, messageId="m", snapshot={})
    task = log.user("Fix it.")
    caveat = log.user("Caveat: the messages below were generated by the user while running local commands.", parent=task, isMeta=True)
    ids = log.reply("msg_1", [call("t1", "Bash", command="make")], parent=caveat)
    r = log.results(("t1", "ok"), parent=ids[-1])
    hook = log.other("progress", r, data={"type": "hook_progress"})
    api_error = log.reply("msg_e", [text("API Error: 529 overloaded")], parent=hook, model="<synthetic>")
    log.other("system", api_error[-1], subtype="api_error", level="error")
    log.reply("msg_2", [text("Done.")], parent=log.last)
    h = load(log.write(tmp_path / "s.jsonl"))
    assert [m["content"] for m in h.prefix] == [[text("Fix it."), text(log.lines[3]["message"]["content"])]]  # one API turn
    assert [s.reply["content"] for s in h.steps] == ["", "Done."]  # no synthetic notice as a model call


def test_bash_read_edit_grep_map_to_refolds_analysis() -> None:
    bash = analyze("sed -n '1,5p' calc.py", "bash")
    assert bash.kind == "read" and bash.reads == ("calc.py",)
    read = analyze(json.dumps({"file_path": "/p/calc.py", "offset": 12, "limit": 2}), "Read")
    assert (read.kind, read.reads, read.first_line) == ("read", ("/p/calc.py",), 12)
    assert analyze(json.dumps({"file_path": "/p/calc.py"}), "Read").first_line is None
    for tool in ("Edit", "MultiEdit", "Write"):
        assert analyze(json.dumps({"file_path": "/p/calc.py", "edits": []}), tool).writes == ("/p/calc.py",)
    assert analyze(json.dumps({"notebook_path": "/p/a.ipynb", "new_source": "x"}), "NotebookEdit").writes == ("/p/a.ipynb",)
    grep = analyze(json.dumps({"pattern": "def x", "path": "/p"}), "Grep")
    assert (grep.kind, grep.reads) == ("search", ("/p",))
    assert analyze(json.dumps({"pattern": "**/*.py"}), "Glob").kind == "search"


def test_bash_calls_are_shell_commands(log_path: Path) -> None:
    step = load(f"{log_path}#main").step(2)
    (action,) = step.actions
    assert (action.tool, action.command, action.effects.kind) == ("bash", "python -m pytest -q test_calc.py", "test")
    assert json.loads(step.reply["tool_calls"][0]["function"]["arguments"])["description"] == "Run the tests"


def test_read_output_line_numbers_reach_the_outline() -> None:
    code, numbers = strip_line_numbers(numbered(CALC[11:13], 12))
    assert code == "\n".join(CALC[11:13]) and numbers == [12, 13]


def test_hidden_read_outline_names_file_lines(tmp_path: Path) -> None:
    src = [line for k in range(25) for line in (f"def f{k}(x):", f"    return x + {k}", "", "")]
    log = Log()
    p = log.user("Tidy engine.py.")
    ids = log.reply("m0", [call("t0", "Read", file_path="/p/engine.py")], parent=p)
    p = log.results(("t0", numbered(src)), parent=ids[-1])
    for k in range(1, 20):  # long enough for the default to move its boundary past step 1
        ids = log.reply(f"m{k}", [call(f"t{k}", "Bash", command=f"python bench.py {k}")], parent=p)
        p = log.results((f"t{k}", "\n".join(f"run {i}: {k * i} ms" for i in range(30))), parent=ids[-1])
    h = load(log.write(tmp_path / "s.jsonl"))
    last = list(iter_prompts(h, "default", tokenizer="chars4"))[-1]
    note = next(m["content"] for m in last.messages if m.get("tool_call_id") == "t0")
    assert "Output of `Read /p/engine.py` hidden (100 lines)" in note
    assert "def f1 L5" in note and "restore 1" in note  # file line numbers from the arrow prefixes


def test_cli_replay_reports_recorded_usage_and_the_note(log_path: Path) -> None:
    r = run_cli("replay", str(log_path), "--policy", "base,default", "--tokenizer", "chars4")
    assert r.returncode == 0, r.stderr
    out = " ".join(r.stdout.split())
    assert "3 sessions" in out and "Recorded usage (3 sessions): 148,914 prompt tokens" in out
    assert "system prompt and tool schemas Claude Code sent are not in its log" in out


# ---- malformed lines --------------------------------------------------------------------------


def write_lines(path: Path, lines: list[Any]) -> Path:
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines), encoding="utf-8")
    return path


def small() -> Log:
    log = Log()
    task = log.user("go")
    ids = log.reply("msg_1", [call("t1", "Bash", command="ls")], parent=task)
    log.results(("t1", "a.py"), parent=ids[-1])
    return log


@pytest.mark.parametrize(
    ("mutate", "words"),
    [
        (lambda ls: ls.insert(2, [1, 2]), "line 4: is list, not a JSON object"),
        (lambda ls: ls[1]["message"].update(content=5), "line 2: assistant content is int"),
        (lambda ls: ls[1]["message"]["content"][0].pop("id"), "line 2: assistant content[0]: tool_use has no 'id'"),
        (lambda ls: ls[2]["message"]["content"][0].pop("tool_use_id"), "line 4: user content[0]: tool_result has no 'tool_use_id'"),
        (lambda ls: ls[2]["message"].update(content=[7]), "line 4: user content[0] is not a content block"),
    ],
)
def test_malformed_line_is_one_error_naming_file_and_line(tmp_path: Path, mutate: Any, words: str) -> None:
    lines: list[Any] = small().lines
    mutate(lines)
    text_lines: list[Any] = [*lines[:2], "", *lines[2:]]  # a blank line: numbers are file lines
    path = write_lines(tmp_path / "bad.jsonl", text_lines)
    with pytest.raises(TrajectoryError) as e:
        load(path)
    assert str(e.value).startswith(f"{path}: ") and words in str(e.value) and "\n" not in str(e.value)
    r = run_cli("replay", str(path), "--policy", "base", "--tokenizer", "chars4")
    assert r.returncode == 1 and "Traceback" not in r.stderr and words in r.stderr


def test_truncated_last_line_names_it(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "cut.jsonl", [*small().lines, '{"type": "user", "mess'])
    with pytest.raises(TrajectoryError, match="invalid JSON Lines at line 4"):
        load(path)


def test_logs_without_a_model_call_say_so(tmp_path: Path) -> None:
    only_summary = write_lines(tmp_path / "summary.jsonl", [{"type": "summary", "summary": "x", "leafUuid": "u1"}] * 2)
    with pytest.raises(TrajectoryError, match="holds no conversation"):
        load(only_summary)
    log = Log()
    log.user("hello")
    with pytest.raises(TrajectoryError, match="no assistant replies"):
        load(log.write(tmp_path / "one.jsonl"))  # one line parses as an object, not a list


def test_gzip_log_error_names_the_file_line(tmp_path: Path) -> None:
    lines: list[Any] = small().lines
    lines[1]["message"]["content"] = 5
    path = tmp_path / "s.jsonl.gz"
    path.write_bytes(gzip.compress(("\n\n".join(json.dumps(x) for x in lines) + "\n").encode()))
    with pytest.raises(TrajectoryError, match="line 3: assistant content is int"):
        load(path)


def test_duplicate_uuids_keep_the_first_and_cycles_end(tmp_path: Path) -> None:
    log = small()
    copy = json.loads(json.dumps(log.lines[1]))
    copy["message"]["content"] = [text("re-emitted copy")]
    log.lines.append(copy)  # the same uuid again (compaction may re-emit lines)
    log.lines[0]["parentUuid"] = log.lines[2]["uuid"]  # and a cycle: task -> result -> reply -> task
    h = load(log.write(tmp_path / "s.jsonl"))
    assert "re-emitted copy" not in json.dumps(h.messages()) and len(h) == 1


# ---- invariant: every tool result lands after its call ------------------------------------------


@st.composite
def parallel_sessions(draw: st.DrawFn) -> Log:
    log = Log()
    p = log.user("task")
    for t in range(draw(st.integers(1, 5))):
        k = draw(st.integers(0, 3))
        blocks = [text(f"reply {t}")] + [call(f"t{t}_{j}", "Bash", command=f"echo {t} {j}") for j in range(k)]
        ids = log.reply(f"msg_{t}", blocks, parent=p, split=draw(st.booleans()))
        order = draw(st.permutations(range(k)))
        p = ids[-1]
        for j in order:  # results out of order, each off the line of its own call (or the last line)
            anchor = ids[min(j + 1, len(ids) - 1)] if draw(st.booleans()) else ids[-1]
            p = log.results((f"t{t}_{j}", f"out {t} {j}"), parent=anchor)
        if draw(st.booleans()):
            p = log.user(f"and then {t}", parent=p)
    return log


@settings(max_examples=60, deadline=None)
@given(parallel_sessions())
def test_every_tool_result_follows_its_call(log: Log) -> None:
    lines = log.lines
    replies = len({line["message"]["id"] for line in lines if line["type"] == "assistant"})
    calls = sum(1 for line in lines if line["type"] == "assistant" for b in line["message"]["content"] if b["type"] == "tool_use")
    messages, _ = session_messages(lines, "mem.jsonl", None)
    h = History.from_messages(messages)
    assert len(h) == replies
    seen = 0
    for s in h.steps:
        ids = calls_of(s.reply)
        tools = [o for o in s.observations if o["role"] == "tool"]
        assert sorted(o["tool_call_id"] for o in tools) == sorted(ids)
        assert s.observations[: len(tools)] == tuple(tools)  # results first, as the API wants them
        seen += len(ids)
    assert seen == calls


def test_project_folder_replays_sessions_and_subagent_logs(tmp_path: Path) -> None:
    """A folder of Claude Code logs: each session file and each subagents/agent-*.jsonl is read;
    the subagents' ``.meta.json`` notes are not trajectories."""
    main = session(tmp_path / "s1.jsonl")
    sub = tmp_path / "s1" / "subagents"
    sub.mkdir(parents=True)
    agent = small().write(sub / "agent-a1.jsonl")
    (sub / "agent-a1.meta.json").write_text('{"agentType": "general-purpose"}', encoding="utf-8")
    assert collect_paths([tmp_path]) == sorted([str(main), str(agent)])


def test_compaction_with_no_call_after_it_leaves_one_session(tmp_path: Path) -> None:
    """Newer logs: attachment lines in the chain, a boundary whose summary has no reply after it."""
    log = small()
    log.other("attachment", True, attachment={"type": "task_reminder", "content": []})
    log.reply("msg_2", [text("Done.")])
    boundary = log.other("system", None, subtype="compact_boundary", logicalParentUuid=log.last,
                         compactMetadata={"trigger": "manual", "preservedMessages": {"uuids": [log.last]}})  # fmt: skip
    log.user("This session is being continued from a previous conversation.", parent=boundary, isCompactSummary=True)
    log.user("<local-command-stdout>Compacted</local-command-stdout>")
    path = log.write(tmp_path / "s.jsonl")
    assert agent_names(read_json(path)) == []
    assert [s.reply["content"] for s in load(path).steps] == ["", "Done."]


def test_glob_and_grep_file_lists_are_summarized_as_paths_not_hits() -> None:
    grep = json.dumps({"pattern": "route", "path": "/w"})
    assert summarize(grep, "Found 2 files\n/w/a.py\n/w/b.py", "Grep").text == "2 files match (/w/a.py, /w/b.py)"
    nine = "\n".join(f"/w/m{k}.py" for k in range(9))
    assert summarize(json.dumps({"pattern": "**/*.py"}), nine, "Glob").text == f"9 paths found ({nine.replace(chr(10), ', ')})"
    assert summarize(json.dumps({"pattern": "*.rs"}), "No files found", "Glob").text == "0 paths found"
    content = json.dumps({"pattern": "route", "output_mode": "content", "-n": True})
    assert summarize(content, "/w/a.py:3:route()\n/w/a.py:9:route()", "Grep").text == "2 hits in 1 file (/w/a.py)"


def test_a_subagents_report_is_summarized_by_its_subject_files_and_conclusion() -> None:
    report = (
        "Perfect! Now I have all the information I need. Let me provide a comprehensive report:\n\n"
        "## Hook controllers\n\n- `lib/web/hooks_controller.ex` handles `POST /api/hooks`\n"
        "- `lib/web/session_controller.ex` starts sessions\n\n---\n\n"
        "**The registry is ETS-based and never crashes.**agentId: a93ccab (for resuming to continue this agent's work if needed)\n"
        "<usage>total_tokens: 49100\ntool_uses: 25\nduration_ms: 57709</usage>"
    )
    s = summarize(json.dumps({"description": "Explore", "prompt": "look"}), report, "Task")
    assert s.kind == "report"
    assert s.text == (
        'report: "Hook controllers" (lib/web/hooks_controller.ex, +1 more); '
        'ends "The registry is ETS-based and never crashes."'
    )
    assert summarize("{}", "Only one line of answer.", "Agent").text == 'report: "Only one line of answer."'


def test_a_background_tasks_output_is_read_inside_its_wrapper() -> None:
    done = (
        "<retrieval_status>success</retrieval_status>\n\n<task_id>b1</task_id>\n\n<status>completed</status>\n\n"
        "<exit_code>1</exit_code>\n\n<output>\nCompiling 3 files\nerror: undefined function foo/0\n</output>"
    )
    s = summarize(json.dumps({"task_id": "b1"}), done, "TaskOutput")
    assert s.status == 1 and s.text == "error: error: undefined function foo/0"
    running = done.replace("completed", "running").replace("<exit_code>1</exit_code>", "")
    s = summarize(json.dumps({"task_id": "b1"}), running, "TaskOutput")
    assert s.status is None and s.text.startswith("background task running; ")


def test_inline_subagents_are_named_by_their_agent_id(tmp_path: Path) -> None:
    log = small()
    log.sidechain = True
    for agent in ("a1b2c3", "d4e5f6"):
        sub = log.user("sub task", parent=None, agentId=agent)
        log.reply(f"msg_{agent}", [text("ok")], parent=sub)
    names = agent_names(read_json(log.write(tmp_path / "s.jsonl")))
    assert names == ["main", "agent-a1b2c3", "agent-d4e5f6"]
    assert load(f"{tmp_path / 's.jsonl'}#agent-d4e5f6").step(1).reply["content"] == "ok"



_JUNK = st.one_of(st.none(), st.booleans(), st.integers(-2, 3), st.text(max_size=3), st.builds(list), st.builds(dict),
                  st.sampled_from(["u0001-m", "u0002-m", "t1", "msg_1", "assistant", "user"]))  # fmt: skip
_PATHS = [("parentUuid",), ("uuid",), ("isSidechain",), ("type",), ("message",), ("message", "content"),
          ("message", "content", 0), ("message", "content", 0, "id"), ("message", "content", 0, "tool_use_id"),
          ("message", "content", 0, "content"), ("message", "content", 0, "input"), ("message", "id"),
          ("message", "usage"), ("message", "model"), ("isCompactSummary",)]  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.sampled_from(_PATHS), _JUNK), max_size=3), st.booleans())
def test_any_mangled_log_loads_or_is_one_trajectory_error(
    tmp_path_factory: pytest.TempPathFactory, edits: list[tuple[int, tuple[Any, ...], Any]], twice: bool
) -> None:
    log = small()
    if twice:  # a second reply, then a sidechain: more lines to mangle
        log.reply("msg_2", [text("done")])
    lines: list[Any] = log.lines
    for at, path, value in edits:
        target: Any = lines[at % len(lines)]
        for n, key in enumerate(path):
            if isinstance(target, list) and isinstance(key, int) and key < len(target) or isinstance(target, dict) and isinstance(key, str):
                if n == len(path) - 1:
                    target[key] = value
                target = target[key] if isinstance(target, list) or key in target else None
            else:
                break
    path_ = write_lines(tmp_path_factory.mktemp("fuzz") / "s.jsonl", [json.dumps(x) for x in lines])
    try:
        histories = load_all(path_)
    except TrajectoryError as e:
        assert "\n" not in str(e) and str(e).startswith(str(path_))
    else:
        assert histories and all(len(h) >= 1 for h in histories)


@pytest.mark.parametrize("key", ["parentUuid", "uuid"])
def test_a_compaction_with_an_object_for_an_id_loads_or_is_one_trajectory_error(tmp_path: Path, key: str) -> None:
    # found by mutating the shipped log: an id that is a JSON object was used as a dict key (TypeError)
    log = small()
    boundary = log.other("system", None, subtype="compact_boundary", logicalParentUuid=log.last)
    summary = log.user("Summary: listed.", parent=boundary, isCompactSummary=True)
    log.reply("msg_2", [text("ok")], parent=summary)
    line = next(x for x in log.lines if x.get("isCompactSummary") is True) if key == "parentUuid" else log.lines[-3]
    line[key] = {"not": "an id"}
    path = log.write(tmp_path / "s.jsonl")
    try:
        histories = load_all(path)
    except TrajectoryError as e:
        assert "\n" not in str(e) and str(e).startswith(str(path))
    else:
        assert histories


def test_a_truncated_glob_or_limited_grep_is_not_counted_as_its_notice_or_its_shown_lines() -> None:
    # Glob ends a cut list with a notice in parentheses: no path, and more exist than are listed
    notice = "(Results are truncated. Consider using a more specific path or pattern.)"
    s = summarize(json.dumps({"pattern": "**/*.py"}), f"/w/a.py\n/w/b.py\n{notice}", "Glob")
    assert "Results are truncated" not in s.text and not s.text.startswith("2 paths")
    assert s.text == "more than 2 paths found (/w/a.py, /w/b.py, list cut)"
    # Grep's header counts every file; the list under it may be limited (head_limit)
    grep = json.dumps({"pattern": "route", "head_limit": 2})
    assert summarize(grep, "Found 5 files\n/w/a.py\n/w/b.py", "Grep").text == "5 files match (/w/a.py, /w/b.py, +3 more)"


def test_a_tie_between_models_is_the_first_used_whatever_the_hash_seed(tmp_path: Path) -> None:
    # was max(set(models), key=models.count): a tie went by set order, which string hashing
    # randomizes per process (so --price auto and the prefix fit could differ run to run)
    import subprocess
    import sys

    log = Log()
    ids = log.reply("msg_1", [call("t1", "Bash", command="ls")], parent=log.user("go"), model="claude-opus-4-5-20251101")
    log.results(("t1", "a.py"), parent=ids[-1])
    log.reply("msg_2", [text("done")], model="claude-haiku-4-5-20251001")
    path = log.write(tmp_path / "s.jsonl")
    code = f"from refold.loaders import load; m = load({str(path)!r}).meta; print(m['model'], list(m['models']))"
    src = str(Path(__file__).parents[1] / "src")
    seen = {
        subprocess.run([sys.executable, "-c", code], env={"PYTHONPATH": src, "PYTHONHASHSEED": str(seed)},
                       capture_output=True, text=True, check=True).stdout.strip()
        for seed in range(8)
    }  # fmt: skip
    assert seen == {"claude-opus-4-5-20251101 ['claude-opus-4-5-20251101', 'claude-haiku-4-5-20251001']"}


def test_recorded_usage_compares_the_calls_the_provider_counts_with_the_same_calls_of_base(tmp_path: Path) -> None:
    # the compaction's summarization call (unreplied) was in base's prompt tokens but not in the
    # provider's sum of the stored calls: base looked a whole prompt larger than the record
    from refold.lab.replay.report import recorded_usage

    path = Path(__file__).parent / "data" / "claude_code_session.jsonl"
    settings = Settings(policies=("base",), tokenizer="chars4")
    results = [r for r in replay_sessions(str(path), settings) if r.error is None]
    main = next(r for r in results if r.file.endswith("#main"))
    base = main.policies["base"]
    assert base["unreplied_calls"] == 1 and base["unreplied_prompt_tokens"] > 0
    prefix = int(main.prefix["tokens_per_call"]) if main.prefix else 0
    stored = [r for r in results if isinstance(r.reported.get("prompt_tokens"), int)]
    rec = recorded_usage(stored)
    assert rec is not None
    assert rec["base_prompt_tokens"] == sum(
        r.policies["base"]["prompt_tokens"] - r.policies["base"]["unreplied_prompt_tokens"] for r in stored
    )
    assert rec["base_unrecorded_prefix_tokens_estimated"] == sum(
        r.policies["base"]["unrecorded_prefix_tokens"] - int((r.prefix or {}).get("tokens_per_call", 0)) * r.policies["base"]["unreplied_calls"]
        for r in stored
    )
    # per stored call the prefix is counted once: the unreplied call's share is left out
    assert prefix and main.policies["base"]["unrecorded_prefix_tokens"] == prefix * base["calls"]

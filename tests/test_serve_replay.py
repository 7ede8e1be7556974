"""``refold replay`` of a Claude Code log / Codex rollout renders what ``refold serve`` sends: the
harness's requests, rebuilt from the log's lines, go through the proxy app; what the upstream
receives at each call equals replay's ``default`` prompt (benchmarks/serve_replay.py)."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest

from claude_code_log import Log, call, session, text
from codex_rollouts import PATCH, Lines, fix_bug, unified_exec

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import serve_replay as sr  # noqa: E402


@pytest.fixture(autouse=True)
def _quiet() -> None:
    logging.getLogger("uvicorn.error").setLevel(logging.CRITICAL)


def _check(path: Path, tmp_path: Path) -> dict[str, sr.Result]:
    return {src.partition("#")[2]: sr.compare(src, calls, str(tmp_path / f"{n}.db")) for n, (src, calls) in enumerate(sr.sessions(path))}


def test_claude_code_session_is_served_as_replayed(tmp_path: Path) -> None:
    results = _check(session(tmp_path / "s.jsonl"), tmp_path)
    assert set(results) == {"main", "compact-1", "sidechain-1"}
    for name, res in results.items():  # compact-1: the summary and the next ask are one API turn
        assert res.compared and res.equal == res.compared, (name, res.first)
    assert results["main"].compared == 5  # main: parallel results written out of call order, sent so


def test_user_messages_thinking_and_meta_lines_are_served_as_replayed(tmp_path: Path) -> None:
    """Late in a session whose old outputs are hidden: a meta reminder and a line typed mid-turn
    (Claude Code sends them as one user turn, each carried the step label once), a reply whose
    text is two blocks (read back to back), thinking blocks."""
    log = Log()
    r = log.user("Fix the bug in app.py.")
    for k in range(1, 13):
        blocks = [{"type": "thinking", "thinking": f"Step {k}.", "signature": "c2ln"}]
        if k == 9:
            blocks += [text("\n\n"), text("Reading the next part.")]
        a = log.reply(f"msg_{k}", [*blocks, call(f"toolu_{k}", "Bash", command=f"cat part{k}.txt", description="Read")], parent=r)
        r = log.results((f"toolu_{k}", "\n".join(f"part {k} row {i} " + "x" * 40 for i in range(300))), parent=a[-1])
        if k == 10:
            r = log.user("<system-reminder>The file app.py was modified.</system-reminder>", parent=r, isMeta=True)
            r = log.user("Also keep the old name as an alias.", parent=r)
    log.reply("msg_13", [text("Done.")], parent=r)
    res = _check(log.write(tmp_path / "u.jsonl"), tmp_path)[""]
    assert res.compared == 13 and res.equal == res.compared, res.first


def test_codex_rollout_is_served_as_replayed(tmp_path: Path) -> None:
    (tmp_path / "r.jsonl").write_text(fix_bug().text(), encoding="utf-8")
    res = _check(tmp_path / "r.jsonl", tmp_path)[""]
    assert res.compared == 7 and res.equal == 7, res.first


def test_codex_unified_exec_and_patches_are_served_as_replayed(tmp_path: Path) -> None:
    r = Lines().meta().turn()
    r.user("<environment_context>\n  <cwd>/work/demo</cwd>\n</environment_context>")
    r.user("Run the slow tests, then fix app.py.")
    r.exec("c1", "pytest -q tests/slow").usage(5000, 0, 20, 0)
    r.output("c1", unified_exec(None, session=7))
    r.poll("c2", 7).usage(5100, 5000, 10, 0)
    r.output("c2", unified_exec("\n".join(f"test {i} ok" for i in range(300))))
    r.user("Please also keep a changelog line.")
    r.say("Patching.").patch("c3", PATCH).usage(6000, 5100, 50, 0)
    r.output("c3", "Success. Updated the following files:\nM src/app.py\n", kind="custom_tool_call_output")
    for k in range(4, 9):
        r.shell(f"c{k}", ["bash", "-lc", f"cat notes{k}.md"]).usage(6000 + k, 6000, 10, 0)
        r.output(f"c{k}", "\n".join(f"note {k}.{i}" for i in range(150)))
    r.say("Done.").usage(9000, 8000, 5, 0)
    (tmp_path / "x.jsonl").write_text(r.text(), encoding="utf-8")
    res = _check(tmp_path / "x.jsonl", tmp_path)[""]
    assert res.compared == 9 and res.equal == 9, res.first


def test_an_idle_gap_is_read_alike(tmp_path: Path) -> None:
    """An hour between two calls (the cache went cold): the proxy stamps steps with the
    time of the call (here the recorded one), replay reads the log's; both move the boundary alike."""
    log = Log()
    r = log.user("Summarize the parts.")
    for k in range(1, 15):
        a = log.reply(f"msg_{k}", [call(f"toolu_{k}", "Bash", command=f"cat part{k}.txt")], parent=r)
        r = log.results((f"toolu_{k}", "\n".join(f"part {k} row {i} " + "y" * 40 for i in range(300))), parent=a[-1])
        if k == 7:
            mark = len(log.lines)
    log.reply("msg_15", [text("Done.")], parent=r)
    for line in log.lines[mark:]:
        line["timestamp"] = line["timestamp"].replace("T10:", "T11:")  # an hour later
    res = _check(log.write(tmp_path / "idle.jsonl"), tmp_path)[""]
    assert res.compared == 15 and res.equal == res.compared, res.first


def _compacted_keeping_answers() -> Lines:
    """Codex 0.104's remote compaction (the shape of a real rollout): its replacement_history keeps
    the user's messages with the final answers between them, the context, then the encrypted
    summary; the calls after it are numerous enough for old outputs to be hidden."""
    r = Lines().meta().turn().user("<environment_context><cwd>/w</cwd></environment_context>")
    kept: list[dict[str, object]] = []
    for k in range(1, 4):
        ask, answer = f"Task {k}: tidy part{k}.txt.", f"Tidied part{k}.txt."
        r.user(ask).exec(f"a{k}", f"cat part{k}.txt").usage(1000 * k, 0, 10, 0).output(f"a{k}", f"row {k}\n" * 50)
        r.say(answer).usage(1000 * k + 500, 0, 5, 0)
        kept += [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": ask}]},
                 {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": answer}], "phase": "final_answer"}]  # fmt: skip
    kept += [{"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "<permissions>on-request</permissions>"}]},
             {"type": "compaction", "encrypted_content": "gAAAAB-summary"}]  # fmt: skip
    r.add("compacted", {"message": "", "replacement_history": kept}).turn()
    r.user("<environment_context><cwd>/w</cwd></environment_context>").user("Task 4: read every part again.")
    for k in range(1, 13):
        r.exec(f"b{k}", f"cat part{k}.txt").usage(9000 + 100 * k, 9000, 10, 0)
        r.output(f"b{k}", "\n".join(f"part {k} row {i} " + "z" * 40 for i in range(200)))
    return r.say("Read them all.").usage(20000, 19000, 5, 0)


def test_a_codex_compaction_that_kept_answers_is_served_as_replayed(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    path.write_text(_compacted_keeping_answers().text(), encoding="utf-8")
    results = _check(path, tmp_path)
    assert set(results) == {"part1", "part2"}
    for name, res in results.items():  # part2: the kept answers are prompt messages on both sides, not steps
        assert res.compared and res.equal == res.compared, (name, res.first)
    assert results["part2"].compared == 13


def test_the_kept_history_reaches_the_upstream_as_codex_sent_it(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    path.write_text(_compacted_keeping_answers().text(), encoding="utf-8")
    _, calls = sr.sessions(path)[1]
    received, errors = sr.through_proxy(calls, str(tmp_path / "p.db"))
    assert not errors
    for body, sent in zip(received, calls.bodies, strict=True):
        kept = sent["input"][: next(i for i, item in enumerate(sent["input"]) if item.get("type") == "compaction") + 1]
        assert body["input"][: len(kept)] == kept  # the answers with their fields, the summary where it stood


def test_a_codex_rollback_is_served_as_replayed(tmp_path: Path) -> None:
    """Codex drops the last turns and the next request lacks them: the proxy forks its session
    where they began, the loader cuts them from later prompts; calls made in them are compared with
    nothing (they are no step of the context replay renders)."""
    r = Lines().meta().turn().user("<environment_context><cwd>/w</cwd></environment_context>").user("Read the parts.")
    for k in range(1, 9):
        r.exec(f"a{k}", f"cat part{k}.txt").usage(5000 + k, 5000, 10, 0)
        r.output(f"a{k}", "\n".join(f"part {k} row {i} " + "q" * 40 for i in range(200)))
    r.say("Read.").usage(9000, 8000, 5, 0).turn()
    r.user("<permissions instructions>on-request</permissions instructions>", role="developer").user("Now delete them.")
    r.exec("d1", "rm part*.txt").usage(9500, 9000, 10, 0).output("d1", "").say("Deleted.").usage(9600, 9500, 5, 0)
    r.add("event_msg", {"type": "thread_rolled_back", "num_turns": 1}).turn().user("Summarize them instead.")
    for k in range(9, 13):
        r.exec(f"b{k}", f"wc -l part{k}.txt").usage(9000 + k, 9000, 10, 0).output(f"b{k}", f"{k} part{k}.txt")
    r.say("Summary.").usage(9900, 9800, 5, 0)
    path = tmp_path / "rb.jsonl"
    path.write_text(r.text(), encoding="utf-8")
    (src, calls), = sr.sessions(path)
    assert len(calls.bodies) == 16 and calls.dropped == {9, 10}
    res = sr.compare(src, calls, str(tmp_path / "rb.db"))
    assert res.compared == 14 and res.equal == 14, (res.skipped, res.first)

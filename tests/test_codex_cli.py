"""A Codex rollout replayed as a user would (``refold replay/view/simulate rollout.jsonl``), and
the prompts refold renders from it: masking notes read Codex's output framing (exit status, the
printed lines) and outline a shell read at its file's line numbers."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from codex_rollouts import APP, FIXTURE, Lines, freeform, structured
from refold.lab.replay.runner import iter_prompts
from refold.loaders import load

from conftest import run_cli

NOTE = "[context-manager] Output"


def test_replay_reports_the_recorded_usage_next_to_the_replayed_prompts(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    r = run_cli("replay", str(FIXTURE), "--policy", "base,default", "--tokenizer", "chars4", "--json", str(out))
    assert r.returncode == 0, r.stderr
    (result,) = json.loads(out.read_text())["tasks"]
    assert result["format"] == "codex" and result["calls"] == 7
    assert result["reported"] == {"prompt_tokens": 43500, "cached_tokens": 36096, "completion_tokens": 395}
    assert result["policies"]["base"]["reasoning_tokens"] == 160
    assert result["cache_validation"]["reported_cached_fraction"] == round(36096 / 43500, 6)


def test_view_and_simulate_read_a_rollout(tmp_path: Path) -> None:
    run = tmp_path / FIXTURE.name
    shutil.copy(FIXTURE, run)
    r = run_cli("view", str(run), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "rollout-fix-bug.html").read_text(encoding="utf-8").lower().startswith("<!doctype html>")
    out = tmp_path / "s.json"
    r = run_cli("simulate", str(run), "--sessions", "2", "--policy", "base", "--json", str(out))
    assert r.returncode == 0, r.stderr
    report = json.loads(out.read_text())
    assert report["format"] == "refold-serversim-1", report.keys()


def test_each_compacted_context_is_replayed_as_its_own_session(tmp_path: Path) -> None:
    r = Lines().meta().turn().user("Fix the bug.").shell("a", ["bash", "-lc", "cat a.py"]).usage(100, 0, 5, 0)
    r.output("a", structured("x = 1")).add("compacted", {"message": "Summary."}).turn().say("done").usage(50, 0, 5, 0)
    run = tmp_path / "rollout.jsonl"
    run.write_text(r.text(), encoding="utf-8")
    out = tmp_path / "r.json"
    res = run_cli("replay", str(run), "--policy", "base", "--tokenizer", "chars4", "--json", str(out))
    assert res.returncode == 0, res.stderr
    tasks = json.loads(out.read_text())["tasks"]
    assert [t["file"] for t in tasks] == [f"{run}#part1", f"{run}#part2"]
    bad = run_cli("view", str(run), cwd=tmp_path)
    assert bad.returncode == 2 and "#part1" in bad.stderr and "Traceback" not in bad.stderr


def test_a_broken_line_is_one_line_on_stderr(tmp_path: Path) -> None:
    run = tmp_path / "rollout.jsonl"
    run.write_text(Lines().meta().turn().text() + "[1]\n", encoding="utf-8")
    r = run_cli("view", str(run), cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip() == f"refold view: {run}: line 3: is list, not a JSON object (a Codex rollout line)" or (
        len(r.stderr.strip().splitlines()) == 1 and "line 3: is list" in r.stderr
    )


def last_prompt_outputs(path: Path) -> dict[str, str]:
    prompts = list(iter_prompts(load(path), "refold-best", tokenizer="chars4", mask_after=1))
    return {str(m["tool_call_id"]): str(m["content"]) for m in prompts[-1].messages if m.get("role") == "tool"}


def test_masking_notes_read_codex_outputs() -> None:
    shown = last_prompt_outputs(FIXTURE)
    note = shown["call_2"]  # sed -n '1,27p': freeform header, 27 printed lines
    assert NOTE in note and "`sed -n '1,27p' src/app.py`" in note and "(exit 0; 27 lines)" in note
    assert "class Totals L12" in note and "def main L23" in note and "`restore 2`" in note
    assert "(exit 0; 27 lines)" in shown["call_3"]  # cat, through exec_command's header


def test_a_json_framed_read_is_outlined_at_its_line_numbers(tmp_path: Path) -> None:
    extra = [f"\n\ndef helper_{k}(values, scale={k}):\n    return [v * scale for v in values]" for k in range(8)]
    lines = (APP + "".join(extra)).split("\n")  # helper_0 opens line 29
    span = "\n".join(lines[11:])
    r = Lines().meta().turn().user("Look.")
    r.shell("s", ["bash", "-lc", f"sed -n '12,{len(lines)}p' src/app.py"]).usage(100, 0, 5, 0).output("s", structured(span))
    r.shell("g", ["bash", "-lc", "rg -n 'def ' src"]).usage(150, 100, 5, 0).output("g", freeform("src/app.py:4:def parse(argv):", 0))
    r.shell("t", ["bash", "-lc", "python -m pytest -q"]).usage(200, 150, 5, 0).output("t", freeform("1 failed in 0.1s", 1))
    for k in range(4):  # later calls move the boundary past the read
        r.shell(f"l{k}", ["bash", "-lc", f"ls src/{k}"]).usage(250 + k, 200, 5, 0).output(f"l{k}", freeform(f"file{k}.py"))
    r.say("done").usage(300, 250, 5, 0)
    run = tmp_path / "rollout.jsonl"
    run.write_text(r.text(), encoding="utf-8")
    shown = last_prompt_outputs(run)
    assert f"(exit 0; {len(lines) - 11} lines)" in shown["s"], shown["s"]
    assert "class Totals L12" in shown["s"] and "def main L23" in shown["s"] and "def helper_0 L29" in shown["s"]
    assert "exit 1" in shown["t"] or shown["t"].endswith("1 failed in 0.1s")


def test_a_rollout_without_its_session_meta_line_is_read_and_said_partial(tmp_path: Path) -> None:
    run = tmp_path / "rollout-cut.jsonl"
    lines = FIXTURE.read_text(encoding="utf-8").splitlines(keepends=True)
    assert json.loads(lines[0])["type"] == "session_meta"
    run.write_text("".join(lines[1:]), encoding="utf-8")  # the head is gone: no system prompt to read
    h = load(str(run))
    assert h.meta["partial"] and "'turn_context' line, not the 'session_meta'" in h.meta["partial"][0]
    assert not any(m.get("role") == "system" for m in h.prefix)
    assert "partial" not in load(str(FIXTURE)).meta
    out = tmp_path / "r.json"
    r = run_cli("replay", str(run), "--policy", "base", "--tokenizer", "chars4", "--json", str(out))
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    said = "".join(r.stdout.split())  # the terminal width wraps a long path anywhere
    assert f"Partialfile:{run}:line1isa'turn_context'line" in said and "withoutitssystemprompt" in said
    report = json.loads(out.read_text())
    assert report["tasks"][0]["partial"] == h.meta["partial"] and any(n.startswith("Partial file") for n in report["notes"])
    whole = run_cli("replay", str(FIXTURE), "--policy", "base", "--tokenizer", "chars4")
    assert whole.returncode == 0 and "Partial file" not in whole.stdout
    r = run_cli("view", str(run), "-o", str(tmp_path / "v.html"))
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert "Partial file: line 1 is a" in (tmp_path / "v.html").read_text(encoding="utf-8")
    sim = tmp_path / "s.json"
    r = run_cli("simulate", str(run), "--sessions", "1", "--policy", "base", "--json", str(sim))
    assert r.returncode == 0 and "Partial file:" in r.stdout, r.stderr
    assert json.loads(sim.read_text())["partial"] == {str(run): h.meta["partial"]}

"""Replay lab: peer models, hindsight STALE, metrics, report schema, CLI exit codes, determinism."""

from __future__ import annotations

import csv
import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from refold.chat_tokens import count_messages
from refold.history import History
from refold.lab.replay import (
    FORMAT,
    POLICIES,
    Options,
    Settings,
    build_report,
    hindsight_marks,
    iter_prompts,
    make_projector,
    replay_paths,
    with_stale,
)
from refold.lab.replay.report import SIMULATED_COLUMNS
from refold.loaders import load
from refold.tokens import get_tokenizer
from refold.types import Shown

from builders import reply, text_history
from conftest import DATA, CliResult, run_cli

MINI = DATA / "mswea-gemini3pro__django__django-16255.traj.json"
SWEA = DATA / "sweagent__pydicom__pydicom-1458.traj.gz"
SWE_SMALL = DATA / "sweagent__6e44b9__sweagenttestrepo-1c2844.traj.gz"
TOK = get_tokenizer("chars4")


def _opts(**kw: Any) -> Options:
    return Options(tokenizer=TOK, **kw)


def _history(n: int, out_chars: int = 800) -> History:
    steps = []
    for i in range(1, n + 1):
        body = "\n".join(f"line {i}.{j} of output " + "x" * 20 for j in range(out_chars // 40))
        steps.append((reply(None, None, f"cat file_{i}.py"), body))
    return text_history(steps)


# ---- policies ---------------------------------------------------------------------------------


def test_base_is_the_recorded_prompt() -> None:
    h = load(MINI)
    prompts = list(iter_prompts(h, "base"))
    assert len(prompts) == len(h)
    full = [{k: m[k] for k in ("role", "content") if k in m} for m in h.messages()]
    last = prompts[-1]
    assert [m["content"] for m in last.messages] == [m["content"] for m in full[: len(last.messages)]]
    assert all(o.shown in (Shown.PREFIX, Shown.RECEIVED) for o in last.origins)


@pytest.mark.parametrize("polling", [1, 3])
def test_masking_matches_swe_agent_last_n_observations(polling: int) -> None:
    h = _history(12)
    proj = make_projector("masking" if polling == 1 else "masking-polling", _opts(polling=polling))
    for p in proj.prompts(h):
        outputs = [m for m, o in zip(p.messages, p.origins, strict=True) if o.part == "output"]
        elided = [m for m in outputs if m["content"].startswith("Old environment output: (")]
        # SWE-agent: observations = task + outputs; last_removed = (count // polling) * polling - n
        count = 1 + p.t
        expected = max(0, max(0, (count // polling) * polling - 5) - 1)
        assert len(elided) == expected
        assert all(not m["content"].startswith("Old") for m in outputs[len(elided) :])
        if polling == 1 and p.t > 5:
            assert len(outputs) - len(elided) == 5


@pytest.mark.parametrize("name", ["masking", "clear-tool-uses"])
def test_a_note_is_the_same_object_at_every_later_call(name: str) -> None:
    """Masked/cleared outputs are shown by one note object each, so a later prompt shares its
    leading messages by identity with the last one (what PromptTokens and the viewer skip)."""
    seen: dict[int, dict[str, Any]] = {}
    calls = 0
    for p in make_projector(name, _opts(clear_trigger=1_000)).prompts(_history(12)):
        for m, o in zip(p.messages, p.origins, strict=True):
            if o.shown is Shown.NOTE:
                assert seen.setdefault(o.step or 0, m) is m
                calls += 1
    assert calls > len(seen) > 3  # notes repeated over several calls


def test_clear_tool_uses_keeps_last_three_once_over_trigger() -> None:
    h = _history(10)
    prompts = list(make_projector("clear-tool-uses", _opts(clear_trigger=1_000)).prompts(h))
    base = list(make_projector("base", _opts()).prompts(h))
    for p, b in zip(prompts, base, strict=True):
        outs = [m["content"] for m, o in zip(p.messages, p.origins, strict=True) if o.part == "output"]
        if count_messages(b.messages, TOK) > 1_000:
            assert outs[:-3] == ["[cleared]"] * (len(outs) - 3)
            assert "[cleared]" not in outs[-3:]
        else:
            assert "[cleared]" not in outs
    # clear_at_least stops once enough was reclaimed (oldest first)
    last = list(make_projector("clear-tool-uses", _opts(clear_trigger=1_000, clear_at_least=150)).prompts(h))[
        -1
    ]
    outs = [m["content"] for m, o in zip(last.messages, last.origins, strict=True) if o.part == "output"]
    assert outs[0] == "[cleared]" and outs.count("[cleared]") < len(outs) - 3


def test_compact_summarizes_over_threshold_and_counts_compactions() -> None:
    h = _history(30, out_chars=2_000)
    prompts = list(make_projector("compact", _opts(budget=4_000)).prompts(h))
    events = [p for p in prompts if p.compaction is not None]
    assert events, "a 30-step history of 500-token outputs must pass 75% of 4k"
    for p in prompts:
        n = count_messages(p.messages, TOK)
        if p.compaction is None and p.lost_upto == 0:
            continue
        assert any("SIMULATED compaction" in str(m["content"]) for m in p.messages)
    first = events[0]
    assert first.compaction is not None and first.compaction.covers[0] == 1
    assert count_messages(first.messages, TOK) < 0.75 * 4_000
    # every step before the compaction point is gone from the prompt
    assert all((o.step or 0) > first.t or o.step is None for o in first.origins if o.part != "note")
    del n


def test_compact_plus_refold_compacts_no_more_often_than_compact() -> None:
    h = with_stale(_history(30, out_chars=2_000), "hindsight-aggressive")
    c = sum(p.compaction is not None for p in make_projector("compact", _opts(budget=12_000)).prompts(h))
    cr = sum(
        p.compaction is not None for p in make_projector("compact+refold", _opts(budget=12_000)).prompts(h)
    )
    assert c >= 1 and cr < c


# ---- hindsight STALE ------------------------------------------------------------------------------


def test_hindsight_marks_stay_inside_the_window_and_after_last_use() -> None:
    h = load(MINI)
    for variant in ("conservative", "aggressive"):
        marks = hindsight_marks(h, 3, variant)
        for m, stale in marks.items():
            assert all(m - 3 <= i < m for i in stale)
    aggressive = sum(len(v) for v in hindsight_marks(h, 3, "aggressive").values())
    conservative = sum(len(v) for v in hindsight_marks(h, 3, "conservative").values())
    assert aggressive >= conservative


def test_hindsight_does_not_mark_a_step_that_is_used_later() -> None:
    steps = [
        (reply(None, None, "grep -rn helper src"), "src/util.py:10: def special_helper_fn(x):"),
        (reply(None, None, "ls"), "a b c"),
        (reply(None, None, "echo hi", thought="Now edit special_helper_fn."), "hi"),
        (reply(None, None, "echo done"), "done"),
        (reply(None, None, "echo end"), "end"),
    ]
    h = text_history(steps)
    marks = hindsight_marks(h, 3, "aggressive")
    marked = {i for v in marks.values() for i in v}
    assert 1 in marked  # used at step 3, so marked at step 4 (inside its window)
    assert 1 not in marks.get(2, ()) and 1 not in marks.get(3, ())
    assert 2 in marks.get(3, ())  # 'ls' is never used again: marked in the next reply


def test_with_stale_builds_a_new_history_with_head_lines() -> None:
    h = load(MINI)
    marked = with_stale(h, "hindsight-aggressive")
    assert len(marked) == len(h) and all(s.has_protocol for s in marked.steps)
    assert not any(s.has_protocol for s in h.steps)  # the original is unchanged
    assert [s.observations for s in marked.steps] == [s.observations for s in h.steps]
    assert sum(len(s.stale) for s in marked.steps) > 0
    none = with_stale(marked, "none")
    assert not any(s.stale for s in none.steps)
    with pytest.raises(ValueError):
        with_stale(h, "psychic")


# ---- metrics and report -----------------------------------------------------------------------------


def _json_schema_check(report: dict[str, Any]) -> None:
    assert report["format"] == FORMAT
    assert isinstance(report["tokenizer"], str) and isinstance(report["cache"], str)
    keys = {
        "prompt_tokens": int,
        "cached_tokens": int,
        "recomputed_tokens": int,
        "peak_prompt_tokens": int,
        "cost_usd": float,
        "render_ms_median": float,
        "render_ms_p99": float,
        "removed_tokens_restorable": int,
        "removed_tokens_lost": int,
    }
    for task in report["tasks"]:
        if "error" in task:
            continue
        assert isinstance(task["file"], str) and isinstance(task["calls"], int)
        for m in task["policies"].values():
            for k, typ in keys.items():
                assert isinstance(m[k], typ), (k, m[k])
            assert m["prompt_tokens"] == m["cached_tokens"] + m["recomputed_tokens"]
        assert set(task["reported"]) == {"prompt_tokens", "cached_tokens", "completion_tokens"}


def _strip_timing(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _strip_timing(v) for k, v in obj.items() if "render_ms" not in k and k != "seconds"}
    if isinstance(obj, list):
        return [_strip_timing(v) for v in obj]
    return obj


def test_replay_all_policies_schema_and_determinism(tmp_path: Path) -> None:
    files = [str(MINI), str(SWEA)]
    s = Settings(tokenizer="chars4", stale="hindsight")
    r1 = build_report(replay_paths(files, s), s)
    r2 = build_report(replay_paths(files, s, jobs=2), s)
    _json_schema_check(r1)
    json.dumps(r1)
    assert _strip_timing(r1) == _strip_timing(r2)
    mini = r1["tasks"][0]
    assert set(mini["policies"]) == set(POLICIES)
    assert mini["reported"]["prompt_tokens"] > 0  # the mini run stores provider usage
    assert r1["tasks"][1]["reported"] == {"prompt_tokens": None, "cached_tokens": None, "completion_tokens": None}
    assert mini["cache_validation"]["profiles"]["openai"]["mae_per_call"] >= 0
    base, masking = mini["policies"]["base"], mini["policies"]["masking"]
    assert base["removed_tokens_restorable"] == base["removed_tokens_lost"] == 0
    assert masking["prompt_tokens"] < base["prompt_tokens"] and masking["removed_tokens_lost"] > 0
    assert mini["policies"]["refold-best"]["removed_tokens_lost"] == 0


def test_removed_tokens_split_refold_restorable() -> None:
    h = with_stale(load(MINI), "hindsight-aggressive")
    s = Settings(policies=("base", "refold"), tokenizer="chars4", stale="hindsight-aggressive")
    (res,) = replay_paths([str(MINI)], s)
    refold = res.policies["refold"]
    assert refold["removed_tokens_restorable"] > 0 and refold["removed_tokens_lost"] == 0
    assert refold["prompt_tokens"] < res.policies["base"]["prompt_tokens"]
    del h


# ---- CLI ------------------------------------------------------------------------------------------------


# The real entry point (refold.cli.main: RefoldError -> one line, exit 2), in-process.
def _cli(args: list[str]) -> CliResult:
    return run_cli("replay", *args)


def test_cli_bad_file_is_reported_and_the_rest_goes_on(tmp_path: Path) -> None:
    bad = tmp_path / "broken.traj.json"
    bad.write_text('{"messages": [')
    trunc = tmp_path / "trunc.traj.gz"
    trunc.write_bytes(gzip.compress(b'{"messages": []}')[:10])
    out_json, out_csv = tmp_path / "r.json", tmp_path / "r.csv"
    res = _cli(
        [
            str(MINI),
            str(bad),
            str(trunc),
            "--policy",
            "base,refold",
            "--tokenizer",
            "chars4",
            "--json",
            str(out_json),
            "--csv",
            str(out_csv),
        ]
    )
    assert res.returncode == 1, res.stderr
    assert f"failed: {bad}: invalid JSON" in res.stderr and f"failed: {trunc}: " in res.stderr
    report = json.loads(out_json.read_text())
    _json_schema_check(report)
    assert [t.get("error") is None for t in report["tasks"]] == [True, False, False]
    assert {f["file"] for f in report["failed"]} == {str(bad), str(trunc)}
    rows = list(csv.DictReader(out_csv.open()))
    assert len(rows) == 2 + 2 and sum(bool(r["error"]) for r in rows) == 2
    assert {r["stale"] for r in rows} == {"recorded"}
    # the simulated columns say so in every row of figures (cost and cached tokens were bare numbers)
    assert {r["simulated"] for r in rows if not r["error"]} == {SIMULATED_COLUMNS}
    assert "cost_usd" in SIMULATED_COLUMNS and "cached_tokens" in SIMULATED_COLUMNS
    res = _cli([str(MINI), "--policy", "base,refold", "--tokenizer", "chars4", "--stale", "hindsight", "--csv", str(out_csv)])
    assert res.returncode == 0, res.stderr
    rows = list(csv.DictReader(out_csv.open()))
    assert {r["stale"] for r in rows} == {"hindsight (simulated)"}  # every row says so
    assert all(r["simulated"].endswith("every figure: STALE marks simulated") for r in rows)


def test_cli_all_ok_exits_zero_and_usage_errors_exit_two(tmp_path: Path) -> None:
    res = _cli([str(SWEA), "--policy", "base,masking", "--tokenizer", "chars4"])
    assert res.returncode == 0, res.stderr
    assert "masking" in res.stdout
    for bad_args in (["--policy", "nope"], ["--stale", "psychic"], ["--cache", "redis"], ["--jobs", "0"]):
        proc = _cli([str(SWEA), *bad_args])
        assert proc.returncode == 2, (bad_args, proc.stderr)
        assert proc.stderr.startswith("refold: error:") and "Traceback" not in proc.stderr
    proc = _cli([str(tmp_path / "missing")])
    assert proc.returncode == 2 and "missing" in proc.stderr


def test_base_vs_itself_is_exactly_zero() -> None:
    from refold.lab.replay.runner import replay_file

    settings = Settings(policies=("base", "clear-tool-uses"), tokenizer="chars4", validate=False)
    report = build_report([replay_file(str(SWE_SMALL), settings)], settings)
    for name in ("base", "clear-tool-uses"):
        e = report["summary"]["all"]["policies"][name]
        assert e["cost_vs_base"] == 0.0 and str(e["cost_vs_base"]) == "0.0", e["cost_vs_base"]


def test_report_records_mask_after() -> None:
    from refold.lab.replay import BEST_MASK_AFTER

    assert build_report([], Settings(tokenizer="chars4"))["mask_after"] == BEST_MASK_AFTER
    assert build_report([], Settings(tokenizer="chars4", mask_after=5))["mask_after"] == 5


@pytest.mark.parametrize(
    ("manager_task", "fault"),
    [
        # one agent had no reply: the file failed whole, named as the file alone
        ({"role": "user", "content": "plan the fix", "agent": "Manager"}, "trajectory has no assistant replies"),
        # one agent's message without a role failed every agent (checked before its agent was known)
        ({"content": "plan the fix", "agent": "Manager"}, "history[1] has no 'role'"),
    ],
)
def test_one_agent_that_cannot_be_read_is_named_and_the_others_still_replay(
    tmp_path: Path, manager_task: dict[str, str], fault: str
) -> None:
    history = [
        {"role": "system", "content": "sys", "agent": "Manager"},
        manager_task,
        {"role": "system", "content": "sys", "agent": "Programmer"},
        {"role": "user", "content": "fix calc.py", "agent": "Programmer"},
        {"role": "assistant", "content": "look\n```\nls\n```", "agent": "Programmer"},
        {"role": "user", "content": "calc.py", "agent": "Programmer"},
    ]
    path = tmp_path / "run.traj"
    path.write_text(json.dumps({"environment": "swe_main", "trajectory": [], "history": history, "info": {}}))
    res = _cli([str(path), "--policy", "base", "--tokenizer", "chars4"])
    assert res.returncode == 1, res.stderr
    assert f"refold: failed: {path}#Manager: {fault}" in res.stderr
    assert f"{path}#Programmer" not in res.stderr and "1 of 2 sessions failed" in res.stderr
    assert "1 task, 1 call" in res.stdout  # the Programmer's session was replayed


def test_a_file_named_twice_or_through_a_link_is_replayed_once(tmp_path: Path) -> None:
    """The same file through a symlink or a second spelling of its path is one run, not two."""
    from refold.lab.replay import collect_paths

    run = tmp_path / "runs" / "a.traj.gz"
    run.parent.mkdir()
    run.write_bytes(SWE_SMALL.read_bytes())
    (tmp_path / "runs" / "link.traj.gz").symlink_to(run)
    files = collect_paths([tmp_path / "runs", run, tmp_path / "runs" / ".." / "runs" / "a.traj.gz"])
    assert files == [str(run)]
    # one of its agents named beside the whole file: the file already replays every agent
    assert collect_paths([f"{run}#Programmer", run]) == [str(run)]
    assert collect_paths([f"{run}#Programmer", f"{run}#Tester"]) == [f"{run}#Programmer", f"{run}#Tester"]


def test_a_broken_link_or_a_fifo_named_like_a_run_is_counted_not_passed_over(tmp_path: Path) -> None:
    import os

    from refold.lab.replay import collect_paths

    (tmp_path / "a.traj.gz").write_bytes(SWE_SMALL.read_bytes())
    (tmp_path / "moved.traj.json").symlink_to(tmp_path / "gone" / "moved.traj.json")
    os.mkfifo(tmp_path / "pipe.json")
    left: dict[str, int] = {}
    assert collect_paths([tmp_path], left) == [str(tmp_path / "a.traj.gz")]
    assert left == {"broken links (their target is missing)": 1, "FIFOs, sockets or devices named like runs": 1}


def test_replay_warns_of_copies_of_one_run(tmp_path: Path) -> None:
    """Two files holding the same run (a copy, or the .gz of a .json) are both counted, and the
    replay says so: their totals would otherwise be silently doubled."""
    import gzip

    (tmp_path / "a.traj.json").write_bytes(gzip.decompress(SWE_SMALL.read_bytes()))
    (tmp_path / "b.traj.json.gz").write_bytes(SWE_SMALL.read_bytes())
    (tmp_path / "c.traj").write_bytes(SWEA.read_bytes())
    r = run_cli("replay", str(tmp_path), "--tokenizer", "chars4", "--policy", "base", "--no-validate")
    assert r.returncode == 0, r.stderr
    assert f"{tmp_path / 'b.traj.json.gz'} holds the same run as {tmp_path / 'a.traj.json'}" in r.stderr
    assert r.stderr.count("holds the same run") == 1  # c.traj is another run


def test_a_report_says_which_outputs_it_kept() -> None:
    """Figures measured under ``--protect`` are not the default's: the report names the rules."""
    s = Settings(tokenizer="chars4", policies=("base", "default"), protect=("path:*.py",))
    r = build_report(replay_paths([str(MINI)], s), s)
    assert r["protect"] == ["path:*.py"]
    plain = Settings(tokenizer="chars4", policies=("base", "default"))
    assert "protect" not in build_report(replay_paths([str(MINI)], plain), plain)

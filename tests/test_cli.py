"""The command line (refold.cli): the demo runs on the shipped run; every user mistake is one line on
stderr and exit code 2, never a traceback. Commands run in-process through ``main(argv)``; only the
console script and the install without extras start a new interpreter."""

from __future__ import annotations

import json
import runpy
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import CliResult, run_cli

DATA = Path(__file__).parent / "data"
SWE = DATA / "sweagent__6e44b9__sweagenttestrepo-1c2844.traj.gz"
UP = "http://127.0.0.1:9/v1"


def assert_one_line_error(r: CliResult, words: str, code: int = 2) -> None:
    assert r.returncode == code, (r.returncode, r.stdout[-500:], r.stderr[-2000:])
    assert "Traceback" not in r.stderr + r.stdout
    err = r.stderr.strip().splitlines()
    assert len(err) == 1, r.stderr
    assert words in err[0], err[0]


def test_demo_prints_per_call_and_totals(tmp_path: Path) -> None:
    out = tmp_path / "demo.html"
    r = run_cli("demo", "--tokenizer", "chars4", "-o", str(out))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert any(line.strip().startswith("33 ") or " 33 │" in line for line in lines)  # 33 model calls
    assert "total" in r.stdout and "vs base" in r.stdout and "simulated" in r.stdout
    assert "refold replay ~/.claude/projects (Claude Code), ~/.codex/sessions (Codex)" in " ".join(r.stdout.split())
    html = out.read_text()
    assert html.startswith("<!DOCTYPE html>") or html.lower().startswith("<!doctype html>")


def test_demo_without_a_cache_says_so() -> None:
    # it said "Cached share: none prefix cache, simulated"
    r = run_cli("demo", "--tokenizer", "chars4", "--cache", "none", "--no-report")
    assert r.returncode == 0, r.stderr
    assert "Cached share: none (no prefix cache)." in " ".join(r.stdout.split()) and "none prefix" not in r.stdout


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["demo", "--tokenizer", "nope"], "unknown tokenizer"),
        (["view", "/no/such/file.json", "-o", "x.html"], "/no/such/file.json"),
        (["replay"], "Missing argument"),
        (["replay", str(SWE), "--jobs", "abc"], "--jobs"),
        (["replay", str(SWE), "--policy", "base", "--kv-model", "nope"], "nope"),
        (["view", "--bogus", str(SWE)], "--bogus"),
        (["nope"], "nope"),
        (["serve"], "--upstream"),
    ],
)
def test_user_mistakes_are_one_line(tmp_path: Path, args: list[str], words: str) -> None:
    assert_one_line_error(run_cli(*args, cwd=tmp_path), words)


def test_help_still_works(tmp_path: Path) -> None:
    r = run_cli("replay", "--help", cwd=tmp_path)
    assert r.returncode == 0 and "--policy" in r.stdout
    r = run_cli(cwd=tmp_path)  # bare refold prints the help
    assert r.returncode == 2 and "replay" in r.stdout and "Traceback" not in r.stderr


def test_version_and_short_help(capsys: pytest.CaptureFixture[str]) -> None:
    # `refold --version` and `refold replay -h` were "No such option" errors
    from importlib.metadata import version

    from refold.cli import main

    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"refold {version('refold')}"
    for argv in (["-h"], ["replay", "-h"], ["sessions", "list", "-h"]):
        assert main(argv) == 0, argv
        assert "Usage: refold" in capsys.readouterr().out, argv


def test_bad_trajectory_in_view_names_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.traj.json"
    bad.write_bytes(b'{"messages": [')
    r = run_cli("view", str(bad), "-o", str(tmp_path / "r.html"))
    assert_one_line_error(r, str(bad))
    assert "invalid JSON" in r.stderr


def _malformed(tmp_path: Path) -> Path:
    """Valid JSON the loader accepts, but with a tool call that is a string."""
    bad = tmp_path / "bad_calls.json"
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "", "tool_calls": "zz"},
        {"role": "tool", "content": "x"},
    ]
    bad.write_text(json.dumps(messages))
    return bad


def test_view_odd_file_is_one_line(tmp_path: Path) -> None:
    bad = _malformed(tmp_path)
    assert_one_line_error(run_cli("view", str(bad), "-o", str(tmp_path / "r.html"), cwd=tmp_path), str(bad))


def test_replay_odd_file_is_named_and_the_rest_go_on(tmp_path: Path) -> None:
    shutil.copy(SWE, tmp_path / SWE.name)
    bad = _malformed(tmp_path)
    r = run_cli("replay", str(tmp_path), "--policy", "base,refold", "--json", str(tmp_path / "r.json"), cwd=tmp_path)
    assert r.returncode == 1, r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    assert f"refold: failed: {bad}" in r.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["summary"]["all"]["tasks"] == 1 and len(report["failed"]) == 1


@pytest.mark.parametrize("flag", ["--json", "--csv"])
def test_replay_unwritable_output_fails_before_replaying(tmp_path: Path, flag: str) -> None:
    bad = tmp_path / "no" / "such" / "dir" / "out"
    r = run_cli("replay", str(SWE), "--policy", "base", flag, str(bad), cwd=tmp_path)
    assert_one_line_error(r, str(bad))
    assert "refold replay:" not in r.stdout  # nothing was replayed
    r = run_cli("replay", str(SWE), "--policy", "base", flag, str(tmp_path), cwd=tmp_path)
    assert_one_line_error(r, "folder")


@pytest.mark.parametrize(
    "args",
    [["view", "RUN", "-o", "RUN"], ["replay", "RUN", "--json", "RUN"], ["replay", "RUN", "--csv", "./RUN"],
     ["simulate", "RUN", "--json", "RUN"]],
)
def test_no_output_overwrites_the_run_it_reads(tmp_path: Path, args: list[str]) -> None:
    run = tmp_path / "run.traj.json"
    shutil.copy(SWE, run)
    before = run.read_bytes()
    r = run_cli(*[a.replace("RUN", run.name) for a in args], cwd=tmp_path)
    assert_one_line_error(r, "is the input run")
    assert run.read_bytes() == before


@pytest.mark.parametrize(
    "args", [["replay", "RUN", "--json", "-"], ["replay", "RUN", "--csv", "-"], ["view", "RUN", "-o", "-"],
             ["simulate", "RUN", "--json", "-"]],
)
def test_a_dash_output_is_refused_not_written_as_a_file_named_dash(tmp_path: Path, args: list[str]) -> None:
    run = tmp_path / "run.traj.json"
    shutil.copy(SWE, run)
    r = run_cli(*[a.replace("RUN", run.name) for a in args], cwd=tmp_path)
    assert_one_line_error(r, "-: writing to standard output is not supported; give a file name")
    assert not (tmp_path / "-").exists()


def test_two_outputs_on_one_file_are_refused(tmp_path: Path) -> None:
    r = run_cli("replay", str(SWE), "--policy", "base", "--json", "o.out", "--csv", "o.out", cwd=tmp_path)
    assert_one_line_error(r, "--json and --csv both name o.out")


def test_demo_unwritable_report_fails_before_the_table(tmp_path: Path) -> None:
    bad = tmp_path / "missing" / "demo.html"
    r = run_cli("demo", "--tokenizer", "chars4", "-o", str(bad), cwd=tmp_path)
    assert_one_line_error(r, str(bad))
    assert "total" not in r.stdout
    assert "-o FILE, or skip it with --no-report" in r.stderr  # a first run from a read-only folder can go on


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--log-level", "loud"], "--log-level"),
        (["--tokenizer", "nope"], "tokenizer"),
        (["--timeout", "0"], "--timeout"),
        (["--port", "99999"], "--port"),
        (["--store", "/proc/refold-nope/x.db"], "store"),
        (["--store", "redis://127.0.0.1:1/0"], "redis://127.0.0.1:1/0"),
    ],
)
def test_serve_bad_settings_fail_before_listening(tmp_path: Path, args: list[str], words: str) -> None:
    assert_one_line_error(run_cli("serve", "--upstream", UP, "--port", "0", *args, cwd=tmp_path), words)


def test_serve_port_in_use_is_one_line(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = run_cli("serve", "--upstream", UP, "--port", str(port), cwd=tmp_path)
    assert_one_line_error(r, str(port))


def test_python_dash_m_refold_is_the_cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "argv", ["refold", "demo", "--tokenizer", "nope"])
    with pytest.raises(SystemExit) as exit_:
        runpy.run_module("refold", run_name="__main__")
    assert exit_.value.code == 2
    assert capsys.readouterr().err.strip() == "refold: error: unknown tokenizer 'nope'; valid choices: qwen3.6, o200k, cl100k, chars4"


# ---- a new interpreter: the installed console script, and an install without the extras -----------


def test_console_script_runs_main() -> None:
    script = shutil.which("refold", path=str(Path(sys.executable).parent)) or shutil.which("refold")
    assert script is not None, "the 'refold' console script is not installed"
    r = subprocess.run([script, "demo", "--tokenizer", "nope"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and r.stderr.startswith("refold: error: unknown tokenizer 'nope'"), r.stderr


BLOCK_EXTRAS = """
import sys, importlib.abc
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split('.')[0] in ('fastapi', 'uvicorn', 'minisweagent', 'redis'):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Block())
from refold.cli import main
print([main(["demo", "--no-report", "--tokenizer", "chars4"]), main(["serve", "--upstream", sys.argv[1]])])
"""
BLOCK_EXTRAS_HELP = BLOCK_EXTRAS.split("print(")[0] + "print([main(['--help'])])\n"


def test_core_install_without_extras() -> None:
    """`pip install .` has no serve/mini extras: the core commands work, the others say what to install."""
    r = subprocess.run([sys.executable, "-c", BLOCK_EXTRAS, UP], capture_output=True, text=True, timeout=600)
    assert r.stdout.splitlines()[-1] == "[0, 2]", r.stderr  # demo ran, serve refused
    assert r.stderr.strip() == "refold: error: 'refold serve' needs fastapi: pip install 'refold[serve]'"
    r = subprocess.run([sys.executable, "-c", BLOCK_EXTRAS_HELP], capture_output=True, text=True, timeout=600)
    assert r.stdout.splitlines()[-1] == "[0]", r.stderr
    serve = next(line for line in r.stdout.splitlines() if " serve " in line)
    assert "Not installed: needs the 'serve' extra." in serve


def test_top_level_help_lists_what_each_command_says() -> None:
    """``refold --help`` lists commands from COMMAND_HELP without importing them: each entry must be
    the command's own help."""
    import typer.main

    from refold.cli import COMMAND_HELP, COMMAND_MODULES, load_command

    assert set(COMMAND_HELP) <= set(COMMAND_MODULES)
    for name in COMMAND_MODULES:
        cmd = typer.main.get_command(load_command(name))
        own = " ".join((cmd.help or "").split("\n\n")[0].split())
        assert COMMAND_HELP.get(name, own) == own, name


def test_top_level_help_imports_no_command() -> None:
    code = (
        "import sys\nfrom refold.cli import main\nprint([main(['--help'])])\n"
        "print(sorted(m for m in sys.modules if m.startswith(('refold.cli.', 'refold.config', 'refold.lab', 'pydantic'))))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "simulate" in r.stdout and "replay" in r.stdout
    assert r.stdout.strip().splitlines()[-2:] == ["[0]", "[]"]


# ---- output: tables that fit, counts and plurals, plots ---------------------------------------------


def test_plurals_and_summary_counts() -> None:
    from refold.cli._output import plural
    from refold.cli.replay import summary_line

    assert [plural(n, "task") for n in (0, 1, 2, 1234)] == ["0 tasks", "1 task", "2 tasks", "1,234 tasks"]
    assert summary_line(3, 2, 3, 1.04, 1) == "3 files (2 failed) in 1.0 s with 1 job."
    assert summary_line(1, 0, 2, 0.5, 4) == "1 file, 2 sessions (a file with several sessions counts each) in 0.5 s with 4 jobs."


def test_replay_counts_failed_files(tmp_path: Path) -> None:
    shutil.copy(SWE, tmp_path / SWE.name)
    for name in ("a.traj.json", "b.traj.json"):
        (tmp_path / name).write_text('{"messages": [')
    r = run_cli("replay", str(tmp_path), "--policy", "base", "--tokenizer", "chars4", cwd=tmp_path)
    assert r.returncode == 1
    assert "1 task, " in r.stdout and "3 files (2 failed) in " in r.stdout and "with 1 job." in r.stdout
    assert r.stderr.strip().splitlines()[-1] == "refold: 2 of 3 files failed"


def test_replay_of_only_failing_files_prints_no_note_on_a_table_it_did_not_print(tmp_path: Path) -> None:
    (tmp_path / "a.traj.json").write_text('{"messages": [')
    r = run_cli("replay", str(tmp_path / "a.traj.json"), "--policy", "base", "--tokenizer", "chars4", cwd=tmp_path)
    assert r.returncode == 1 and r.stdout == "1 file (1 failed) in " + r.stdout.split(" in ", 1)[1]
    assert r.stdout.strip().endswith("with 1 job.") and "Measured:" not in r.stdout  # it explained empty columns


@pytest.mark.parametrize("command", ["replay", "simulate"])
def test_compact_table_fits_80_columns_and_wide_has_every_column(tmp_path: Path, command: str) -> None:
    extra = ["--sessions", "2"] if command == "simulate" else []
    args = [command, str(SWE), "--policy", "base,masking-polling", "--tokenizer", "chars4", *extra]
    compact = run_cli(*args, "--compact", cwd=tmp_path)
    assert compact.returncode == 0, compact.stderr
    lines = compact.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("policy"))
    table = lines[at : at + 4]  # header, rule, base, masking-polling
    assert table[1].startswith("─") and table[3].startswith("masking-polling ")
    assert all(len(line) <= 80 for line in table), table
    wide = run_cli(*args, "--wide", cwd=tmp_path)
    header = next(line for line in wide.stdout.splitlines() if line.startswith("policy"))
    from refold.cli import replay, simulate_output

    columns = (replay if command == "replay" else simulate_output).COLUMNS
    assert all(c.name in header for c in columns) and len(header) > 80
    assert "…" not in compact.stdout + wide.stdout


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.lists(st.integers(0, 10**9), min_size=4, max_size=4), min_size=1, max_size=5),
    st.integers(20, 200),
    st.sampled_from([None, True, False]),
)
def test_tables_never_cut_a_number(rows: list[list[int]], width: int, wide: bool | None) -> None:
    import io

    from rich.console import Console

    from refold.cli._output import Column, print_table

    columns = [Column("name", left=True), Column("a"), Column("b", compact=False), Column("c"), Column("d", compact=False)]
    cells = [[f"policy-{i}", *(f"{x:,}" for x in r)] for i, r in enumerate(rows)]
    buf = io.StringIO()
    print_table(Console(file=buf, width=width, force_terminal=True, color_system=None), "title", columns, cells, wide)
    text = buf.getvalue()
    shown = [c for c in columns if wide or (wide is None and "b" in text.splitlines()[1]) or c.compact]
    for row in cells:
        line = next(line for line in text.splitlines() if line.startswith(row[0] + " "))
        for c in shown:
            assert row[[x.name for x in columns].index(c.name)] in line.split()
    if wide is False:
        assert " b " not in text.splitlines()[1] + " "


@pytest.mark.parametrize("command", ["replay", "simulate"])
@pytest.mark.parametrize("suffix", [".png", ".svg"])
def test_plot_is_written(tmp_path: Path, command: str, suffix: str) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / f"chart{suffix}"
    extra = ["--sessions", "2"] if command == "simulate" else []
    r = run_cli(command, str(SWE), "--policy", "base,refold-best", "--tokenizer", "chars4", "--plot", str(out), *extra)
    assert r.returncode == 0, r.stderr
    data = out.read_bytes()
    if suffix == ".png":
        assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 20_000
    else:
        import xml.etree.ElementTree as ET

        text = data.decode()
        ET.fromstring(text)  # well-formed
        for words in ("base", "refold-best", "cumulative prompt tokens", "recomputed", "simulated"):
            assert words in text.lower() if words == "simulated" else words in text, words


def test_plot_of_a_one_call_run_and_of_no_run(tmp_path: Path) -> None:
    # a 1-call run drew no line, its axes said "0.96 ... 1.04" calls and "9 9 9 9" tokens; when every
    # file failed an empty chart with made-up axes was written
    import re
    import xml.etree.ElementTree as ET

    pytest.importorskip("matplotlib")
    run = tmp_path / "one.json"
    run.write_text(json.dumps([{"role": "user", "content": "task"}, {"role": "assistant", "content": "ls"}]))
    out = tmp_path / "one.svg"
    r = run_cli("replay", str(run), "--policy", "base", "--tokenizer", "chars4", "--plot", str(out))
    assert r.returncode == 0, r.stderr
    labels = {t.strip() for t in ET.fromstring(out.read_text()).itertext() if t.strip()}
    assert "1" in labels and not [t for t in labels if re.fullmatch(r"\d+\.\d+", t)], labels
    empty = tmp_path / "empty.json"
    empty.write_text("")
    r = run_cli("replay", str(empty), "--tokenizer", "chars4", "--plot", str(tmp_path / "none.png"))
    assert r.returncode == 1 and "--plot" in r.stderr and "not written: no file was replayed" in r.stderr
    assert not (tmp_path / "none.png").exists()


@pytest.mark.parametrize("command", ["replay", "simulate"])
def test_plot_mistakes_are_one_line_before_any_work(
    tmp_path: Path, command: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    r = run_cli(command, str(SWE), "--tokenizer", "chars4", "--plot", str(tmp_path / "chart.pdf"), cwd=tmp_path)
    assert_one_line_error(r, ".png or .svg")
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if the 'plot' extra were not installed
    r = run_cli(command, str(SWE), "--tokenizer", "chars4", "--plot", str(tmp_path / "chart.png"), cwd=tmp_path)
    assert_one_line_error(r, "pip install 'refold[plot]'")
    assert r.stdout == ""  # nothing was replayed or simulated


def test_plot_with_no_per_call_json(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    chart, report = tmp_path / "c.svg", tmp_path / "r.json"
    r = run_cli("replay", str(SWE), "--policy", "base", "--tokenizer", "chars4", "--no-per-call",
                "--plot", str(chart), "--json", str(report))  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert '"per_call"' not in report.read_text()  # no per-call lists (other keys may end in _per_call)
    svg = chart.read_text()
    assert 'id="legend_1"' in svg and "grey cached, red recomputed" in svg  # per-call lines drawn; bars named


def test_a_report_saved_among_the_runs_is_skipped_and_named_if_given(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    shutil.copy(SWE, runs / SWE.name)
    for _ in range(2):  # the second replay finds the first one's report in the folder
        r = run_cli("replay", str(runs), "--policy", "base", "--json", str(runs / "replay.json"), cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        assert json.loads((runs / "replay.json").read_text())["summary"]["all"]["tasks"] == 1
    r = run_cli("replay", str(runs / "replay.json"), "--policy", "base", cwd=tmp_path)
    assert "a report refold wrote (refold-replay-1), not a recorded run" in r.stderr


def test_the_predictions_files_agents_write_beside_their_runs_are_skipped(tmp_path: Path) -> None:
    """'mini-extra swebench -o runs/refold' writes preds.json next to the runs, SWE-agent
    all_preds.jsonl: 'refold replay runs/' (as the README says) failed on them with exit 1."""
    runs = tmp_path / "runs"
    (runs / "task-1").mkdir(parents=True)
    shutil.copy(SWE, runs / "task-1" / SWE.name)
    pred = {"model_name_or_path": "refold", "instance_id": "task-1", "model_patch": "diff --git a/x b/x"}
    (runs / "preds.json").write_text(json.dumps({"task-1": pred}, indent=2))
    (runs / "all_preds.jsonl").write_text(json.dumps(pred) + "\n" + json.dumps({**pred, "instance_id": "task-2"}) + "\n")
    r = run_cli("replay", str(runs), "--policy", "base", "--tokenizer", "chars4", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "1 file in" in r.stderr + r.stdout
    for name in ("preds.json", "all_preds.jsonl"):  # named, it is said what it is
        r = run_cli("replay", str(runs / name), "--policy", "base", "--tokenizer", "chars4", cwd=tmp_path)
        assert r.returncode == 1
        assert "a SWE-bench predictions file (instance id -> model_patch), not a recorded run" in r.stderr


def test_plot_tick_labels_keep_their_values() -> None:
    from refold.cli._plot import _tokens

    assert [_tokens(v) for v in (0, 999, 2500, 7500, 12500, 20000, 125_000, 1_250_000, 999_999)] == [
        "0", "999", "2.5k", "7.5k", "12.5k", "20k", "125k", "1.25M", "1000k"
    ]


def test_plot_lines_of_every_default_policy_are_told_apart() -> None:
    # replay's 11 default policies outran matplotlib's 10 colors: base and compact+self-gc were
    # drawn alike
    from refold.cli._plot import line_styles
    from refold.lab.replay import POLICIES  # replay's default: every policy

    styles = line_styles(list(POLICIES))
    assert len(POLICIES) > 10
    assert len({tuple(sorted(s.items())) for s in styles.values()}) == len(POLICIES)


def test_replay_off_a_terminal_says_how_far_it_is(tmp_path: Path) -> None:
    """A long run's replay takes minutes: piped or logged it was silent to the end. Now a line at
    each quarter of the policy replays, naming the file and, replayed in this process, the policy
    (a file that fails still counts: it is done)."""
    shutil.copy(SWE, tmp_path / SWE.name)
    bad = _malformed(tmp_path)
    r = run_cli("replay", str(tmp_path), "--policy", "base,refold", cwd=tmp_path)
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("refold replay: ")]
    shares = [int(ln.split("%")[0].rsplit(" ", 1)[1]) for ln in lines]
    assert shares == sorted(set(shares)) and shares[-1] == 100 and len(shares) >= 3, r.stderr  # the bad file is half
    assert all(" of 2 file(s) x 2 policies done (" in ln for ln in lines)  # a file's agents share its part
    assert any(f"{SWE.name} refold)" in ln for ln in lines) and bad.name in r.stderr


def test_progress_lines_say_the_share_done() -> None:
    # a line is printed as each quarter is crossed, but it said the quarter: 1 of 3 files "25%"
    import io
    from contextlib import redirect_stderr

    from rich.console import Console

    from refold.cli._output import progress_ticks

    err = io.StringIO()
    with redirect_stderr(err), progress_ticks(Console(file=io.StringIO()), "replay", 3, "3 file(s)") as tick:
        for name in ("a", "b", "c"):
            tick(1, name)
    assert [ln.split(": ", 1)[1] for ln in err.getvalue().splitlines()] == [
        "33% of 3 file(s) done (a)", "66% of 3 file(s) done (b)", "100% of 3 file(s) done (c)"
    ]


def test_the_readme_names_every_replay_policy() -> None:
    # its list stopped at compact+refold: default, self-gc and compact+self-gc (3 of the 11 the
    # command replays by default) were not named
    from refold.lab.replay import POLICIES

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    text = " ".join(readme.split())  # the paragraph is wrapped anywhere
    sentence = text.split("Policies (all of them by default):", 1)[1].split("A file", 1)[0]
    assert [p for p in POLICIES if f"`{p}`" not in sentence] == []


def test_replay_csv_of_a_file_name_that_is_not_utf8(tmp_path: Path) -> None:
    # the CSV's file and path columns raised UnicodeEncodeError after the whole replay
    import os

    run = tmp_path / os.fsdecode(b"run\xff.traj")
    shutil.copy(SWE, run)
    out = tmp_path / "r.csv"
    r = run_cli("replay", str(run), "--policy", "base", "--tokenizer", "chars4", "--csv", str(out))
    assert r.returncode == 0, r.stderr
    assert "run?.traj" in out.read_text(encoding="utf-8")

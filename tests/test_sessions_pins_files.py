"""``refold sessions pin|unpin RUN``: what a pin may write, besides the run it names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from refold.cli import main
from test_sessions_pins import saved_run


def test_a_read_only_run_is_not_rewritten(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A recorded data set kept read-only (mode 444) was rewritten anyway when refold ran as root
    (root may write any file): the pin must not override the owner's read-only mark."""
    path = saved_run(tmp_path, steps=2)
    before = path.read_bytes()
    path.chmod(0o444)
    for command in ("pin", "unpin"):
        assert main(["sessions", command, str(path), "1"]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"refold: error: {path} is read-only") and err.count("\n") == 1, err
    assert path.read_bytes() == before


def test_the_pins_file_a_run_names_must_be_a_pins_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The run names its live pins file (info.config.refold.pins_file); a run from elsewhere may
    name any file. A JSON file that holds something else was replaced by the pins."""
    path = saved_run(tmp_path, steps=2)
    other = tmp_path / "package.json"
    other.write_text('{"name": "mine", "version": "1.0.0"}')
    data = json.loads(path.read_text())
    data["info"]["config"]["refold"]["pins_file"] = "package.json"
    path.write_text(json.dumps(data))
    run_before = path.read_bytes()
    assert main(["sessions", "pin", str(path), "1"]) == 2
    err = capsys.readouterr().err
    assert f"pins file {other} holds something other than pins" in err and err.count("\n") == 1, err
    assert other.read_text() == '{"name": "mine", "version": "1.0.0"}' and path.read_bytes() == run_before


def test_a_pins_file_is_written_and_created(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = saved_run(tmp_path, steps=2)
    data = json.loads(path.read_text())
    data["info"]["config"]["refold"]["pins_file"] = "pins.json"
    path.write_text(json.dumps(data))
    assert main(["sessions", "pin", str(path), "1"]) == 0
    assert main(["sessions", "pin", str(path), "2"]) == 0
    capsys.readouterr()
    assert [r["item"] for r in json.loads((tmp_path / "pins.json").read_text())["refold_pins"]] == ["1", "2"]


def test_a_harness_log_is_named_as_such_when_it_cannot_carry_pins(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A Claude Code log was called 'a plain message list' and told to be saved as a mini trajectory."""
    log = tmp_path / "s.jsonl"
    log.write_bytes((Path(__file__).parent / "data" / "claude_code_session.jsonl").read_bytes())
    before = log.read_bytes()
    assert main(["sessions", "pin", f"{log}#main", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"refold: error: {log}#main: a Claude Code session log cannot carry pins") and err.count("\n") == 1
    assert "refold sessions pin ID" in err and "plain message list" not in err
    assert log.read_bytes() == before

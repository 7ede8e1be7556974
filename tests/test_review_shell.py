"""Review of the CLI shells: every user mistake is one line on stderr and exit code 2, no traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"
SWE = DATA / "sweagent__6e44b9__sweagenttestrepo-1c2844.traj.gz"


def refold(*args: str, cwd: Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from refold.cli import main; main()", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=timeout,
    )


def one_line_error(r: subprocess.CompletedProcess[str], words: str, code: int = 2) -> None:
    assert r.returncode == code, (r.returncode, r.stdout[-500:], r.stderr[-2000:])
    assert "Traceback" not in r.stderr + r.stdout
    err = r.stderr.strip().splitlines()
    assert len(err) == 1, r.stderr
    assert words in err[0], err[0]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["replay"], "Missing argument"),
        (["replay", str(SWE), "--jobs", "abc"], "--jobs"),
        (["view", "--bogus", str(SWE)], "--bogus"),
        (["nope"], "nope"),
        (["serve"], "--upstream"),
    ],
)
def test_click_usage_errors_are_one_line(tmp_path: Path, args: list[str], words: str) -> None:
    one_line_error(refold(*args, cwd=tmp_path), words)


def test_help_still_works(tmp_path: Path) -> None:
    r = refold("replay", "--help", cwd=tmp_path)
    assert r.returncode == 0 and "--policy" in r.stdout
    r = refold(cwd=tmp_path)  # bare refold prints the help
    assert "replay" in r.stdout and "Traceback" not in r.stderr

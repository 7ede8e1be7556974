"""The command line: the demo runs on the shipped run; user mistakes get one line, never a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


def refold(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "import sys; from refold.cli import main; sys.exit(main())", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=600,
    )


def test_demo_prints_per_call_and_totals(tmp_path: Path) -> None:
    out = tmp_path / "demo.html"
    r = refold("demo", "--tokenizer", "chars4", "-o", str(out))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert any(line.strip().startswith("33 ") or " 33 │" in line for line in lines)  # 33 model calls
    assert "total" in r.stdout and "vs base" in r.stdout and "simulated" in r.stdout
    html = out.read_text()
    assert html.startswith("<!DOCTYPE html>") or html.lower().startswith("<!doctype html>")


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["demo", "--tokenizer", "nope"], "unknown tokenizer"),
        (["view", "/no/such/file.json", "-o", "x.html"], "/no/such/file.json"),
    ],
)
def test_user_mistakes_are_one_line(tmp_path: Path, args: list[str], words: str) -> None:
    r = refold(*args, cwd=tmp_path)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr + r.stdout
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and words in err[0]


def test_bad_trajectory_in_view_names_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.traj.json"
    bad.write_bytes(b'{"messages": [')
    r = refold("view", str(bad), "-o", str(tmp_path / "r.html"))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert str(bad) in r.stderr and "invalid JSON" in r.stderr


BLOCK_EXTRAS = """
import sys, importlib.abc
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split('.')[0] in ('fastapi', 'uvicorn', 'minisweagent', 'redis'):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Block())
sys.argv = ['refold', *sys.argv[1:]]
from refold.cli import main
sys.exit(main())
"""


def test_core_install_without_extras(tmp_path: Path) -> None:
    """`pip install .` has no serve/mini extras: the core commands work, the others say what to install."""
    run = lambda *a: subprocess.run([sys.executable, "-c", BLOCK_EXTRAS, *a], capture_output=True, text=True, timeout=600)  # noqa: E731
    demo = run("demo", "--no-report", "--tokenizer", "chars4")
    assert demo.returncode == 0, demo.stderr
    serve = run("serve", "--upstream", "http://127.0.0.1:9/v1")
    assert serve.returncode == 2 and "Traceback" not in serve.stderr
    assert serve.stderr.strip() == "refold: error: 'refold serve' needs fastapi: pip install 'refold[serve]'"

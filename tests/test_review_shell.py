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
        [sys.executable, "-c", "import sys; from refold.cli import main; sys.exit(main())", *args],
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


def test_replay_unknown_kv_model_is_a_usage_error(tmp_path: Path) -> None:
    one_line_error(refold("replay", str(SWE), "--policy", "base", "--kv-model", "nope", cwd=tmp_path), "nope")


@pytest.mark.parametrize("flag", ["--json", "--csv"])
def test_replay_unwritable_output_fails_before_replaying(tmp_path: Path, flag: str) -> None:
    bad = tmp_path / "no" / "such" / "dir" / "out"
    r = refold("replay", str(SWE), "--policy", "base", flag, str(bad), cwd=tmp_path)
    one_line_error(r, str(bad))
    assert "refold replay:" not in r.stdout  # nothing was replayed
    r = refold("replay", str(SWE), "--policy", "base", flag, str(tmp_path), cwd=tmp_path)
    one_line_error(r, "folder")


def test_demo_unwritable_report_fails_before_the_table(tmp_path: Path) -> None:
    bad = tmp_path / "missing" / "demo.html"
    r = refold("demo", "--tokenizer", "chars4", "-o", str(bad), cwd=tmp_path)
    one_line_error(r, str(bad))
    assert "total" not in r.stdout


UP = "http://127.0.0.1:9/v1"


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
    r = refold("serve", "--upstream", UP, "--port", "0", *args, cwd=tmp_path, timeout=60)
    one_line_error(r, words)


def test_serve_port_in_use_is_one_line(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = refold("serve", "--upstream", UP, "--port", str(port), cwd=tmp_path, timeout=60)
    one_line_error(r, str(port))


def _malformed(tmp_path: Path) -> Path:
    """Valid JSON the loader accepts, but with a tool call that is a string."""
    import json

    bad = tmp_path / "bad_calls.json"
    bad.write_text(
        json.dumps(
            [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "", "tool_calls": "zz"},
                {"role": "tool", "content": "x"},
            ]
        )
    )
    return bad


def test_replay_odd_file_is_named_and_the_rest_go_on(tmp_path: Path) -> None:
    import shutil

    shutil.copy(SWE, tmp_path / SWE.name)
    bad = _malformed(tmp_path)
    r = refold("replay", str(tmp_path), "--policy", "base,refold", "--json", str(tmp_path / "r.json"), cwd=tmp_path)
    assert r.returncode == 1, r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    assert f"refold: failed: {bad}" in r.stderr
    import json

    report = json.loads((tmp_path / "r.json").read_text())
    assert report["summary"]["all"]["tasks"] == 1 and len(report["failed"]) == 1


def test_view_odd_file_is_one_line(tmp_path: Path) -> None:
    bad = _malformed(tmp_path)
    one_line_error(refold("view", str(bad), "-o", str(tmp_path / "r.html"), cwd=tmp_path), str(bad))


def test_base_vs_itself_is_exactly_zero() -> None:
    from refold.replay import Settings, build_report
    from refold.replay.runner import replay_file

    settings = Settings(policies=("base", "clear-tool-uses"), tokenizer="chars4", validate=False)
    report = build_report([replay_file(str(SWE), settings)], settings)
    for name in ("base", "clear-tool-uses"):
        e = report["summary"]["all"]["policies"][name]
        assert e["cost_vs_base"] == 0.0 and str(e["cost_vs_base"]) == "0.0", e["cost_vs_base"]


def test_report_records_mask_after() -> None:
    from refold.replay import BEST_MASK_AFTER, Settings, build_report

    assert build_report([], Settings(tokenizer="chars4"))["mask_after"] == BEST_MASK_AFTER
    assert build_report([], Settings(tokenizer="chars4", mask_after=5))["mask_after"] == 5


def test_proxy_config_accepts_tokenizer_aliases() -> None:
    from refold.errors import ConfigError
    from refold.proxy import ProxyConfig

    for name in ("qwen3.6", "o200k_base", "QWEN", "chars4", "off"):
        ProxyConfig(upstream="http://127.0.0.1:9/v1", tokenizer=name)
    with pytest.raises(ConfigError, match="tokenizer"):
        ProxyConfig(upstream="http://127.0.0.1:9/v1", tokenizer="nope")


def test_view_title_with_a_template_marker() -> None:
    import json
    import re

    from refold.viewer.page import render_page

    page = render_page({"title": "__DATA__ /*__JS__*/ __VERSION__", "x": "__TITLE__"}, version="1")
    m = re.search(r'<script type="application/json" id="refold-data">(.*?)</script>', page, re.S)
    assert m is not None
    assert json.loads(m.group(1)) == {"title": "__DATA__ /*__JS__*/ __VERSION__", "x": "__TITLE__"}
    assert "<title>__DATA__ /*__JS__*/ __VERSION__ · refold view</title>" in page

"""``mini -c refold_mini.yaml`` and ``refold run`` with mini's DeterministicToolcallModel (no network),
and the shipped ``mini-swe-agent-1.1`` tool-call fixture they produce.

Regenerate the fixture with ``REFOLD_REGEN_FIXTURES=1 pytest tests/test_minisweagent_run.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from refold.cli import app
from refold.integrations import CONFIGS, config_path
from refold.loaders import load
from refold.prompts import response_format_lines
from refold.protocol import CM

FIXTURE = Path(__file__).parent / "data" / "mswea11_toolcall_refold.traj.json"
FILE = "\n".join(f"line {i}: some configuration value number {i}" for i in range(40)) + "\n"
SCRIPT = [  # (PROGRESS, STALE, command)
    ("list files", "-", "ls"),
    ("read settings", "-", "cat settings.txt"),
    ("count lines", "-", "wc -l settings.txt"),
    ("read settings again", "3", "cat settings.txt"),
    ("change line 7", "-", "sed -i 's/number 7$/number seven/' settings.txt"),
    ("read after the edit", "-", "cat settings.txt"),
    ("bring back step 4", "5", "restore 4"),
    ("show the diff", "-", "git diff --stat"),
    ("submit", "-", "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"),
]


def outputs() -> list[dict[str, Any]]:
    out = []
    for i, (progress, stale, cmd) in enumerate(SCRIPT, start=1):
        call = {
            "id": f"call_{i}",
            "type": "function",
            "function": {"name": "bash", "arguments": json.dumps({"command": cmd})},
        }
        out.append(
            {
                "role": "assistant",
                "content": f"PROGRESS: {progress}\nSTALE: {stale}\n\nStep {i}: {progress}.",
                "tool_calls": [call],
                "extra": {"actions": [{"command": cmd, "tool_call_id": f"call_{i}"}], "cost": 0.0},
            }
        )
    return out


def workspace(tmp: Path) -> tuple[Path, Path]:
    repo = tmp / "repo"
    repo.mkdir()
    (repo / "settings.txt").write_text(FILE)
    env = {
        **os.environ,
        "GIT_AUTHOR_DATE": "2025-01-01T00:00:00",
        "GIT_COMMITTER_DATE": "2025-01-01T00:00:00",
    }
    for cmd in (
        ["git", "init", "-q"],
        ["git", "add", "."],
        ["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "init"],
    ):
        subprocess.run(cmd, cwd=repo, check=True, env=env)
    spec = tmp / "scripted.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "model": {
                    "inner_model_class": "minisweagent.models.test_models.DeterministicToolcallModel",
                    "model_name": "deterministic_toolcall",
                    "refold": {"k": 2, "mask_after": None},  # the seed: the stub below is its mechanics
                    "refold_boundary": {"rule": "fixed"},
                    "outputs": outputs(),
                },
                "agent": {"cost_limit": 0},
            }
        )
    )
    return repo, spec


def check_trajectory(path: Path) -> None:
    data = json.loads(path.read_text())
    assert data["trajectory_format"] == "mini-swe-agent-1.1"
    assert data["info"]["exit_status"] == "Submitted"
    assert data["info"]["config"]["model_type"] == "refold.integrations.minisweagent.RefoldModel"
    assert data["info"]["config"]["refold"]["policy"]["k"] == 2
    h = load(path)
    assert len(h) == len(SCRIPT)
    assert [a.command for s in h.steps for a in s.actions] == [c for _, _, c in SCRIPT]
    assert response_format_lines(2) in h.prefix[1]["content"]
    restore = h.step(7)
    assert restore.restore_of == (4,)
    obs = restore.observations[0]
    assert obs["role"] == "tool" and obs["tool_call_id"] == "call_7"
    assert obs["content"].startswith(f"{CM} Step 4 restored")
    assert h.step(4).observations[0]["content"] in obs["content"]  # byte-exact
    for s in h.steps:
        assert s.meta["refold"]["format"] == "refold-mini-1" and s.meta["refold"]["t"] == s.index - 1
    # the last call (t=8, boundary 6): step 4 re-read an unchanged file -> a stub
    assert h.step(len(SCRIPT)).meta["refold"]["stubs"] >= 1
    assert "number seven" in h.step(6).observations[0]["content"]


def mini_executable() -> list[str]:
    """The ``mini`` script installed with the interpreter running these tests, else that interpreter
    running mini's entry point module: never a ``mini`` found on PATH, which may belong to another
    environment and import another checkout of refold (a pyenv shim or a global install)."""
    script = Path(sys.executable).parent / "mini"
    if script.is_file():
        return [str(script)]
    return [sys.executable, "-m", "minisweagent.run.mini"]  # what the script runs: mini's typer app


def test_mini_command_runs_refold_config(tmp_path: Path) -> None:
    """The real `mini` executable, configured only (no code of ours is passed besides config)."""
    repo, spec = workspace(tmp_path)
    out = tmp_path / "mini.traj.json"
    env = {
        **os.environ,
        "MSWEA_CONFIGURED": "1",
        "MSWEA_SILENT_STARTUP": "1",
        "MSWEA_GLOBAL_CONFIG_DIR": str(tmp_path / "cfg"),
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }
    cmd = [
        *mini_executable(),
        "-c",
        str(config_path("mini")),
        "-c",
        str(spec),
        "-t",
        "Rename value seven.",
        "-y",
        "--exit-immediately",
        "-o",
        str(out),
    ]
    proc = subprocess.run(
        cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    check_trajectory(out)
    if os.getenv("REFOLD_REGEN_FIXTURES"):
        FIXTURE.write_text(out.read_text())


def test_shipped_toolcall_fixture() -> None:
    check_trajectory(FIXTURE)


def test_refold_run_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo, spec = workspace(tmp_path)
    monkeypatch.chdir(repo)
    out = tmp_path / "run.traj.json"
    result = CliRunner().invoke(
        app,
        [
            "run",
            "-t",
            "Rename value seven.",
            "-c",
            str(spec),
            "-y",
            "--exit-immediately",
            "-o",
            str(out),
            "-k",
            "2",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "exit status: Submitted" in result.output
    check_trajectory(out)


def test_refold_run_keeps_a_configs_output_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # without -o, refold run set mini's default path over every config: -c agent.output_path=X
    # was ignored and the run went to ~/.config/mini-swe-agent/last_refold_run.traj.json
    repo, spec = workspace(tmp_path)
    monkeypatch.chdir(repo)
    out = tmp_path / "from-config.traj.json"
    args = ["run", "-t", "Rename value seven.", "-c", str(spec), "-c", f"agent.output_path={out}", "-y", "--exit-immediately"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert f"trajectory: {out}" in result.output
    check_trajectory(out)


class FailingModel:
    """An inner model whose call fails as litellm's do on a wrong key (``inner_model_class``)."""

    def __init__(self, **kwargs: Any) -> None:
        from minisweagent.models.test_models import DeterministicToolcallModel

        self._inner = DeterministicToolcallModel(**kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def query(self, *args: Any, **kwargs: Any) -> Any:
        import litellm

        raise litellm.AuthenticationError(message="Incorrect API key provided", llm_provider="openai", model="m")


def test_a_model_call_that_fails_is_one_line_and_the_run_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # a wrong API key (or model name) ended `refold run` with litellm's whole traceback
    from refold.cli import main

    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    repo, spec = workspace(tmp_path)
    monkeypatch.chdir(repo)
    out = tmp_path / "o.json"
    inner = f"model.inner_model_class={__name__}.FailingModel"
    assert main(["run", "-t", "x", "-c", str(spec), "-c", inner, "-y", "--exit-immediately", "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("refold: error: the model call failed: AuthenticationError: ") and "Incorrect API key" in err, err
    assert err.endswith(f"(the run so far: {out})") and out.exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run"], "no task"),
        (["run", "-t", "x", "-c", "/nonexistent/refold.yaml"], "config '/nonexistent/refold.yaml': no such file (nor"),
        (["run", "-t", "x", "-c", "model.refold.k=0", "-m", "a/b"], "invalid policy field 'k'"),
        (
            ["run", "-t", "x", "-c", "model.inner_model_class=no.such.Model", "-m", "a/b"],
            "Unknown model class",
        ),
        (["run", "--print-config", "nope"], "unknown config 'nope'"),
        # a misspelled section was ignored by mini: the run went ahead with refold's settings unset
        (["run", "-t", "x", "-c", "modle.refold.k=4", "-m", "a/b"], "unknown section 'modle'; did you mean 'model'?"),
    ],
)
def test_refold_run_errors_are_one_line(
    args: list[str], message: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from refold.cli import main

    monkeypatch.delenv("MSWEA_MODEL_NAME", raising=False)
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("refold: error:") and message in err, err


def test_a_config_section_that_is_no_mapping_or_a_template_nothing_fills_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from refold.cli import main

    scalar = tmp_path / "scalar.yaml"
    scalar.write_text("model: 5\n")  # merged over refold's model section, it dropped RefoldModel
    assert main(["run", "-t", "x", "-c", str(scalar), "-m", "a/b"]) == 2
    assert f"config '{scalar}': 'model' must be a mapping of settings, got 5" in capsys.readouterr().err
    repo, spec = workspace(tmp_path)
    monkeypatch.chdir(repo)
    template = tmp_path / "template.yaml"
    template.write_text('agent:\n  system_template: "{{ nothing_sets_this }}"\n')
    args = ["run", "-t", "x", "-c", str(spec), "-c", str(template), "-y", "--exit-immediately", "-o", str(tmp_path / "o.json")]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.splitlines()[-1] == "refold: error: a prompt template of the config failed: 'nothing_sets_this' is undefined"


def test_shipped_configs_carry_the_protocol() -> None:
    from minisweagent.config import get_config_from_spec

    for name in CONFIGS:
        cfg = get_config_from_spec(str(config_path(name)))
        assert cfg["model"]["model_class"] == "refold.integrations.minisweagent.RefoldModel"
        text = cfg["agent"]["instance_template"] + cfg["agent"]["system_template"]
        assert "{{ refold_response_format }}" in text and "PROGRESS:" in text
        if "textbased" in name:
            assert "mswea_bash_command" not in text and cfg["model"]["action_regex"].startswith("```bash")


def test_switched_off_the_shipped_configs_ask_for_no_protocol_lines() -> None:
    """model.refold.enabled=false is the A/B baseline, yet every shipped template still told the
    agent to open each reply with PROGRESS/STALE lines (its examples and its numbered rules)."""
    from jinja2 import StrictUndefined, Template
    from minisweagent.config import get_config_from_spec

    names = {"system": "Linux", "release": "6", "version": "1", "machine": "x86_64", "task": "T", "cwd": "/"}
    for name in CONFIGS:
        agent = get_config_from_spec(str(config_path(name)))["agent"]
        for enabled, fmt in ((True, response_format_lines(3)), (False, "")):
            values = {**names, "refold_enabled": enabled, "refold_response_format": fmt, "refold_system_section": ""}
            text = "".join(Template(agent[k], undefined=StrictUndefined).render(**values) for k in ("system_template", "instance_template"))
            assert ("PROGRESS" in text and "STALE" in text) is enabled, (name, enabled)


def test_a_config_file_that_is_no_mapping_an_empty_one_and_a_folder_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A YAML list or scalar as a whole config was an AttributeError/TypeError traceback, an empty
    extra config file too; an --output that is a folder ran the agent and then lost the run to an
    IsADirectoryError traceback; a mini config class's error said only '2 validation errors for X'."""
    from refold.cli import main

    monkeypatch.delenv("MSWEA_MODEL_NAME", raising=False)
    for name, text, words in [
        ("list.yaml", "- a\n", "must be a mapping of sections (agent, model, environment), got ['a']"),
        ("num.yaml", "5\n", "must be a mapping of sections (agent, model, environment), got 5"),
    ]:
        spec = tmp_path / name
        spec.write_text(text)
        assert main(["run", "-t", "x", "-c", str(spec), "-m", "a/b"]) == 2
        err = capsys.readouterr().err.strip()
        assert err == f"refold: error: config '{spec}' {words}", err
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    assert main(["run", "-t", "x", "-c", str(empty)]) == 2  # read as no settings: on to the next check
    assert capsys.readouterr().err.strip().startswith("refold: error: no model")
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "model:\n  inner_model_class: minisweagent.models.test_models.DeterministicModel\n"
        "  model_name: deterministic\n  outputs: [a, b]\n"
    )
    assert main(["run", "-t", "x", "-c", str(bad), "-y", "--exit-immediately", "-o", str(tmp_path / "o.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "refold: error: bad configuration: DeterministicModelConfig field 'outputs.0': "
        "Input should be a valid dictionary (and 1 more)"
    ), err
    repo, spec = workspace(tmp_path)
    monkeypatch.chdir(repo)
    folder = tmp_path / "out"
    folder.mkdir()
    assert main(["run", "-t", "x", "-c", str(spec), "-y", "--exit-immediately", "-o", str(folder)]) == 2
    assert capsys.readouterr().err.strip() == f"refold: error: --output {folder} is a folder; give a file name"
    assert list(folder.iterdir()) == []
    # a path mini cannot write ran the agent's first call and then stopped it with a traceback
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    for flag in (["-o", str(blocker / "run.json")], ["-c", f"agent.output_path={blocker / 'run.json'}"]):
        assert main(["run", "-t", "x", "-c", str(spec), "-y", "--exit-immediately", *flag]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"refold: error: cannot write {blocker / 'run.json'}: cannot make folder") and "\n" not in err, err


def test_a_config_file_with_a_yaml_error_says_where(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from refold.cli import main

    bad = tmp_path / "bad.yaml"
    bad.write_text("model:\n  refold:\n    k: 3\n     mask_after: 4\n")
    assert main(["run", "-t", "x", "-c", str(bad), "-m", "a/b"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"refold: error: config '{bad}' is not valid YAML: mapping values are not allowed here (line 4, column 16)"

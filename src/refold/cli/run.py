"""``refold run``: mini-swe-agent on a local task with refold on (a thin layer over ``mini``).

It builds what ``mini -c refold_mini.yaml`` builds (interactive agent, local environment,
RefoldModel) from the shipped config plus the user's ``-c`` specs, then runs the task.
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path
from typing import Annotated, Any

import typer

from ..errors import RefoldError, RunError
from ._output import check_output

SECTIONS = ("agent", "model", "environment", "run")
"""The top-level sections of a mini config (``run`` holds mini's own task and options)."""


def _run(
    task: Annotated[str | None, typer.Option("-t", "--task", help="The task for the agent.")] = None,
    model: Annotated[
        str | None, typer.Option("-m", "--model", help="Model name, e.g. anthropic/claude-sonnet-4-5.")
    ] = None,
    config: Annotated[
        list[str] | None,
        typer.Option(
            "-c", "--config", help="Extra mini config files or key=value specs, merged over refold's config."
        ),
    ] = None,
    text: Annotated[
        bool, typer.Option("--text", help="Text-based ```bash actions instead of tool calls.")
    ] = False,
    k: Annotated[
        int | None, typer.Option("-k", help="Boundary step k (policy field; default from the config).")
    ] = None,
    yolo: Annotated[bool, typer.Option("-y", "--yolo", help="Run commands without confirmation.")] = False,
    exit_immediately: Annotated[
        bool, typer.Option("--exit-immediately", help="Do not ask before finishing.")
    ] = False,
    output: Annotated[
        Path | None, typer.Option("-o", "--output", help="Where to save the trajectory.")
    ] = None,
    print_config: Annotated[
        str | None,
        typer.Option(
            "--print-config",
            help="Print the path of a shipped config (mini, mini_textbased, swebench, swebench_textbased) and exit.",
        ),
    ] = None,
) -> None:
    """Run mini-swe-agent on a local task with refold rendering its context."""
    from ..integrations import config_path

    if print_config is not None:
        try:
            typer.echo(str(config_path(print_config)))
        except ValueError as e:
            raise RunError(str(e)) from None
        return
    if not task or not task.strip():
        raise RunError("no task: pass one with -t/--task")
    os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")
    try:
        from minisweagent.config import get_config_from_spec
        from minisweagent.utils.serialize import recursive_merge
    except ImportError:
        raise RunError(
            "mini-swe-agent is not installed; install it with: pip install 'refold[mini]'"
        ) from None
    if output is not None and output.is_dir():  # mini writes it after every step: the run would be lost
        raise RunError(f"--output {output} is a folder; give a file name")
    specs = [str(config_path("mini_textbased" if text else "mini")), *(config or [])]
    configs = []
    for spec in specs:
        try:
            loaded = get_config_from_spec(spec)
        except FileNotFoundError:  # mini's message lists the same path five times
            raise RunError(f"config '{spec}': no such file (nor one in mini's config folders)") from None
        except ValueError as e:
            raise RunError(f"config '{spec}': {e}") from None
        except Exception as e:  # yaml errors: the problem and where (line and column, 1-based)
            mark = getattr(e, "problem_mark", None)
            where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
            raise RunError(f"config '{spec}' is not valid YAML: {str(e).splitlines()[0]}{where}") from None
        if loaded is None:  # an empty file sets nothing
            loaded = {}
        if not isinstance(loaded, dict):
            raise RunError(f"config '{spec}' must be a mapping of sections (agent, model, environment), got {loaded!r:.40}")
        configs.append(loaded)
    overrides: dict[str, Any] = {"agent": {}, "model": {}}
    if model:
        overrides["model"]["model_name"] = model
    if k is not None:
        overrides["model"]["refold"] = {"k": k}
    if yolo:
        overrides["agent"]["mode"] = "yolo"
    if exit_immediately:
        overrides["agent"]["confirm_exit"] = False
    if output is not None:
        overrides["agent"]["output_path"] = str(output)
    for spec, cfg in zip(specs, configs, strict=True):
        for key in cfg:  # a misspelled section ("modle:") is ignored by mini: its settings silently off
            if key not in SECTIONS:
                close = difflib.get_close_matches(str(key), SECTIONS, n=1)
                hint = f"; did you mean '{close[0]}'?" if close else ""
                raise RunError(f"config '{spec}': unknown section '{key}'{hint} (sections: {', '.join(SECTIONS)})")
        for section in ("agent", "model", "environment"):  # merging a scalar over a section drops refold's
            if section in cfg and not isinstance(cfg[section], dict):
                raise RunError(f"config '{spec}': '{section}' must be a mapping of settings, got {cfg[section]!r:.40}")
    merged = recursive_merge(*configs, overrides)
    if not merged.setdefault("agent", {}).get("output_path"):  # a config's own output_path was overridden
        merged["agent"]["output_path"] = str(_default_output())
    _check_trajectory_path(Path(str(merged["agent"]["output_path"])).expanduser(), "--output" if output else "agent.output_path")
    result = run_task(merged, task)
    typer.echo(f"exit status: {result.get('exit_status', '')}; trajectory: {merged['agent']['output_path']}")


def _check_trajectory_path(path: Path, flag: str) -> None:
    """mini makes the folder and writes the trajectory after every step: a path it cannot write
    (a file where its folder should be, /proc, a full disk) was a traceback after the first call."""
    if path.is_dir():
        raise RunError(f"{flag} {path} is a folder; give a file name")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise RunError(f"cannot write {path}: cannot make folder {path.parent} ({e.strerror or e})") from None
    check_output(path, flag)


def _default_output() -> Path:
    from minisweagent import global_config_dir

    return Path(global_config_dir) / "last_refold_run.traj.json"


def run_task(config: dict[str, Any], task: str) -> dict[str, Any]:
    """Build mini's model, local environment and interactive agent from ``config``; run ``task``."""
    from minisweagent.agents import get_agent
    from minisweagent.environments import get_environment
    from minisweagent.models import get_model
    from pydantic import ValidationError

    model_config = config.get("model", {})
    if not (model_config.get("model_name") or os.getenv("MSWEA_MODEL_NAME")):
        raise RunError("no model: pass -m/--model, set model.model_name in a config, or MSWEA_MODEL_NAME")
    try:
        model = get_model(config=model_config)
        env = get_environment(config.get("environment", {}), default_type="local")
        agent = get_agent(model, env, config.get("agent", {}), default_type="interactive")
    except RefoldError:
        raise
    except ValidationError as e:  # a mini config class: name the field, not "2 validation errors for X"
        err = e.errors()[0]
        where = ".".join(str(p) for p in err.get("loc", ())) or e.title
        more = f" (and {e.error_count() - 1} more)" if e.error_count() > 1 else ""
        raise RunError(f"bad configuration: {e.title} field '{where}': {err.get('msg')}{more}") from None
    except (ValueError, TypeError) as e:
        raise RunError(f"bad configuration: {str(e).splitlines()[0]}") from None
    from jinja2.exceptions import TemplateError

    try:
        result: dict[str, Any] = agent.run(task)
    except TemplateError as e:  # a template of the config names a variable nothing sets
        raise RunError(f"a prompt template of the config failed: {str(e).splitlines()[0]}") from None
    except Exception as e:  # a wrong key or model name was litellm's whole traceback
        if type(e).__module__.split(".")[0] not in _MODEL_CLIENTS:
            raise
        first = next((ln.strip() for ln in str(e).splitlines() if ln.strip()), "")
        where = config.get("agent", {}).get("output_path")
        raise RunError(
            f"the model call failed: {type(e).__name__}: {first[:300]}" + (f" (the run so far: {where})" if where else "")
        ) from None
    return result


_MODEL_CLIENTS = frozenset({"litellm", "openai", "anthropic", "httpx", "httpcore", "requests"})
"""Where a model call's errors come from (mini saved the run before re-raising them)."""


def register(app: typer.Typer) -> None:
    app.command("run", help="Run mini-swe-agent on a local task with refold on.")(_run)

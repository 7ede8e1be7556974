"""Shared fixtures: paths to the real recorded runs shipped with the tests, the CLI in-process; and
the suite's speed settings (shared SSL contexts, a frozen heap after collection, litellm offline)."""

from __future__ import annotations

import contextlib
import functools
import gc
import io
import os
import ssl
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

DATA = Path(__file__).parent / "data"

# before any test module imports litellm (through mini): its model cost map from the package, not a
# download with retries whose cost depends on which module a worker happens to import first
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")


def real_trajectories() -> list[Path]:
    """Real recorded runs shipped in the repo (tests/data and the package's demo run)."""
    files = sorted(p for p in DATA.iterdir() if ".traj" in p.name)
    demo = resources.files("refold") / "data" / "django__django-11477.traj.json.gz"
    return [*files, Path(str(demo))]


@pytest.fixture
def data_dir() -> Path:
    return DATA


@dataclass(frozen=True)
class CliResult:
    """What ``refold ARGS`` did: exit status and output (named like subprocess.CompletedProcess)."""

    returncode: int
    stdout: str
    stderr: str


def run_cli(*args: str, cwd: Path | None = None) -> CliResult:
    """``refold ARGS`` in this process: the real entry point ``refold.cli.main`` (parsing, one-line
    errors, exit codes) without the cost of a new interpreter per call."""
    from refold.cli import main

    out, err = io.StringIO(), io.StringIO()
    where = contextlib.chdir(cwd) if cwd is not None else contextlib.nullcontext()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), where:
        code = main(list(args))
    return CliResult(code, out.getvalue(), err.getvalue())


def _share_tls_contexts() -> None:
    """Every httpx or openai client builds an SSL context, parsing the whole CA bundle (~30 ms of CPU);
    the suite builds hundreds and never speaks TLS (every server is loopback http). One context per
    set of arguments, shared, makes each client cheap."""
    original = ssl.create_default_context
    if getattr(original, "shared_by_tests", False):
        return
    made: dict[tuple[Any, ...], ssl.SSLContext] = {}

    @functools.wraps(original)
    def shared(
        purpose: ssl.Purpose = ssl.Purpose.SERVER_AUTH,
        *,
        cafile: str | None = None,
        capath: str | None = None,
        cadata: str | bytes | None = None,
    ) -> ssl.SSLContext:
        key = (purpose, cafile, capath, cadata)
        if key not in made:
            made[key] = original(purpose, cafile=cafile, capath=capath, cadata=cadata)
        return made[key]

    shared.shared_by_tests = True  # type: ignore[attr-defined]
    ssl.create_default_context = shared


def pytest_configure(config: pytest.Config) -> None:
    _share_tls_contexts()


def pytest_collection_finish(session: pytest.Session) -> None:
    """Collection imported every test module and what they use (litellm, anthropic, openai, mini,
    pydantic models: ~600k objects). Freezing them keeps every later full collection, automatic or
    pytest's five at exit, from walking that heap again (~0.35 s each)."""
    gc.freeze()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Under CI a skipped test is a failure: CI installs chromium and redis-server, so a skip there
    means a check silently did not run."""
    if not os.environ.get("CI"):
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = reporter.stats.get("skipped", []) if reporter is not None else []
    if skipped and exitstatus == 0:
        reporter.write_line(f"CI: {len(skipped)} test(s) skipped; failing the run (see -rs for reasons)", red=True)
        session.exitstatus = 1

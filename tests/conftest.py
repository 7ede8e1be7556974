"""Shared fixtures: paths to the real recorded runs shipped with the tests, the CLI in-process; and
the suite's speed settings (shared SSL contexts, a frozen heap after collection, litellm offline,
litellm and the anthropic SDK imported on first use, files that share a costly setup on one worker)."""

from __future__ import annotations

import contextlib
import functools
import gc
import importlib.util
import io
import os
import ssl
import sys
import threading
import types
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

DATA = Path(__file__).parent / "data"

# No per-example deadline (a timed assertion that fails on a loaded box; the tests that set their
# own settings already say deadline=None). Under CI hypothesis loads its own "ci" profile, which
# also has no deadline, no example database and a fixed seed; every test keeps its examples.
if not os.environ.get("CI"):
    settings.register_profile("refold", deadline=None)
    settings.load_profile("refold")

# before any test module imports litellm (through mini): its model cost map from the package, not a
# download with retries whose cost depends on which module a worker happens to import first
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")
# litellm's aiohttp transport raises in __del__ at interpreter exit ("Exception ignored ... isinstance()"),
# noise after every run that imported it; its httpx transport has no such destructor
os.environ.setdefault("DISABLE_AIOHTTP_TRANSPORT", "True")


class _LoadsOnFirstUse(types.ModuleType):
    """A module not yet executed: reading any attribute but those its spec gave it (which ``import``
    statements, ``importorskip`` and hypothesis look at) runs it in place, so every reference
    already bound to it, monkeypatching included, is the real module afterwards."""

    def __getattribute__(self, attr: str) -> Any:
        if attr in _SET_BEFORE_RUNNING:
            return super().__getattribute__(attr)
        if attr in ("__test__", "__bases__"):  # pytest probes every name in a test module; no module has these
            raise AttributeError(attr)
        with _LOADING:
            if type(self) is _LoadsOnFirstUse:
                self.__class__ = types.ModuleType  # noqa: B009 - from here on a plain module
                spec = self.__spec__
                assert spec is not None and spec.loader is not None
                try:
                    spec.loader.exec_module(self)
                except BaseException:
                    sys.modules.pop(spec.name, None)
                    raise
        return getattr(self, attr)


_LOADING = threading.RLock()
# what module_from_spec set (minus __path__: importing a submodule runs the package first)
_SET_BEFORE_RUNNING = {"__name__", "__spec__", "__loader__", "__class__", "__file__", "__cached__", "__package__"}


def _import_on_first_use(name: str) -> None:
    """Put ``name`` in sys.modules as a module that runs when one of its attributes is first read.
    Both xdist workers import every test module to collect; litellm (~6 s of CPU) and the
    anthropic SDK (~2.4 s) then load only in the worker whose tests use them (see ``GROUPS``). A
    missing package is left alone: ``importorskip`` skips as before."""
    if name in sys.modules:
        return
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    module.__class__ = _LoadsOnFirstUse
    sys.modules[name] = module


for _name in ("litellm", "anthropic"):
    _import_on_first_use(_name)

# Test files that share a costly one-time setup, each set run by one xdist worker (--dist loadfile
# otherwise gives each file to whichever worker is free): litellm through mini, the anthropic SDK,
# the fork server of refold serve. Files not listed are scheduled alone.
GROUPS = {
    "litellm": [
        "test_context_surfaces.py", "test_minisweagent_context.py", "test_minisweagent_e2e.py",
        "test_minisweagent_errors.py", "test_minisweagent_units.py", "test_sessions_pins_mini.py",
        "test_proxy_clients.py",
    ],
    "anthropic-sdk": ["test_proxy_anthropic.py", "test_proxy_surface_stream.py", "test_proxy_anthropic_rounds.py"],
    "serve-processes": ["test_proxy_durability.py", "test_proxy_span_restart.py", "test_proxy_responses_store.py"],
}  # fmt: skip
_GROUP_OF = {file: group for group, files in GROUPS.items() for file in files}
# The longest files (CPU and waits per file, benchmarks/results/suite.txt), longest first: handed
# out right after the groups, so that what is left to even out the two workers at the end is the
# many short files. Alphabetical order put the browser and property files last: one worker then
# ran them alone for their whole length. A file missing here is only scheduled later.
LONGEST = [
    "test_viewer_browser.py", "test_properties.py", "test_spans.py", "test_proxy_store.py", "test_cli.py",
    "test_proxy_fuzz.py", "test_proxy_responses_rounds.py", "test_layout.py", "test_render_splice.py",
    "test_proxy_stream_guard.py", "test_cache.py", "test_proxy_validate.py", "test_loaders.py",
    "test_viewer_pins_browser.py", "test_proxy_stream_early.py", "test_viewer.py", "test_policy_settings.py",
    "test_replay_bill.py", "test_proxy_responses.py", "test_minisweagent_run.py", "test_stream_broken.py",
    "test_replay.py", "test_render_golden.py", "test_objects.py", "test_proxy_errors.py",
]  # fmt: skip


def _order(scope: str) -> tuple[int, int]:
    """Where a unit of work goes in the queue: the groups, then ``LONGEST`` in its order, then the rest."""
    if scope.startswith("group:"):
        return 0, list(GROUPS).index(scope[len("group:") :])
    name = scope.rsplit("/", 1)[-1]
    return (1, LONGEST.index(name)) if name in LONGEST else (2, 0)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """--dist loadfile, with the files of one ``GROUPS`` entry as one unit of work; the groups and
    then the ``LONGEST`` files are handed out first."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class GroupedFiles(LoadFileScheduling):
        ordered = False

        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            group = _GROUP_OF.get(path.rsplit("/", 1)[-1])
            return f"group:{group}" if group else path

        def _assign_work_unit(self, node: Any) -> None:
            # the largest units first (see LONGEST); a stable sort keeps the rest in file order
            if not self.ordered:
                self.ordered = True
                for scope in sorted(self.workqueue, key=_order):
                    self.workqueue.move_to_end(scope)
            super()._assign_work_unit(node)

    return GroupedFiles(config, log)


def real_trajectories() -> list[Path]:
    """Real recorded runs shipped in the repo (tests/data and the package's demo run)."""
    files = sorted(p for p in DATA.iterdir() if ".traj" in p.name)
    demo = resources.files("refold") / "data" / "django__django-11477.traj.json.gz"
    return [*files, Path(str(demo))]


@pytest.fixture
def data_dir() -> Path:
    return DATA


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One headless Chromium per test file; each test opens its own context or page in it. Not one
    per session: Playwright's sync API keeps an event loop running in this thread while it is
    open, and later tests on the same worker call asyncio.run."""
    from playwright.sync_api import sync_playwright

    from fake_upstream import CHROMIUM, CHROMIUM_ARGS

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


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
    """Collection imported every test module and what they use (openai, mini, pydantic models:
    ~600k objects). Freezing them keeps every later full collection, automatic or pytest's five
    at exit, from walking that heap again (~0.35 s each).

    The tests then build long-lived caches, servers and fixtures of their own: with the default
    thresholds a worker spent about 20 s of its ~100 in the collector, 15 s of it in full
    collections of that growing heap. A full collection once per 1,000 middle ones (not 10) keeps
    young-generation cycles collected as usual and cut the collector to about 9 s a worker; the
    one collection at exit (not pytest's five) is enough to report an unraisable exception."""
    gc.freeze()
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, 1000)
    try:
        from _pytest.unraisableexception import gc_collect_iterations_key
    except ImportError:  # a pytest without the key collects as it likes
        return
    session.config.stash[gc_collect_iterations_key] = 1


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


@pytest.fixture(scope="module")
def upstream() -> Iterator[tuple[Any, str]]:
    """A ``FakeUpstream`` on loopback for the module's tests, and its ``/v1`` base URL (a test file
    may define its own ``upstream``)."""
    from fake_upstream import FakeUpstream, ServerThread

    fake = FakeUpstream()
    with ServerThread(fake.app) as up:
        yield fake, f"{up.url}/v1"


@pytest.fixture()
def scripted() -> Iterator[tuple[Any, str]]:
    """A ``Scripted`` streaming upstream on loopback and its ``/v1`` base URL; released at the end,
    so a reply still paused does not hold its server thread."""
    from fake_upstream import Scripted, ServerThread

    s = Scripted()
    with ServerThread(s.app) as srv:
        yield s, f"{srv.url}/v1"
    s.release.set()


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    """A redis-server of the module's own (a test file may define its own ``redis_url``)."""
    from fake_upstream import redis_server

    with redis_server() as url:
        yield url


@pytest.fixture(params=["sqlite", "redis"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Each proxy store kind in turn: a SQLite file, then a redis URL."""
    if request.param == "sqlite":
        return str(tmp_path / "s.db")
    url: str = request.getfixturevalue("redis_url")
    return url

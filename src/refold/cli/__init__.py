"""The command line: the only layer that prints or sets an exit status.

``main(argv) -> int`` runs one command and returns its exit status (the console script and
``python -m refold`` pass it to ``sys.exit``). Each subcommand lives in ``refold.cli.<name>`` and
registers itself with ``register(app)``. User mistakes (RefoldError, bad paths, bad options)
print one line to stderr and return 2; they never show a traceback.
"""

from __future__ import annotations

import errno
import importlib
import importlib.util
import sys
from typing import Any

import typer
import typer.main
from typer.core import TyperCommand, TyperGroup

from ..errors import RefoldError

COMMAND_MODULES = ("demo", "replay", "view", "run", "serve", "simulate", "sessions")
# What ``refold --help`` lists, so that it imports no command module (``test_cli`` checks each
# against the command's own help). A command missing here is imported for the listing.
COMMAND_HELP = {
    "demo": "Replay a real recorded agent run (shipped in the package): base vs refold, per call and in total.",
    "replay": "Re-render every model call of recorded runs under several policies and compare them.",
    "view": "Write a single offline HTML report: history vs prompt at every call, charts, mechanism switches.",
    "run": "Run mini-swe-agent on a local task with refold on.",
    "serve": "Serve an OpenAI-compatible proxy that renders folded prompts (sessions are durable).",
    "simulate": "Simulate w agent sessions sharing one vLLM server under each policy (SIMULATED).",
    "sessions": "The proxy's sessions and saved mini runs: list, show, expand, pin, unpin, prune.",
}
# Packages a command's module imports: missing ones make the listing say which extra to install.
NEEDS = {"serve": ("fastapi", "uvicorn", "httpx", "prometheus_client")}
EXTRAS = {
    "fastapi": "serve",
    "uvicorn": "serve",
    "httpx": "serve",
    "redis": "serve",
    "prometheus_client": "serve",
    "minisweagent": "mini",
}
"""Optional dependencies -> the extra that installs them (``pip install 'refold[serve]'``)."""


def load_command(name: str) -> typer.Typer:
    """A Typer app holding the one command ``refold.cli.<name>`` registers (or its 'not installed')."""
    sub = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    try:
        module = importlib.import_module(f"refold.cli.{name}")
    except ModuleNotFoundError as e:
        missing = (e.name or "").split(".")[0]
        if missing not in EXTRAS:
            raise
        _register_missing(sub, name, missing, EXTRAS[missing])
    else:
        module.register(sub)
    return sub


def _register_missing(app: typer.Typer, command: str, package: str, extra: str) -> None:
    """A command whose optional dependencies are not installed explains how to get them."""

    def unavailable() -> None:
        raise RefoldError(f"'refold {command}' needs {package}: pip install 'refold[{extra}]'")

    app.command(
        command,
        help=f"Not installed: needs the '{extra}' extra.",
        add_help_option=False,
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    )(unavailable)


def _installed(module: str) -> bool:
    """Whether ``module`` can be imported, without importing it."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


class _LazyGroup(TyperGroup):
    """Imports a command's module only when that command runs or shows its own help."""

    def list_commands(self, ctx: Any) -> list[str]:
        return list(COMMAND_MODULES)

    def _load(self, name: str) -> Any:
        if name not in self.commands:
            cmd = typer.main.get_command(load_command(name))
            cmd.name = name
            self.add_command(cmd, name)
        return self.commands[name]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name in self.commands or cmd_name not in COMMAND_MODULES:
            return self.commands.get(cmd_name)
        if cmd_name in COMMAND_HELP:  # a stand-in for the listing
            missing = [m for m in NEEDS.get(cmd_name, ()) if not _installed(m)]
            if missing:
                return TyperCommand(cmd_name, help=f"Not installed: needs the '{EXTRAS[missing[0]]}' extra.")
            return TyperCommand(cmd_name, help=COMMAND_HELP[cmd_name])
        return self._load(cmd_name)

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        """Each command's whole first line, wrapped (click would cut it at the terminal's width)."""
        rows = []
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                rows.append((name, (cmd.help or "").split("\n\n")[0].strip()))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        if args and args[0] in COMMAND_MODULES:
            self._load(args[0])
        return super().resolve_command(ctx, args)


app = typer.Typer(
    name="refold",
    cls=_LazyGroup,
    help="Render shorter prompts from an agent's full history: dedup, STALE folding, restore.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # plain click formatting: rich's help renderer (rich.markdown, pygments) is most of what
    # `refold --help` would import (0.24 s of 0.7 s); each command's own --help keeps it
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},  # every command inherits -h
)


def _version(show: bool) -> None:
    if show:
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"refold {version('refold')}")
        except PackageNotFoundError:  # run from a source tree (PYTHONPATH=src), not installed
            typer.echo("refold (not installed: no version)")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", help="Print refold's version and exit.", is_eager=True, callback=_version),
) -> None:
    """Render shorter prompts from an agent's full history: dedup, STALE folding, restore."""


# The click that typer uses (typer >= 0.25 vendors its own copy): its usage-error classes.
_click = sys.modules[typer.BadParameter.__module__]
_NO_ARGS_IS_HELP: tuple[type[BaseException], ...] = tuple(
    c for c in (getattr(_click, "NoArgsIsHelpError", None),) if c is not None
)
_ABORT: tuple[type[BaseException], ...] = tuple(
    {KeyboardInterrupt, typer.Abort, getattr(_click, "Abort", typer.Abort)}
)


def main(argv: list[str] | None = None) -> int:
    """Run ``refold`` with ``argv`` (default: ``sys.argv[1:]``); return the exit status."""
    try:
        rv = app(args=argv, prog_name="refold", standalone_mode=False)
    except RefoldError as e:
        return _fail(str(e), 2)
    except _NO_ARGS_IS_HELP as e:  # bare ``refold``: the help, as before
        ctx = getattr(e, "ctx", None)
        typer.echo(ctx.get_help() if ctx else str(e))
        return 2
    except _click.UsageError as e:  # bad option values, missing arguments, unknown commands
        hint = f" (see '{e.ctx.command_path} --help')" if e.ctx else ""
        return _fail(" ".join(e.format_message().split()) + hint, e.exit_code)
    except _click.ClickException as e:
        return _fail(" ".join(e.format_message().split()), e.exit_code)
    except _ABORT:
        return _fail("interrupted", 130)
    except OSError as e:
        if e.errno != errno.EPIPE:
            raise
        return 1  # the reader of our output went away (``refold replay ... | head``)
    if rv == 130:  # typer turns Ctrl-C into Exit(130)
        return _fail("interrupted", 130)
    return rv if isinstance(rv, int) else 0


def _fail(message: str, code: int) -> int:
    typer.echo(f"refold: error: {message}" if code != 130 else f"refold: {message}", err=True)
    return code

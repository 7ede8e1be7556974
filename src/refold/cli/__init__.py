"""The command line: the only layer that prints or sets an exit status.

``main(argv) -> int`` runs one command and returns its exit status (the console script and
``python -m refold`` pass it to ``sys.exit``). Each subcommand lives in ``refold.cli.<name>`` and
registers itself with ``register(app)``. User mistakes (RefoldError, bad paths, bad options)
print one line to stderr and return 2; they never show a traceback.
"""

from __future__ import annotations

import errno
import importlib
import sys

import typer

from ..errors import RefoldError

app = typer.Typer(
    name="refold",
    help="Render shorter prompts from an agent's full history: dedup, STALE folding, restore.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

COMMAND_MODULES = ("demo", "replay", "view", "run", "serve", "simulate", "sessions")
EXTRAS = {
    "fastapi": "serve",
    "uvicorn": "serve",
    "httpx": "serve",
    "redis": "serve",
    "prometheus_client": "serve",
    "minisweagent": "mini",
}
"""Optional dependencies -> the extra that installs them (``pip install 'refold[serve]'``)."""


def _register() -> None:
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(f"refold.cli.{name}")
        except ModuleNotFoundError as e:
            missing = (e.name or "").split(".")[0]
            if missing not in EXTRAS:
                raise
            _register_missing(name, missing, EXTRAS[missing])
            continue
        module.register(app)


def _register_missing(command: str, package: str, extra: str) -> None:
    """A command whose optional dependencies are not installed explains how to get them."""

    def unavailable() -> None:
        raise RefoldError(f"'refold {command}' needs {package}: pip install 'refold[{extra}]'")

    app.command(
        command,
        help=f"Not installed: needs the '{extra}' extra.",
        add_help_option=False,
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    )(unavailable)


_register()

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

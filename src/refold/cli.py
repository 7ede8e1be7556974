"""The command line: the only layer that prints or exits.

Each subcommand lives in ``refold.commands.<name>`` and registers itself with ``register(app)``.
User mistakes (RefoldError, bad paths, bad options) print one line to stderr and exit 2; they
never show a traceback.
"""

from __future__ import annotations

import errno
import importlib
import sys

import typer

from .errors import RefoldError

app = typer.Typer(
    name="refold",
    help="Render shorter prompts from an agent's full history: dedup, STALE folding, restore.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

COMMAND_MODULES = ("demo", "replay", "view", "run", "serve", "simulate")


def _register() -> None:
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(f"refold.commands.{name}")
        except ModuleNotFoundError as e:
            if e.name == f"refold.commands.{name}":
                continue  # not built yet in this checkout
            raise
        module.register(app)


_register()

# The click that typer uses (typer >= 0.25 vendors its own copy): its usage-error classes.
_click = sys.modules[typer.BadParameter.__module__]
_NO_ARGS_IS_HELP: tuple[type[BaseException], ...] = tuple(
    c for c in (getattr(_click, "NoArgsIsHelpError", None),) if c is not None
)


def main() -> None:
    try:
        rv = app(standalone_mode=False)
    except RefoldError as e:
        _fail(str(e), 2)
    except _NO_ARGS_IS_HELP as e:  # bare ``refold``: the help, as before
        ctx = getattr(e, "ctx", None)
        typer.echo(ctx.get_help() if ctx else str(e))
        sys.exit(2)
    except _click.UsageError as e:  # bad option values, missing arguments, unknown commands
        hint = f" (see '{e.ctx.command_path} --help')" if e.ctx else ""
        _fail(" ".join(e.format_message().split()) + hint, e.exit_code)
    except _click.ClickException as e:
        _fail(" ".join(e.format_message().split()), e.exit_code)
    except (KeyboardInterrupt, _click.Abort, typer.Abort):
        _fail("interrupted", 130)
    except OSError as e:
        if e.errno != errno.EPIPE:
            raise
        sys.exit(1)  # the reader of our output went away (``refold replay ... | head``)
    if rv == 130:  # typer turns Ctrl-C into Exit(130)
        _fail("interrupted", 130)
    sys.exit(rv if isinstance(rv, int) else 0)


def _fail(message: str, code: int) -> None:
    typer.echo(f"refold: error: {message}" if code != 130 else f"refold: {message}", err=True)
    sys.exit(code)

"""The command line: the only layer that prints or exits.

Each subcommand lives in ``refold.commands.<name>`` and registers itself with ``register(app)``.
User mistakes (RefoldError, bad paths, bad options) print one line to stderr and exit 2; they
never show a traceback.
"""

from __future__ import annotations

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

COMMAND_MODULES = ("demo", "replay", "view", "run", "serve")


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


def main() -> None:
    try:
        app()
    except RefoldError as e:
        typer.echo(f"refold: error: {e}", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        typer.echo("refold: interrupted", err=True)
        sys.exit(130)

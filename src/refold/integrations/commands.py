"""Context commands answered from the history instead of the environment.

A reply's action that parses as a context command (``refold.protocol.parse_command``) and has a
registered handler never reaches the environment: the handler answers it from the history.
``restore`` is built in; the other commands (begin_span, fold_span, fold, drop, expand,
search_ledger) get a handler when someone registers one, either in code::

    from refold.integrations.commands import register
    register("fold_span", my_handler)

or by configuration (``refold_commands: {fold_span: my.module.handler}`` in the model config).
A name without a handler is an ordinary shell command (``expand`` is also a coreutils tool).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import PolicyError
from ..history import History
from ..policy import Policy
from ..protocol import ContextCommand, parse_command, parse_restore_args
from ..render import restore_text


@dataclass(frozen=True, slots=True)
class CommandContext:
    """What a handler may read: the history before the step that issued the command."""

    history: History
    policy: Policy
    step: int  # the step issuing the command (len(history) + 1)


@dataclass(frozen=True, slots=True)
class CommandResult:
    """The observation text, and fields for the observation's ``extra`` (read back by History)."""

    text: str
    extra: dict[str, Any] = field(default_factory=dict)


Handler = Callable[[ContextCommand, CommandContext], CommandResult]


def restore(command: ContextCommand, ctx: CommandContext) -> CommandResult:
    """``restore 3`` / ``restore 3 5`` / ``restore 3-5``: the steps as first shown, byte-exact."""
    steps, error = parse_restore_args(command.argument, len(ctx.history))
    if error is not None:
        return CommandResult(error, {"refold_command": "restore", "refold_error": True})
    text = restore_text(ctx.history, steps, ctx.policy)
    extra: dict[str, Any] = {"refold_command": "restore"}
    if ctx.policy.reversible:
        extra["restore_of"] = steps  # marks the step as a restore for History and the renderer
    return CommandResult(text, extra)


_REGISTRY: dict[str, Handler] = {"restore": restore}


def register(name: str, handler: Handler) -> None:
    """Answer context command ``name`` with ``handler`` in every wrapper created afterwards."""
    _REGISTRY[name] = handler


def registered() -> dict[str, Handler]:
    return dict(_REGISTRY)


def resolve_handlers(spec: Mapping[str, str | None] | None) -> dict[str, Handler]:
    """The registry, overridden by a config mapping of name -> dotted path (null switches one off)."""
    handlers = registered()
    for name, path in (spec or {}).items():
        if path is None or path == "":
            handlers.pop(name, None)
            continue
        handlers[name] = _import(name, path)
    return handlers


def _import(name: str, path: str) -> Handler:
    module_name, _, attr = path.rpartition(".")
    try:
        obj = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError, ValueError) as e:
        raise PolicyError(f"refold_commands.{name}: cannot import handler '{path}' ({e})") from None
    if not callable(obj):
        raise PolicyError(f"refold_commands.{name}: '{path}' is not callable")
    handler: Handler = obj
    return handler


def match(command: str, handlers: Mapping[str, Handler]) -> ContextCommand | None:
    """The context command an action is, if a handler answers it; else None (run it in the shell)."""
    parsed = parse_command(command)
    if parsed is None or parsed.name not in handlers:
        return None
    return parsed

"""Context commands answered from the history instead of the environment.

A reply's action that is a context command (``refold.context_commands.intercept`` for a shell
command, or a call of one of the ``TOOL_SCHEMAS`` function tools) and has a registered handler
never reaches the environment: the handler answers it from the history. Every context command
(restore, begin_span, fold_span, fold, drop, expand, search_ledger) is registered by default with
``dispatch``, which answers through ``refold.context_commands.answer_command`` with the span and
ledger policies of the wrapper, so answers and rendering agree. Handlers can be replaced in code::

    from refold.integrations.commands import register
    register("fold_span", my_handler)

or by configuration (``refold_commands: {fold_span: my.module.handler}`` in the model config;
``null`` switches one off: that name is then an ordinary shell command). ``fold -w 80 f`` and
``expand -t 4 f`` (coreutils, arguments that are not ids) always run in the shell.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..context_commands import answer_command, command_from_tool_call, intercept
from ..errors import PolicyError
from ..history import History
from ..mechanisms.ledger import DEFAULT_LEDGER, LedgerPolicy
from ..mechanisms.spans import DEFAULT_SPANS, SpanPolicy
from ..policy import Policy
from ..protocol import COMMAND_NAMES, ContextCommand, parse_restore_args
from ..restore import restore_text


@dataclass(frozen=True, slots=True)
class CommandContext:
    """What a handler may read: the history before the step that issued the command."""

    history: History
    policy: Policy
    step: int  # the step issuing the command (len(history) + 1)
    spans: SpanPolicy = DEFAULT_SPANS
    ledger: LedgerPolicy = DEFAULT_LEDGER


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


def dispatch(command: ContextCommand, ctx: CommandContext) -> CommandResult:
    """Any context command, answered by ``refold.context_commands`` with the context's policies."""
    answer = answer_command(ctx.history, command, ctx.policy, spans=ctx.spans, ledger=ctx.ledger, t=ctx.step - 1)
    return CommandResult(answer.text, {"refold_command": command.name, **answer.meta})


_REGISTRY: dict[str, Handler] = dict.fromkeys(COMMAND_NAMES, dispatch)


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


def match(command: str, handlers: Mapping[str, Handler], tool: str = "bash") -> ContextCommand | None:
    """The context command an action is, if a handler answers it; else None (run it in the shell).

    ``tool`` is the function the model called: a context tool (``fold_span``) with its JSON
    arguments, or the shell, where coreutils ``fold``/``expand`` with file arguments pass through.
    """
    parsed = command_from_tool_call(tool, command) if tool in COMMAND_NAMES else intercept(command)
    if parsed is None or parsed.name not in handlers:
        return None
    return parsed

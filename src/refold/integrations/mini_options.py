"""The refold settings of a mini model config: sections parsed with one-line errors, and custom
context-command handlers resolved by dotted path (mini-swe-agent's way of naming classes)."""

from __future__ import annotations

import difflib
import functools
import importlib
from collections.abc import Callable, Mapping
from typing import Any, ParamSpec, TypeVar

from pydantic import BaseModel, ValidationError

from ..context.answers import Handler
from ..errors import PolicyError, RefoldError
from ..protocol import COMMAND_NAMES

_M = TypeVar("_M", bound=BaseModel)
_P = ParamSpec("_P")


def usage_errors(init: Callable[_P, None]) -> Callable[_P, None]:
    """A model's ``__init__`` whose config errors mini's command line shows as its one line: mini
    builds the model inside its typer command, which printed any other exception as a 45-line
    traceback before the line (``-c model.refold.k=abc``)."""

    @functools.wraps(init)
    def wrapped(*args: _P.args, **kwargs: _P.kwargs) -> None:
        try:
            init(*args, **kwargs)
        except RefoldError as e:
            raise _as_usage_error(e) from None

    return wrapped


def _click_errors() -> tuple[type, ...]:
    """The ClickException classes a typer command line prints as one line: typer 0.29+ vendors
    its own click (found through its public ``BadParameter``), older ones use click's."""
    found: list[type] = []
    try:
        import typer

        found += [c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException"]
    except ImportError:
        pass
    try:
        import click

        found.append(click.ClickException)
    except ImportError:
        pass
    return tuple(dict.fromkeys(found))


def _as_usage_error(e: RefoldError) -> RefoldError:
    """``e``, also a click error (typer prints its message, exit status 1); still a ``type(e)``
    for a caller that catches it (``refold run``, tests, a batch runner)."""
    bases = _click_errors()
    if not bases:  # no command line that would print it differently
        return e
    kind = type(type(e).__name__, (type(e), *bases), {"__module__": type(e).__module__})
    out: BaseException = Exception.__new__(kind)  # no __init__: the error is already built, its fields are copied
    assert isinstance(out, RefoldError)
    vars(out).update(e.__dict__, message=str(e), show_color=None)  # what click's printing reads
    out.args = e.args
    return out


def mapping(key: str, value: Any) -> dict[str, Any]:
    """A config section (``refold``, ``refold_spans``, ...): a mapping of fields, or null for none."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise PolicyError(f"{key} must be a mapping of fields, not {_brief(value)}")
    return dict(value)


def flag(key: str, value: Any) -> bool:
    """A true/false option (``refold_context_tools``): 'maybe' is no boolean, and no silent true."""
    if not isinstance(value, bool):
        raise PolicyError(f"{key} must be true or false, not {_brief(value)}")
    return value


def text(key: str, value: Any) -> str | None:
    """An option naming something (a tokenizer, a file): a string, or null for off."""
    if value is not None and not isinstance(value, str):
        raise PolicyError(f"{key} must be a string or null, not {_brief(value)}")
    return value


def check_keys(kwargs: Mapping[str, Any], known: tuple[str, ...]) -> None:
    """A ``refold*`` key that RefoldModel does not take (``refold_spanz``) would reach the inner model,
    which ignores it: the setting silently off for the whole run. Said before the run starts."""
    for key in kwargs:
        if key.startswith("refold") and key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            raise PolicyError(f"model.{key}: not a refold setting{hint} (refold's keys: {', '.join(known)})")


def _brief(value: Any) -> str:
    shown = repr(value)
    return shown if len(shown) <= 40 else shown[:37] + "..."


def resolve_handlers(spec: Mapping[str, str | None] | None) -> tuple[dict[str, Handler], frozenset[str]]:
    """Custom handlers by context command name (dotted paths), and the names switched off (null)."""
    handlers: dict[str, Handler] = {}
    off: set[str] = set()
    for name, path in mapping("refold_commands", spec).items():
        if name not in COMMAND_NAMES:
            raise PolicyError(f"refold_commands.{name}: not a context command ({', '.join(COMMAND_NAMES)})")
        if path is None or path == "":
            off.add(name)
        elif not isinstance(path, str):
            raise PolicyError(f"refold_commands.{name} must be a handler's dotted path or null, not {_brief(path)}")
        else:
            handlers[name] = _import(name, path)
    return handlers, frozenset(off)


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


def parse_section(cls: type[_M], key: str, values: Mapping[str, Any] | None) -> _M:
    """A SpanPolicy / LedgerPolicy / BoundaryConfig from config, or a one-line PolicyError naming the bad field."""
    try:
        return cls.model_validate(mapping(key, values))
    except ValidationError as e:
        err = e.errors()[0]
        field = ".".join(str(p) for p in err.get("loc", ()))
        raise PolicyError(f"invalid {key} field '{field}': {err.get('msg')}") from None

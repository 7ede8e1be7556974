"""The refold settings of a mini model config: sections parsed with one-line errors, and custom
context-command handlers resolved by dotted path (mini-swe-agent's way of naming classes)."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from ..context.answers import Handler
from ..errors import PolicyError
from ..protocol import COMMAND_NAMES

_M = TypeVar("_M", bound=BaseModel)


def resolve_handlers(spec: Mapping[str, str | None] | None) -> tuple[dict[str, Handler], frozenset[str]]:
    """Custom handlers by context command name (dotted paths), and the names switched off (null)."""
    handlers: dict[str, Handler] = {}
    off: set[str] = set()
    for name, path in (spec or {}).items():
        if name not in COMMAND_NAMES:
            raise PolicyError(f"refold_commands.{name}: not a context command ({', '.join(COMMAND_NAMES)})")
        if path is None or path == "":
            off.add(name)
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
        return cls.model_validate(dict(values or {}))
    except ValidationError as e:
        err = e.errors()[0]
        field = ".".join(str(p) for p in err.get("loc", ()))
        raise PolicyError(f"invalid {key} field '{field}': {err.get('msg')}") from None

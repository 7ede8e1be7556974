"""refold: render a shorter prompt from an agent's full, append-only history before every call.

    from refold import Config, Renderer, load
    history = load("run.traj.json")
    prompt = Renderer(Config.parse(k=3)).render(history)   # prompt.messages, prompt.origins, prompt.stats

The names below are imported on first use, so ``import refold`` (and ``refold --help``, which
imports ``refold.cli``) does not build the pydantic models and the renderer it does not need.
"""

import importlib as _importlib
import typing as _typing

if _typing.TYPE_CHECKING:
    from .config import Config
    from .context.recognize import parse_command
    from .errors import CommandError, PolicyError, RefoldError, TrajectoryError
    from .history import History
    from .loaders import load
    from .mechanisms.ledger import LedgerPolicy
    from .mechanisms.spans import SpanPolicy
    from .policy import Policy
    from .prompts import response_format_lines, system_section
    from .protocol import parse_head
    from .render import Renderer
    from .restore import restore_text
    from .types import Action, Origin, Rendered, RenderStats, Shown, Step

__version__ = "0.1.0"

_WHERE = {
    "Action": "types",
    "CommandError": "errors",
    "Config": "config",
    "History": "history",
    "LedgerPolicy": "mechanisms.ledger",
    "Origin": "types",
    "Policy": "policy",
    "PolicyError": "errors",
    "RefoldError": "errors",
    "RenderStats": "types",
    "Rendered": "types",
    "Renderer": "render",
    "Shown": "types",
    "SpanPolicy": "mechanisms.spans",
    "Step": "types",
    "TrajectoryError": "errors",
    "load": "loaders",
    "parse_command": "context.recognize",
    "parse_head": "protocol",
    "response_format_lines": "prompts",
    "restore_text": "restore",
    "system_section": "prompts",
}

__all__ = [
    "Action",
    "CommandError",
    "Config",
    "History",
    "LedgerPolicy",
    "Origin",
    "Policy",
    "PolicyError",
    "RefoldError",
    "RenderStats",
    "Rendered",
    "Renderer",
    "Shown",
    "SpanPolicy",
    "Step",
    "TrajectoryError",
    "load",
    "parse_command",
    "parse_head",
    "response_format_lines",
    "restore_text",
    "system_section",
]


def __getattr__(name: str) -> _typing.Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'refold' has no attribute {name!r}")
    value = getattr(_importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_WHERE])

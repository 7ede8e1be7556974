"""The context commands as function tools, and which of them a request is offered."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from ..config import Config
from ..shell import SHELL_TOOLS
from .recognize import LEDGER_COMMANDS, SPAN_COMMANDS, Recognizer, active


def _tool(name: str, description: str, arg: str, arg_doc: str) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {arg: {"type": "string", "description": arg_doc}},
                "required": [arg],
            },
        },
    }


TOOL_SCHEMAS: tuple[dict[str, Any], ...] = (
    _tool("restore", "Show earlier steps again exactly as first shown, without running anything.", "steps", "e.g. '3', '3 5' or '3-5'"),
    _tool("begin_span", "Open a span before an investigation; fold it with fold_span when answered.", "question", "what you want to find out"),
    _tool(
        "fold_span",
        "Close the innermost open span: its steps become one block with this conclusion and the artefacts kept.",
        "conclusion",
        "what you found AND why (because/since/so/..., or a file:line reference)",
    ),
    _tool("fold", "Replace an output by its one-line summary from the next context refresh.", "id", "output id, e.g. '7' or '7.2'"),
    _tool("drop", "Remove an output (a marker stays; expand brings it back).", "id", "output id, e.g. '7' or '7.2'"),
    _tool("expand", "Show an output or a folded span again as first shown (one level deep).", "id", "output id ('7', '7.2') or span id ('S1')"),
    _tool("search_ledger", "Search every output and span, folded or not; lists matching ids ('*' lists the whole ledger).", "query", "words to look for, or * for the whole ledger"),
)
TAUGHT_SCHEMAS: tuple[dict[str, Any], ...] = (
    {
        "type": "function",
        "function": {
            "name": "fold_steps",
            "description": "Fold steps already taken (one dead end, one finished investigation) into one block with this "
            "conclusion and the artefacts kept; it costs the context after the first step, once.",
            "parameters": {
                "type": "object",
                "properties": {
                    "steps": {"type": "string", "description": "the range, e.g. '12-18'"},
                    "conclusion": {"type": "string", "description": "what you found (a file:line, symbol, test, value or commit) AND why"},
                },
                "required": ["steps", "conclusion"],
            },
        },
    },
    _tool("pin", "Keep an object shown as first shown in every prompt (never folded, masked or compacted).", "id", "object id: '7', '7.2' or 'r7' (the reply of step 7)"),
    _tool("unpin", "Release a pin: the object may be shown shorter again.", "id", "object id: '7', '7.2' or 'r7'"),
)
TAUGHT = tuple(t["function"]["name"] for t in TAUGHT_SCHEMAS)
"""Offered only when the prompt teaches them (``spans.fold_steps``, ``ledger.objects``); the commands
are answered either way."""


def taught(config: Config, name: str) -> bool:
    return {"fold_steps": config.spans.fold_steps, "pin": config.ledger.objects, "unpin": config.ledger.objects}.get(name, True)


def answered(config: Config, switched_off: Collection[str] = ()) -> frozenset[str]:
    """The context commands answered under ``config`` (minus ``switched_off``)."""
    return active(spans=config.spans.enabled, ledger=config.ledger.enabled) - frozenset(switched_off)


_REVERSIBLE, _SPANS, _LEDGER = "policy.reversible=false", "spans.enabled=false", "ledger.enabled=false"
_NO_MASK = "policy.mask_after=null"  # masking is reversible or nothing: an output it hides must come back
_OWN_NAME_OFF: dict[str, tuple[str, ...]] = {
    # the span and ledger sections and answers name restore and expand too
    "restore": (_REVERSIBLE, _NO_MASK, _SPANS, _LEDGER),
    "expand": (_REVERSIBLE, _NO_MASK, _SPANS, _LEDGER),
    **{name: (_SPANS,) for name in SPAN_COMMANDS},
    **{name: (_LEDGER,) for name in LEDGER_COMMANDS},
}


def clashes(config: Config, tools: Sequence[dict[str, Any]] | None) -> tuple[str, ...]:
    """``config`` overrides under which a prompt offers no context command the agent's own tools
    are named like (its own ``restore`` or ``expand``: no ``restore <step>``, no masking, since
    nothing may be hidden that the agent cannot bring back, no spans, no ledger; its own ``fold``: no ledger; its own
    ``fold_span``: no spans). The protocol's command names are fixed, so a command the agent's
    tool owns is off, not renamed; () when none clashes."""
    own = {str((t.get("function") or {}).get("name")) for t in tools or [] if isinstance(t, dict)}
    on = {_REVERSIBLE: config.policy.reversible, _NO_MASK: config.policy.mask_after is not None,
          _SPANS: config.spans.enabled, _LEDGER: config.ledger.enabled}
    return tuple(sorted({o for name, offs in _OWN_NAME_OFF.items() if name in own for o in offs if on[o]}))


def offer(
    config: Config,
    tools: Sequence[dict[str, Any]] | None,
    *,
    offer: bool = True,
    switched_off: Collection[str] = (),
    text: bool | None = None,
    beside_shell: bool = True,
    compound: bool = False,
) -> tuple[list[dict[str, Any]], Recognizer]:
    """The context function tools to send next to the agent's ``tools`` (only when it sends tools
    and ``offer``; never one named like a tool of its own; restore and expand only under a reversible
    policy; none named like a tool of the agent's own, nor any of its family: ``clashes``) and the
    recognizer for its replies. ``text``: read a ```bash block of a reply without
    tool calls (default: when the agent sends no tools). ``beside_shell=False``: none when the agent
    has a shell tool, whose calls carry the context commands already (their schemas would cost
    every call several hundred prompt tokens for nothing new). ``compound``: ``Recognizer.compound``."""
    own = frozenset(str((t.get("function") or {}).get("name")) for t in tools or [])
    clash = clashes(config, tools)
    config = config.override(list(clash)) if clash else config
    names = answered(config, switched_off) - own  # a command named like the agent's own tool is its tool's
    if not beside_shell and own & SHELL_TOOLS:
        offer = False
    added = [
        dict(schema)
        for schema in (*TOOL_SCHEMAS, *TAUGHT_SCHEMAS)
        if offer
        and tools
        and (name := schema["function"]["name"]) in names
        and name not in own
        and (config.policy.reversible or name not in ("restore", "expand"))
        and taught(config, name)
    ]
    functions = frozenset(t["function"]["name"] for t in added)
    return added, Recognizer(functions, names, not tools if text is None else text, bool(own & SHELL_TOOLS), compound)

"""The answer to ``restore <step>``: read from the history, byte-exact as first shown; nothing runs."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from .config import Config
from .history import History
from .mechanisms.spans import DEFAULT_SPANS, SpanPolicy
from .policy import DEFAULT, Policy
from .protocol import CM
from .render import Renderer
from .render.received import without_reminder
from .types import Message, content_text

CallLines = Callable[[Message], list[str] | None]
"""The lines showing a stored reply's tool calls as its client sent them (None: as stored). A
session recorded through an API whose calls refold stores in its own form (a Claude Code ``Bash``
call is stored as ``bash`` with ``{"command"}``) keeps the native form in the reply's ``extra``,
which only the recorder can read: it passes this so ``restore`` shows the call the model made."""


def restore_text(
    history: History,
    steps: int | Iterable[int],
    policy: Policy | Config = DEFAULT,
    *,
    spans: SpanPolicy = DEFAULT_SPANS,
    call_lines: CallLines | None = None,
) -> str:
    """The answer to ``restore``: each step's reply and outputs byte-exact as first shown.

    ``steps`` is a step number or a list of them (``IndexError`` for one the history lacks);
    ``policy`` is the run's ``Policy``, or its whole ``Config`` (whose spans are then used);
    ``call_lines``: how the recorder shows a reply's calls as sent (``CallLines``)."""
    if isinstance(steps, int):
        steps = [steps]
    steps = list(steps)
    for s in steps:
        if not isinstance(s, int) or isinstance(s, bool):
            raise TypeError(f"restore_text: steps must be step numbers (int), not {type(s).__name__} {s!r:.40}")
    if isinstance(policy, Config):
        spans = policy.spans
        policy = policy.policy
    if not policy.reversible:
        return f"{CM} restore is switched off: omitted content cannot be brought back; re-run the command instead."
    r = Renderer(Config(policy=policy, spans=spans))
    parts = []
    for s in steps:
        msgs = r.received(history, s)
        parts.append(f"{CM} Step {s} restored from history (nothing was run again). Its reply:")
        parts.append(content_text(msgs[0].get("content")))
        calls = msgs[0].get("tool_calls") or []
        sent = call_lines(history.step(s).reply) if call_lines is not None and calls else None
        if sent is not None and len(sent) == len(calls):
            parts.extend(sent)
        else:
            parts.extend(call_line(str((c.get("function") or {}).get("name")), (c.get("function") or {}).get("arguments")) for c in calls)
        parts.append(f"{CM} Its output, as first shown:")
        outs = [content_text(m.get("content")) for m in msgs[1:]]
        parts.extend(outs[:-1] + [without_reminder(t) for t in outs[-1:]])  # a spent reminder is no output
    return "\n".join(parts)


def call_line(name: str, arguments: object) -> str:
    """One tool call of a restored reply: ``(tool call bash: {"command": "ls"})``."""
    return f"(tool call {name}: {arguments})"

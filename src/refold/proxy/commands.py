"""Context commands the proxy answers itself (the client never sees them).

The model may issue one as a call of a context function tool the proxy offers next to the
client's tools (``restore``, ``begin_span``, ``fold_span``, ``fold``, ``drop``, ``expand``,
``search_ledger``: ``refold.context_commands.TOOL_SCHEMAS``), as a shell tool call whose command
is one (``fold_span "..."``; coreutils ``fold -w 80 f`` / ``expand -t 4 f`` are left to the
shell), or, agents without tool calling, as the only command of a reply's ```bash block.

Every command is answered by ``refold.context_commands.answer_command`` with the renderer's span
and ledger policies. Each answer's ``meta`` (``refold_result``, ``restore_of``) is kept in the
answering observation's ``extra`` and in the step's meta, and the reply records its actions as
answered in ``extra.refold.actions``, so a history rebuilt from the store after a restart replays
every span and ledger operation exactly as the model was told (refused ones stay refused).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..context_commands import TOOL_SCHEMAS, Answer, answer_command, command_from_tool_call, intercept
from ..history import History, extract_actions
from ..mechanisms.ledger import LedgerPolicy
from ..mechanisms.spans import SPAN_COMMANDS, Outcome, SpanPolicy
from ..policy import Policy
from ..protocol import CM, COMMAND_NAMES, ContextCommand
from ..types import Message

SHELL_TOOLS = frozenset(
    {"bash", "shell", "sh", "terminal", "execute_bash", "run_command", "run_shell", "exec"}
)
LEDGER_COMMANDS = ("fold", "drop", "search_ledger")


def active_commands(policy: Policy, spans: SpanPolicy, ledger: LedgerPolicy) -> frozenset[str]:
    """The context commands the proxy answers: restore and expand always (a non-reversible policy
    answers that nothing comes back), span and ledger commands when those mechanisms are on."""
    names = {"restore", "expand"}
    if spans.enabled:
        names.update(SPAN_COMMANDS)
    if ledger.enabled:
        names.update(LEDGER_COMMANDS)
    return frozenset(names)


@dataclass(frozen=True, slots=True)
class Recognizer:
    """Which actions of a reply the proxy answers, for one request."""

    functions: frozenset[str]
    """Context commands called as function tools (the ones offered)."""
    shell: frozenset[str]
    """Context commands recognized as a shell tool's command or a reply's only ```bash command."""
    text: bool
    """Read a ```bash block of a reply without tool calls (requests without tools)."""
    shell_tool: bool
    """The request offers a shell tool (one of ``SHELL_TOOLS``)."""

    @property
    def possible(self) -> bool:
        """Whether any reply to this request could carry a context command the proxy answers."""
        return bool(self.functions) or (bool(self.shell) and (self.text or self.shell_tool))


ALL = Recognizer(frozenset(COMMAND_NAMES), frozenset(COMMAND_NAMES), True, True)


def plan(
    tools: list[Any] | None, policy: Policy, spans: SpanPolicy, ledger: LedgerPolicy, *, offer: bool
) -> tuple[list[dict[str, Any]], Recognizer]:
    """The context function tools to add next to the client's ``tools`` (never one the client
    defines; only when it sends tools and ``offer``), and what the proxy answers in replies."""
    active = active_commands(policy, spans, ledger)
    client = frozenset(str((t.get("function") or {}).get("name")) for t in tools or [])
    added = [
        schema
        for schema in TOOL_SCHEMAS
        if offer
        and tools
        and (name := schema["function"]["name"]) in active
        and name not in client
        and (policy.reversible or name not in ("restore", "expand"))
    ]
    functions = frozenset(t["function"]["name"] for t in added)
    return added, Recognizer(functions, active, not tools, bool(client & SHELL_TOOLS))


@dataclass(frozen=True, slots=True)
class Call:
    """One action of a reply: a context command (``command``) or anything else (``None``)."""

    id: str | None
    command: ContextCommand | None
    tool: str = "bash"
    raw: str = ""


def context_calls(reply: Message, rec: Recognizer = ALL) -> list[Call] | None:
    """The reply's actions when at least one is a context command the proxy answers, else None."""
    calls = reply.get("tool_calls") or []
    if calls:
        out = [_call(c, rec) for c in calls if isinstance(c, dict)]
        return out if any(c.command for c in out) else None
    if not rec.text:
        return None
    actions = extract_actions(reply)
    if len(actions) == 1:
        cmd = intercept(actions[0].command)
        if cmd is not None and cmd.name in rec.shell:
            return [Call(None, cmd, "bash", actions[0].command)]
    return None


def _call(call: dict[str, Any], rec: Recognizer) -> Call:
    fn = call.get("function") or {}
    name = str(fn.get("name") or "")
    raw = fn.get("arguments")
    text = raw if isinstance(raw, str) else json.dumps(raw if raw is not None else {})
    cid = call.get("id")
    cmd: ContextCommand | None = None
    if name in rec.functions:
        cmd = command_from_tool_call(name, _flat(text))
    elif name in SHELL_TOOLS:
        try:
            args = json.loads(text)
        except ValueError:
            args = None
        command = args.get("command", args.get("cmd")) if isinstance(args, dict) else None
        if isinstance(command, list):
            command = " ".join(str(c) for c in command)
        if isinstance(command, str):
            text = command
            cmd = intercept(command)
            if cmd is not None and cmd.name not in rec.shell:
                cmd = None
    return Call(cid if isinstance(cid, str) else None, cmd, name, text)


def _flat(arguments: str) -> str:
    """Arguments with list values joined (``{"steps": [3, 4]}`` means ``restore 3 4``)."""
    try:
        args = json.loads(arguments)
    except ValueError:
        return arguments
    if not isinstance(args, dict) or not any(isinstance(v, list) for v in args.values()):
        return arguments
    return json.dumps({k: " ".join(map(str, v)) if isinstance(v, list) else v for k, v in args.items()})


def _refused(cmd: ContextCommand) -> Answer:
    out = Outcome(
        cmd.name,
        False,
        f"{CM} {cmd.name} not run: this reply already issued a span command; one begin_span/fold_span "
        "per reply. Issue it again in your next reply if you still need it.",
    )
    return Answer(out.text, {"refold_result": out.record()})


def observations(
    history: History,
    reply: Message,
    calls: list[Call],
    policy: Policy,
    spans: SpanPolicy,
    ledger: LedgerPolicy,
) -> tuple[Message, list[Message], dict[str, Any]]:
    """The reply as stored (its actions recorded as answered), the observations answering it,
    and the step's meta (``refold_result`` list, ``restore_of``)."""
    out: list[Message] = []
    results: list[dict[str, Any]] = []
    restored: list[int] = []
    span_done = False
    for c in calls:
        extra: dict[str, Any] = {}
        if c.command is None:
            text = (
                f"{CM} Not run: this reply also issued a context command, which is answered on its own. "
                "Issue this command again in your next reply."
            )
        else:
            if c.command.name in SPAN_COMMANDS and span_done:
                a = _refused(c.command)
            else:
                a = answer_command(history, c.command, policy, spans=spans, ledger=ledger)
            span_done = span_done or c.command.name in SPAN_COMMANDS
            text, extra = a.text, {"refold_command": c.command.name, **a.meta}
            if isinstance(a.meta.get("refold_result"), dict):
                results.append(a.meta["refold_result"])
            restored += [int(i) for i in a.meta.get("restore_of") or []]
        msg: Message = (
            {"role": "tool", "tool_call_id": c.id, "content": text}
            if c.id is not None
            else {"role": "user", "content": text}
        )
        if extra:
            msg["extra"] = extra
        out.append(msg)
    meta: dict[str, Any] = {}
    if results:
        meta["refold_result"] = results
    if restored:
        meta["restore_of"] = list(dict.fromkeys(restored))
    stored = dict(reply)
    stored["extra"] = {"refold": {"actions": [_action(c) for c in calls]}}
    return stored, out, meta


def _action(c: Call) -> dict[str, Any]:
    """How ``History`` reads the action back: a context command as its function-tool form."""
    if c.command is not None:
        return {
            "command": json.dumps({"argument": c.command.argument}),
            "tool": c.command.name,
            "tool_call_id": c.id,
        }
    return {"command": c.raw, "tool": c.tool, "tool_call_id": c.id}

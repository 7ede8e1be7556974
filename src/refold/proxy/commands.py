"""Context commands the proxy answers itself (the client never sees them).

The model may issue one as a call of a context function tool the proxy offers next to the
client's tools, as a shell tool call whose command is one (``fold_span "..."``), or, agents
without tool calling, as the only command of a reply's ```bash block; ``refold.context`` decides
which (the same rules as mini) and answers them, in order. The reply is stored with its actions
as issued and which were answered (``refold.wire.actions_record``), each answer in its
observation's ``extra`` (``refold.wire.answer_record``), so a history rebuilt from the store after
a restart replays every span and ledger operation exactly as the model was told.
"""

from __future__ import annotations

import json
from typing import Any

from ..config import Config
from ..context.answers import Answerer
from ..context.recognize import Recognizer
from ..history import History
from ..protocol import CM
from ..restore import CallLines
from ..shell import SHELL_TOOLS
from ..types import Action, Answer, Message
from ..wire import action, actions_record, answer_record, read_actions

NOT_RUN = (
    f"{CM} Not run: this reply also issued a context command, which is answered on its own. "
    "Issue this command again in your next reply."
)


def context_calls(reply: Message, rec: Recognizer) -> tuple[Action, ...] | None:
    """The reply's actions when at least one is a context command the proxy answers, else None."""
    calls = reply.get("tool_calls") or []
    if calls:
        out = tuple(call_action(c, rec) for c in calls if isinstance(c, dict))
        return out if any(a.context for a in out) else None
    if not rec.text:
        return None
    actions = read_actions(reply, rec)
    if len(actions) == 1 and actions[0].context is not None:
        return actions
    return None


def call_action(call: dict[str, Any], rec: Recognizer) -> Action:
    """One chat tool call as an action: a shell tool's command (a free-form tool's input, a list
    joined) or a function call's arguments, with the context command ``rec`` reads in it, if any."""
    fn = call.get("function") or {}
    name = str(fn.get("name") or "")
    raw = fn.get("arguments")
    text = raw if isinstance(raw, str) else json.dumps(raw if raw is not None else {})
    cid = call.get("id")
    cid = cid if isinstance(cid, str) else None
    if name in SHELL_TOOLS:
        try:
            args = json.loads(text)
        except ValueError:
            args = None
        command = args.get("command", args.get("cmd")) if isinstance(args, dict) else None
        if call.get("type") == "custom" and isinstance(raw, str):  # a free-form tool: its input is the command
            command = raw
        if isinstance(command, list):
            command = " ".join(str(c) for c in command)
        if isinstance(command, str):
            return action(command, name, cid, rec.command("bash", command))
        return action(text, name, cid)
    # a call of a function tool the proxy offered, or else one of the client's own tools
    return action(text, name, cid, rec.command(name, text) if name in rec.functions else None)


def observations(
    history: History, reply: Message, calls: tuple[Action, ...], config: Config, *, call_lines: CallLines | None = None
) -> tuple[Message, list[Message], list[Answer]]:
    """The reply as stored (its actions recorded as answered), the observations answering it,
    and the answers (in order; other calls of the reply are not run). ``call_lines``: how a
    restored reply's calls are shown as the client sent them (``proxy.sent_calls``)."""
    answerer = Answerer(history, config, call_lines=call_lines)
    out: list[Message] = []
    answers: list[Answer] = []
    for c in calls:
        extra: dict[str, Any] = {}
        if c.context is None:
            text = NOT_RUN
        else:
            a = answerer.answer(c.context)
            answers.append(a)
            text, extra = a.text, answer_record(c.context.name, a)
        msg: Message = (
            {"role": "tool", "tool_call_id": c.tool_call_id, "content": text}
            if c.tool_call_id is not None
            else {"role": "user", "content": text}
        )
        if extra:
            msg["extra"] = extra
        out.append(msg)
    stored = dict(reply)
    stored["extra"] = {"refold": actions_record(calls)}
    return stored, out, answers

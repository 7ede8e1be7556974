"""The one codec between step facts (``refold.types.Facts``) and the records they travel in.

Records written by refold and read back here:

* a reply's ``extra.refold`` (mini's wrapper, and the proxy's internal steps): ``actions``, the
  actions as the model issued them (``{"command", "tool", "tool_call_id"}``), and
  ``context_actions``, those answered as context commands (``{"index", "name", "argument"}``);
* an answering observation's ``extra``: ``refold_command``, ``refold_result``
  (``{"name", "ok", "target"}``) and ``restore_of`` (steps shown again);
* the proxy store's step record (reply, observations, meta): the facts are in the messages;
  stores written before this codec also repeated them in ``meta`` (read from the messages, dropped).

Anything else is read the way the agent wrote it: tool calls, mini's ``extra.actions``, SWE-agent's
``action``, or a reply's ```bash block; context commands among them by ``recognize.ANY``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from .context.recognize import ANY, Recognizer
from .protocol import ContextCommand
from .reply_command import bash_block
from .shell import analyze
from .types import Action, Answer, Facts, Message, Outcome, content_text

LEGACY_META = ("refold_result", "restore_of")
"""Keys older proxy stores kept in a step's meta next to the same facts in its messages."""


# ---- reading ------------------------------------------------------------------------------------


def read_facts(reply: Message, observations: Sequence[Message]) -> Facts:
    """The facts of a step, from its messages as recorded."""
    outcomes: list[Outcome] = []
    extra = reply.get("extra")
    restored: list[int] = step_numbers(extra["restore_of"]) if isinstance(extra, dict) and "restore_of" in extra else []
    for o in observations:
        ox = o.get("extra")
        if not isinstance(ox, dict):  # no refold record on this output
            continue
        result = ox.get("refold_result")
        if isinstance(result, dict):
            outcomes.append(_outcome(result))
        if "restore_of" in ox:
            restored += step_numbers(ox["restore_of"])
    return Facts(read_actions(reply), tuple(outcomes), tuple(dict.fromkeys(restored)))


NOT_FROM_USER = ("tool", "function", "assistant")
"""Observation roles that are outputs (a tool's result, a legacy function's) or the agent's own."""


def made_calls(reply: Message) -> bool:
    """Whether a reply called tools (or a legacy function): the conversation is then a tool-call one."""
    return bool(reply.get("tool_calls") or reply.get("function_call"))


def user_messages(reply: Message, observations: Sequence[Message], calls_before: bool) -> tuple[int, ...]:
    """Which observations of a step are messages to the agent rather than outputs of its calls.

    In a tool-call conversation (this reply or an earlier one called tools) every output is a tool
    message answering a call by id, so an observation with another role (``user``, ``system``,
    ``developer``) answers no call: a person's new instruction, a harness note (Claude Code's
    reminders, Codex's ``<environment_context>``). Two are outputs all the same: refold's own answer
    to a context command (``extra.refold_command``) and mini's format error (``extra.interrupt_type``
    ``FormatError``: its answer to a reply it did not store). In a text-based run (```bash blocks)
    every output is a ``user`` message, so none is told apart: nothing is returned."""
    if not observations or not (calls_before or made_calls(reply)):
        return ()
    out = []
    for j, m in enumerate(observations):
        if m.get("role") in NOT_FROM_USER:
            continue
        extra = m.get("extra")
        if isinstance(extra, dict) and ("refold_command" in extra or extra.get("interrupt_type") == "FormatError"):
            continue
        out.append(j)
    return tuple(out)


def read_stored(reply: Message, observations: Sequence[Message], meta: Mapping[str, Any]) -> tuple[Facts, dict[str, Any]]:
    """A proxy store record: its facts, and its meta without the keys older stores repeated there."""
    return read_facts(reply, observations), {k: v for k, v in meta.items() if k not in LEGACY_META}


def read_actions(reply: Message, recognizer: Recognizer = ANY) -> tuple[Action, ...]:
    """The actions of a reply; refold's own record of them (``extra.refold``) wins."""
    refold = _dict(_dict(reply.get("extra")).get("refold"))
    recorded = refold.get("actions")
    if isinstance(recorded, list) and recorded:
        issued = [
            (str(a.get("command", "")), str(a.get("tool") or "bash"), _call_id(a.get("tool_call_id")))
            for a in recorded
            if isinstance(a, dict)
        ]
        answered = refold.get("context_actions")
        if isinstance(answered, list):  # the answering surface said which ones it answered
            named: dict[int, ContextCommand] = {}
            for c in answered:
                if isinstance(c, dict) and isinstance(c.get("index"), int) and isinstance(c.get("name"), str):
                    named[c["index"]] = ContextCommand(c["name"], str(c.get("argument", "")))
            return tuple(action(cmd, tool, cid, named.get(i)) for i, (cmd, tool, cid) in enumerate(issued))
        return tuple(action(cmd, tool, cid, recognizer.command(tool, cmd)) for cmd, tool, cid in issued)
    return tuple(action(cmd, tool, cid, recognizer.command(tool, cmd)) for cmd, tool, cid in issued_commands(reply))


def action(command: str, tool: str = "bash", tool_call_id: str | None = None, context: ContextCommand | None = None) -> Action:
    """An action with its facts (the one place a command's reads and writes are analyzed)."""
    return Action(command, tool, tool_call_id, context=context, effects=analyze(command, tool))


def issued_commands(reply: Message) -> list[tuple[str, str, str | None]]:
    """The reply's commands, each ``(command, tool, tool_call_id)``, read from the reply itself:
    its tool calls, else mini's ``extra.actions``, SWE-agent's ``action`` or a text reply's command
    block. Cheap (no facts analyzed); ``read_actions`` prefers refold's own record and analyzes."""
    calls = reply.get("tool_calls")
    calls = [c for c in calls if isinstance(c, dict)] if isinstance(calls, list) else []
    if calls:
        out = []
        for c in calls:
            fn = _dict(c.get("function"))
            args = fn.get("arguments") or ""
            name = fn["name"] if isinstance(fn.get("name"), str) and fn["name"] else "bash"
            command = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False, default=str)
            try:
                parsed = json.loads(args) if isinstance(args, str) else args
                if isinstance(parsed, dict) and isinstance(parsed.get("command"), str) and name in ("bash", "shell"):
                    command = parsed["command"]
            except (ValueError, TypeError):
                pass
            out.append((str(command), name, _call_id(c.get("id"))))
        return out
    actions = _dict(reply.get("extra")).get("actions")
    if isinstance(actions, list) and actions:
        return [(str(a.get("command", "")), "bash", _call_id(a.get("tool_call_id"))) for a in actions if isinstance(a, dict)]
    if isinstance(reply.get("action"), str) and reply["action"].strip():  # SWE-agent
        return [(reply["action"].strip(), "bash", None)]
    text = content_text(reply.get("content"))
    block = bash_block(text)  # linear time; mini's ```bash / ```mswea_bash_command / XML forms
    return [] if block is None else [(block.strip(), "bash", None)]


def step_time(reply: Message, observations: Sequence[Message], next_reply: Message | None = None) -> float | None:
    """When a step was complete, i.e. about when the next model call was made (unix seconds).

    The last output's ``extra.timestamp`` (mini 2 stamps each output), else when the next call
    began (``extra.refold.time`` written by refold's mini wrapper, or the provider's ``created``
    in mini 1's ``extra.response``), else the reply's own time. None when the record has none
    (SWE-agent files keep durations only). Render reads the idle gap between calls from it.
    """
    for m in reversed(observations):
        extra = m.get("extra")
        if isinstance(extra, dict):  # else no time: skip the calls
            found = _seconds(extra.get("timestamp"))
            if found is not None:
                return found
    for m in (next_reply, reply) if next_reply is not None else (reply,):
        extra = _dict(m.get("extra"))
        found = _seconds(_dict(extra.get("refold")).get("time")) if m is next_reply else _seconds(extra.get("timestamp"))
        found = found if found is not None else _seconds(_dict(extra.get("response")).get("created"))
        if found is not None:
            return found
    return None


def _seconds(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if 1e8 < value < 1e11 else None  # unix seconds (not ms, not a counter)


def _outcome(record: Mapping[str, Any]) -> Outcome:
    target = record.get("target")
    return Outcome(str(record.get("name", "")), record.get("ok") is True, str(target) if target else None)


def step_numbers(value: Any) -> list[int]:
    """Step numbers from a recorded ``restore_of`` (a list, or one number); junk entries are skipped."""
    items = value if isinstance(value, (list, tuple)) else [value]
    out = []
    for v in items:
        if isinstance(v, bool):
            continue
        if isinstance(v, int):
            out.append(v)
        elif isinstance(v, str) and v.strip().isdigit() and len(v.strip()) <= 9:
            out.append(int(v))
    return out


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _call_id(value: Any) -> str | None:
    return value if isinstance(value, str) else None if value is None else str(value)


# ---- writing ------------------------------------------------------------------------------------


def actions_record(actions: Sequence[Action]) -> dict[str, Any]:
    """For a reply's ``extra.refold``: the actions as issued and which were context commands."""
    return {
        "actions": [
            {"command": a.command, "tool_call_id": a.tool_call_id} | ({"tool": a.tool} if a.tool != "bash" else {})
            for a in actions
        ],
        "context_actions": [
            {"index": i, "name": a.context.name, "argument": a.context.argument}
            for i, a in enumerate(actions)
            if a.context is not None
        ],
    }


def answer_record(name: str, answer: Answer) -> dict[str, Any]:
    """For the ``extra`` of the observation answering context command ``name``."""
    out: dict[str, Any] = {"refold_command": name}
    if answer.outcome is not None:
        o = answer.outcome
        out["refold_result"] = {"name": o.name, "ok": o.ok} | ({"target": o.target} if o.target else {})
    if answer.restore_of:
        out["restore_of"] = list(answer.restore_of)
    return out


def observation(name: str, answer: Answer, tool_call_id: str | None = None) -> Message:
    """The observation to append for the answer to context command ``name`` in a library loop
    (``history.append(reply, [observation("restore", a)])``): its text, and in ``extra`` its record,
    so the history knows the step restored (shown, not masked, for ``restore_hold`` steps) and how
    a span or ledger command came out. A ``tool`` message when the command was a tool call."""
    msg: Message = {"role": "user", "content": answer.text, "extra": answer_record(name, answer)}
    if tool_call_id:
        msg["role"], msg["tool_call_id"] = "tool", tool_call_id
    return msg


def facts_record(facts: Facts) -> dict[str, Any]:
    """All facts as one record (what a step digest covers when they are not in its messages)."""
    return {
        "refold_facts": {
            **actions_record(facts.actions),
            "outcomes": [[o.name, o.ok, o.target] for o in facts.outcomes],
            "restore_of": list(facts.restore_of),
        }
    }

"""OpenAI Codex CLI rollouts (``~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl``) as chat messages.

Each line is ``{"timestamp", "type", "payload"}``: ``session_meta`` (id, cwd, cli_version, the
system prompt as ``base_instructions`` in newer versions), ``turn_context`` (model, effort),
``response_item`` (an OpenAI Responses item: user/developer messages, the model's output items,
tool outputs), ``event_msg`` (UI events; ``token_count`` carries each response's usage) and
``compacted``. Older files open with a bare ``{"id", "timestamp"}`` line followed by bare items
(and ``record_type: "state"`` lines); they read the same way, without usage.

One model response becomes one assistant message holding all its output items (reasoning, text,
calls; kept as received under ``extra["responses"]``); each tool output a ``tool`` message. A
harness's shell tool (``shell`` with an argv list, ``shell_command``, ``exec_command``,
``local_shell_call``) is read as ``bash`` with the command line it runs. Where responses end:
each response reports its usage once (a ``token_count`` event). Newer Codex writes it after the
response's items, older Codex before them (and each tool output right after its call); which one
a file does is read once (does a usage event or an output item come first), and output items
between two usage events are one response, with the usage next to them. A file without usage
events falls back to the proxy's rule (a tool output or a user message ends a response).

``compacted``: Codex replaced its history by a summary (``replacement_history``: the user's
messages, the final answers it kept (assistant prefix messages marked ``KEPT``), the summary (encrypted in newer
versions); for older versions rebuilt here as Codex did: initial context, the user's messages,
the summary); every
later prompt was built from that, so each context is its own part (``FILE#part2``), loaded and
replayed like one agent of a multi-agent file. A usage event with no response items (the
summarization call, an aborted response) is a call without a stored reply (``unreplied``).
``thread_rolled_back``: Codex dropped the last user turns from its history (``_rollback``).
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass, field
from typing import Any

from ..errors import TrajectoryError
from ..history import is_kept
from ..responses_items import CALLS, OUTPUTS, item_kind, reply_message
from ..types import Message
from .codex_items import (
    KEY,
    as_usage,
    difference,
    input_message,
    is_context,
    kept_reply,
    open_command,
    output_message,
    rollback_cut,
    rolled_back,
    seconds,
)  # fmt: skip

__all__ = ["FORMAT", "KEY", "PART", "Part", "is_rollout", "part_names", "read_rollout"]

FORMAT = "codex"
PART = "part"
"""``FILE#part2``: the context after Codex's first compaction."""

# unified exec (Codex 0.12x): a command still running after its yield answers with its session id;
# the model then polls it with ``write_stdin`` (empty ``chars``), which returns the command's output
_RUNNING = re.compile(r"Process running with session ID (\d{1,12})\n")
_LINE_TYPES = frozenset({"session_meta", "turn_context", "response_item", "event_msg", "compacted"})
_INPUT_ROLES = ("user", "developer", "system")
_SKIPPED = frozenset({"ghost_snapshot"})  # the harness's own snapshots: never sent to the model


def is_rollout(data: Any) -> bool:
    """Whether parsed JSON (Lines) is a Codex rollout: a ``session_meta`` line, or the old form
    (a bare ``{"id", "timestamp"}`` line, then bare items)."""
    rows = [data] if isinstance(data, dict) else data if isinstance(data, list) else []
    first = rows[0] if rows else None
    if not isinstance(first, dict):
        return False
    if first.get("type") == "session_meta" and "payload" in first:
        return True
    if any(isinstance(r, dict) and str(r.get("type")) in _LINE_TYPES and "payload" in r for r in rows[:50]):
        return all(isinstance(r, dict) and "role" not in r for r in rows[:50])
    return (
        "id" in first and "timestamp" in first and "type" not in first and "role" not in first and len(rows) > 1
        and all(isinstance(r, dict) and ("type" in r or "record_type" in r) for r in rows[1:50])
    )  # fmt: skip


def part_names(data: Any) -> list[str]:
    """``["part1", "part2", ...]`` when Codex compacted the session, else ``[]`` (one context)."""
    rows = data if isinstance(data, list) else []
    n = sum(1 for r in rows if isinstance(r, dict) and r.get("type") == "compacted")
    return [f"{PART}{i}" for i in range(1, n + 2)] if n else []


@dataclass
class Part:
    """One context of a rollout: the messages its calls were built from, the calls made in it
    whose reply is not stored (``History.meta["unreplied"]`` entries)."""

    messages: list[Message] = field(default_factory=list)
    unreplied: list[dict[str, Any]] = field(default_factory=list)


def read_rollout(data: Any, name: str) -> tuple[list[Part], dict[str, Any]]:
    """Every context of a rollout and what the file says about the session (``History.meta``)."""
    rows = data if isinstance(data, list) else [data]
    reader = _Reader(name, _usage_order(rows))
    for n, row in enumerate(rows, 1):
        reader.line(n, row)
    reader.finish()
    return reader.parts, reader.meta


def _usage_order(rows: list[Any]) -> str:
    """Where a file's usage events stand: ``"after"`` each response's items (newer Codex),
    ``"before"`` them (older Codex, which wrote a turn's items when it ended), ``""`` none."""
    for row in rows:
        if _usage_line(row):
            return "before"
        payload = row.get("payload") if isinstance(row, dict) and row.get("type") == "response_item" else None
        if isinstance(payload, dict) and _is_output(payload):
            return "after" if any(_usage_line(r) for r in rows) else ""
    return ""


def _is_output(item: dict[str, Any]) -> bool:
    """An item the model produced (reasoning, its text, a call), not one sent to it."""
    kind = item_kind(item)
    if kind == "message":
        return item.get("role") == "assistant"
    return bool(kind) and kind not in OUTPUTS and kind not in _SKIPPED and kind not in ("compaction", "compaction_summary")


def _usage_line(row: Any) -> bool:
    payload = row.get("payload") if isinstance(row, dict) and row.get("type") == "event_msg" else None
    return isinstance(payload, dict) and payload.get("type") == "token_count" and isinstance(payload.get("info"), dict)


class _Reader:
    def __init__(self, name: str, usage_order: str) -> None:
        self.name = name
        self.order = usage_order  # usage events mark where responses end ("": the proxy's rule)
        self.parts: list[Part] = [Part()]
        self.meta: dict[str, Any] = {"instructions_recorded": False}
        self.system: Message | None = None
        self.group: list[dict[str, Any]] = []
        self.group_at = 0
        self.group_time: float | None = None
        self.group_usage: dict[str, Any] | None = None
        self.pending: dict[str, Any] | None = None  # usage reported before its response's items
        self.last_total: Any = None
        self.time: float | None = None
        self.models: list[str] = []
        self.seen_meta = False
        self.commands: dict[str, str] = {}  # call_id -> the command line of each shell call
        self.running: dict[int, str] = {}  # unified exec session id -> the command still running

    @property
    def part(self) -> Part:
        return self.parts[-1]

    def fail(self, n: int, reason: str) -> TrajectoryError:
        return TrajectoryError(self.name, f"line {n}: {reason}")

    # ---- lines ----------------------------------------------------------------------------------

    def line(self, n: int, row: Any) -> None:
        if not isinstance(row, dict):
            raise self.fail(n, f"is {type(row).__name__}, not a JSON object (a Codex rollout line)")
        self.time = seconds(row.get("timestamp")) or self.time
        kind = row.get("type")
        if n == 1 and kind != "session_meta" and not ("id" in row and "type" not in row):
            # the head of the file is gone (cut, or copied from mid-session): said, not read silently
            what = f"a '{kind[:40]}' line" if isinstance(kind, str) else "an untyped line"
            self.meta["partial"] = [
                f"line 1 is {what}, not the 'session_meta' a rollout starts with (its head is missing?): "
                "read without its system prompt (base_instructions), session id and cwd"
            ]
        if "payload" in row and isinstance(kind, str) and kind in _LINE_TYPES:
            payload = row["payload"]
            if not isinstance(payload, dict):
                raise self.fail(n, f"the payload of a '{kind}' line is not an object")
            getattr(self, f"_{kind}")(n, payload)
        elif n == 1 and "id" in row and "type" not in row:
            self._session_meta(n, row)  # the old form's first line
        elif "record_type" in row:
            return  # the old form's state lines: the harness's, never sent to the model
        elif isinstance(kind, str) and "payload" not in row:
            self._response_item(n, row)  # the old form: bare items
        else:  # a newer Codex's line type: skipped, and counted (the report says what it did not read)
            what = f"'{kind}' line" if isinstance(kind, str) else "untyped line"
            unread = self.meta.setdefault("not_read", {})
            unread[what] = unread.get(what, 0) + 1

    def _session_meta(self, n: int, p: dict[str, Any]) -> None:
        if self.seen_meta:
            return  # a resumed or forked session repeats its source's meta
        self.seen_meta = True
        self.meta["session_id"] = p.get("id")
        for key in ("cwd", "cli_version", "model_provider", "originator"):
            if isinstance(p.get(key), str):
                self.meta[key] = p[key]
        base = p.get("base_instructions")
        text = base.get("text") if isinstance(base, dict) else base
        if isinstance(text, str) and text.strip():
            self.system = {"role": "system", "content": text, "extra": {KEY: "instructions"}}
            self.meta["instructions_recorded"] = True
            if not self.part.messages:
                self.part.messages.append(copy.deepcopy(self.system))
        tools = p.get("dynamic_tools")
        if isinstance(tools, list) and tools:
            self.meta["dynamic_tools"] = len(tools)

    def _turn_context(self, n: int, p: dict[str, Any]) -> None:
        self.close()  # a turn starts: the open response (if any) is over
        model = p.get("model")
        if isinstance(model, str) and model and model not in self.models:
            self.models.append(model)
        if isinstance(p.get("effort"), str) and "effort" not in self.meta:
            self.meta["effort"] = p["effort"]

    def _response_item(self, n: int, item: dict[str, Any]) -> None:
        kind = item_kind(item)
        if not kind:
            raise self.fail(n, "a response item without a 'type'")
        if kind in _SKIPPED:
            return
        if kind == "message" and item.get("role") not in (*_INPUT_ROLES, "assistant"):
            raise self.fail(n, f"a message whose role is {json.dumps(item.get('role'))[:40]}, not user, developer, system or assistant")
        if kind == "message" and item.get("role") in _INPUT_ROLES:
            self.close()
            self.part.messages.append(input_message(item, self.time))
        elif kind in OUTPUTS:
            if not isinstance(item.get("call_id"), str):
                raise self.fail(n, f"a '{kind}' item without a 'call_id'")
            if not self.order:
                self.close()
            out = output_message(item, self.time)
            running = _RUNNING.search(out["content"][:300]) if isinstance(out["content"], str) else None
            command = self.commands.get(item["call_id"]) or open_command(self.group, item["call_id"])
            if running and command is not None:
                self.running[int(running.group(1))] = command
            self.part.messages.append(out)
        elif kind == "compaction" or kind == "compaction_summary":
            self.close()  # an encrypted summary (remote compaction): its text is not readable
            self.meta["encrypted_summaries"] = self.meta.get("encrypted_summaries", 0) + 1
        else:
            if kind in CALLS and not isinstance(item.get("call_id") or item.get("id"), str):
                raise self.fail(n, f"a '{kind}' item without a 'call_id'")
            if not self.group:
                self.group_at, self.group_time = len(self.part.messages), self.time
                self.group_usage, self.pending = self.pending, None
            self.group.append(copy.deepcopy(item))  # reasoning, text, calls, web searches

    def _event_msg(self, n: int, p: dict[str, Any]) -> None:
        kind = p.get("type")
        if kind == "turn_aborted":
            self.close()
        if kind == "thread_rolled_back":
            self._rollback(p.get("num_turns"))
        if kind != "token_count" or not isinstance(p.get("info"), dict):
            return  # user_message, agent_message, agent_reasoning: copies of response items
        info = p["info"]
        total = info.get("total_token_usage")
        if total is not None and total == self.last_total:
            return  # reported again (with new rate limits): the same response
        last = info.get("last_token_usage")
        usage = as_usage(last if isinstance(last, dict) else difference(total, self.last_total))
        self.last_total = total
        if self.order == "after":  # after the response's items, before (or after) its tool outputs
            if not self.group:
                self.unreplied("no reply stored", usage)  # the summarization call, an aborted response
            self.group_usage = usage
            self.close()
            return
        self.close()
        if self.pending is not None:
            self.unreplied("no reply stored", self.pending)
        self.pending = usage  # before the response's items

    def _compacted(self, n: int, p: dict[str, Any]) -> None:
        self.close()
        if self.pending is not None:
            self.unreplied("no reply stored", self.pending)
            self.pending = None
        last = self.part.unreplied[-1] if self.part.unreplied else None
        if last is not None and {k: last[k] for k in ("step", "observations", "type")} == self.position("no reply stored"):
            last["type"] = "compaction"  # the summarization call (its reply is the summary)
        before = self.part.messages
        self.parts.append(Part([copy.deepcopy(self.system)] if self.system else []))
        history = p.get("replacement_history")
        if isinstance(history, list):
            skipped = 0
            for item in history:
                kind = item_kind(item) if isinstance(item, dict) else ""
                if isinstance(item, dict) and kind == "message" and item.get("role") in _INPUT_ROLES:
                    self.part.messages.append(input_message(item, self.time))
                elif isinstance(item, dict) and kind == "message" and item.get("role") == "assistant":
                    self.part.messages.append(kept_reply(item, self.time))
                    self.meta["replacement_replies"] = self.meta.get("replacement_replies", 0) + 1
                elif kind not in _SKIPPED:
                    skipped += 1  # an encrypted summary, or output items: not readable as a prompt part
            if skipped:
                self.meta["replacement_items_skipped"] = self.meta.get("replacement_items_skipped", 0) + skipped
            return
        summary = p.get("message")
        self.meta["compactions_rebuilt"] = self.meta.get("compactions_rebuilt", 0) + 1
        context = [m for m in before if m.get("role") in ("user", "developer") and is_context(m)]
        asked = [m for m in before if m.get("role") == "user" and not is_context(m)]
        self.part.messages += [copy.deepcopy(m) for m in [*context, *asked]]
        text = summary if isinstance(summary, str) else ""
        self.part.messages.append({"role": "user", "content": text, "extra": {"timestamp": self.time}})

    def _rollback(self, turns: Any) -> None:
        """Codex dropped the last ``turns`` user turns from its history: later calls' context is
        the history before them. The calls made in those turns stay calls of this context, made
        at the cut (an unreplied call each, with its recorded usage): their reply is in no later
        prompt, and what they read in the dropped turns is not replayed."""
        self.close()
        self.meta["rollbacks"] = self.meta.get("rollbacks", 0) + 1
        messages = self.part.messages
        cut = rollback_cut(messages, turns) if isinstance(turns, int) and not isinstance(turns, bool) else None
        if cut is None or cut >= len(messages):
            return
        stay, made = rolled_back(messages, self.part.unreplied, cut)
        del messages[cut:]
        self.part.unreplied = stay
        for u in made:
            if "usage" in u:  # a dropped reply's call: its prompt and output as recorded
                self.unreplied("rolled back", u["usage"])
            else:
                self.part.unreplied.append({**u, **self.position(u["type"])})
        self.meta["rolled_back_calls"] = self.meta.get("rolled_back_calls", 0) + len(made)  # replied or not

    # ---- responses ------------------------------------------------------------------------------

    def close(self) -> None:
        """End the open response: its items become one assistant message, placed before the tool
        outputs that came while it was open (older Codex wrote each output after its call)."""
        if not self.group:
            return
        reply = reply_message(self.group, KEY)
        for call in reply.get("tool_calls") or []:
            self._read_poll(call)
        extra = reply["extra"]
        if self.group_time is not None:
            extra["timestamp"] = self.group_time
        if self.group_usage is not None:
            extra["response"] = {"usage": self.group_usage}
        self.part.messages.insert(self.group_at, reply)
        self.group = []
        self.group_usage = None

    def _read_poll(self, call: dict[str, Any]) -> None:
        """A ``write_stdin`` that only polls a running command (no input) is read as that command:
        its output is the command's (its first call answered only that it runs). Other shell
        calls' command lines are kept for the polls that may follow."""
        fn = call["function"]
        try:
            args = json.loads(fn["arguments"])
        except ValueError:
            return
        if not isinstance(args, dict):
            return
        if fn["name"] == "bash" and isinstance(args.get("command"), str):
            self.commands[call["id"]] = args["command"]
        elif fn["name"] == "write_stdin" and args.get("chars") in ("", None):
            session = args.get("session_id")
            command = self.running.get(session) if isinstance(session, int) else None
            if command is not None:
                fn["name"], fn["arguments"] = "bash", json.dumps({"command": command}, ensure_ascii=False)
                self.meta["polls_read_as_commands"] = self.meta.get("polls_read_as_commands", 0) + 1

    def position(self, kind: str) -> dict[str, Any]:
        """An unreplied call made now: after the last reply and the messages since."""
        messages = self.part.messages
        replies = [i for i, m in enumerate(messages) if m.get("role") == "assistant" and not is_kept(m)]
        seen = len(messages) - replies[-1] - 1 if replies else len(messages)
        return {"step": len(replies), "observations": seen, "type": kind}

    def unreplied(self, kind: str, usage: dict[str, Any] | None = None) -> None:
        """An unreplied call made now; ``usage``: what its usage event recorded (its prompt size
        and output, e.g. a compaction's summary, then counted as recorded, not estimated)."""
        entry = self.position(kind)
        for key, field_ in (("prompt_tokens", "prompt_tokens"), ("output_tokens", "completion_tokens")):
            n = usage.get(field_) if usage else None
            if isinstance(n, int) and not isinstance(n, bool) and n >= 0:
                entry[key] = n
        self.part.unreplied.append(entry)

    def finish(self) -> None:
        self.close()
        if self.pending is not None:
            self.unreplied("no reply stored", self.pending)
            self.pending = None
        if self.models:
            self.meta["model"] = self.models[0]
            if len(self.models) > 1:
                self.meta["models"] = list(self.models)

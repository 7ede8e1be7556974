"""The append-only history of an agent run, and loaders for recorded trajectory formats.

A ``History`` is a prefix (system prompt, task) followed by steps. Steps are only ever
appended; rendering reads them and never changes them.
"""

from __future__ import annotations

import copy
import gzip
import json
import re
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from .errors import TrajectoryError
from .protocol import parse_head
from .types import Action, Message, Step, content_text, message_digest, step_numbers

CHAT_ROLES = ("system", "user", "assistant", "tool")
_BASH_BLOCK = re.compile(r"```(?:bash|sh|shell)?\s*\n(.*?)\n```", re.DOTALL)
MAX_FILE_BYTES = 512 * 1024 * 1024


class History:
    """Append-only: ``append`` adds a step, nothing removes or edits one."""

    __slots__ = ("_prefix", "_steps", "source", "meta")

    def __init__(self, prefix: Sequence[Message], *, source: str = "", meta: dict[str, Any] | None = None):
        self._prefix: tuple[Message, ...] = tuple(copy.deepcopy(list(prefix)))
        self._steps: list[Step] = []
        self.source = source
        self.meta: dict[str, Any] = dict(meta or {})

    @property
    def prefix(self) -> tuple[Message, ...]:
        return self._prefix

    @property
    def steps(self) -> tuple[Step, ...]:
        return tuple(self._steps)

    def steps_between(self, start: int, stop: int) -> list[Step]:
        """Steps start+1 .. stop (a slice by 0-based offsets), without copying the whole list."""
        return self._steps[start:stop]

    def __len__(self) -> int:
        return len(self._steps)

    def __iter__(self) -> Iterator[Step]:
        return iter(list(self._steps))

    def step(self, index: int) -> Step:
        """Step ``index`` (1-based)."""
        if not 1 <= index <= len(self._steps):
            raise IndexError(f"no step {index}; the history has steps 1-{len(self._steps)}")
        return self._steps[index - 1]

    @property
    def digest(self) -> str:
        return self._steps[-1].digest if self._steps else message_digest(self._prefix)

    def append(
        self, reply: Message, observations: Sequence[Message] = (), *, meta: dict[str, Any] | None = None
    ) -> Step:
        """Add the next step: the agent's reply and the messages that answered it."""
        reply = copy.deepcopy(reply)
        obs = tuple(copy.deepcopy(list(observations)))
        head = parse_head(content_text(reply.get("content")))
        step = Step(
            index=len(self._steps) + 1,
            reply=reply,
            observations=obs,
            actions=tuple(extract_actions(reply)),
            progress=head.progress,
            stale=head.stale,
            has_protocol=head.has_protocol,
            digest=message_digest([reply, *obs], parent=self.digest),
            meta=dict(meta or {}),
        )
        self._steps.append(step)
        return step

    def messages(self) -> list[Message]:
        """The full message list as recorded (a deep copy)."""
        out = list(self._prefix)
        for s in self._steps:
            out.append(s.reply)
            out.extend(s.observations)
        return copy.deepcopy(out)

    # ---- construction -------------------------------------------------------------------

    @classmethod
    def from_messages(cls, messages: Iterable[Message], *, source: str = "", meta: dict[str, Any] | None = None) -> History:
        """Split a chat message list into prefix and steps (one step per assistant message)."""
        prefix: list[Message] = []
        pending: tuple[Message, list[Message]] | None = None
        steps: list[tuple[Message, list[Message]]] = []
        for i, m in enumerate(messages):
            if not isinstance(m, dict):
                raise TrajectoryError(source or "<messages>", f"message {i} is not an object")
            role = m.get("role")
            if not isinstance(role, str) or role not in CHAT_ROLES:
                continue  # e.g. mini's final {"role": "exit"} record is not sent to the model
            if pending is None and m.get("is_demo"):
                prefix.append(m)  # SWE-agent demonstrations: part of the prompt, not model calls
            elif role == "assistant":
                if pending:
                    steps.append(pending)
                pending = (m, [])
            elif pending is None:
                prefix.append(m)
            else:
                pending[1].append(m)
        if pending:
            steps.append(pending)
        h = cls(prefix, source=source, meta=meta)
        for reply, obs in steps:
            h.append(reply, obs, meta=_step_meta(reply, obs))
        return h

    def extend_from_messages(self, messages: Sequence[Message]) -> int:
        """Append the steps of ``messages`` not yet in the history (for live agents). Returns how many.

        ``messages`` must start with the same prefix and steps; only the tail is read. The last
        step is only appended once an assistant message follows it or the list ends with observations.
        """
        known = len(self._prefix) + sum(1 + len(s.observations) for s in self._steps)
        chat = [m for m in messages if isinstance(m, dict) and m.get("role") in CHAT_ROLES]
        tail = chat[known:]
        if not tail:
            return 0
        if tail[0].get("role") != "assistant":
            if not self._steps:
                raise ValueError("messages do not extend this history (prefix changed)")
            raise ValueError(
                f"step {len(self._steps)} gained messages after it was recorded; "
                "an agent's earlier turns must not change"
            )
        added = 0
        pending: tuple[Message, list[Message]] | None = None
        for m in tail:
            if m.get("role") == "assistant":
                if pending:
                    self.append(pending[0], pending[1], meta=_step_meta(*pending))
                    added += 1
                pending = (m, [])
            elif pending:
                pending[1].append(m)
        if pending:
            self.append(pending[0], pending[1], meta=_step_meta(*pending))
            added += 1
        return added


def _step_meta(reply: Message, obs: Sequence[Message]) -> dict[str, Any]:
    meta: dict[str, Any] = {}
    extra = _dict(reply.get("extra"))
    for key in ("refold", "restore_of"):
        if key in extra:
            meta[key] = extra[key]
    usage = _dict(extra.get("response")).get("usage")
    if isinstance(usage, dict):
        details = usage.get("prompt_tokens_details") or {}
        meta["usage"] = {
            "prompt_tokens": usage.get("prompt_tokens"),
            "cached_tokens": details.get("cached_tokens") if isinstance(details, dict) else None,
            "completion_tokens": usage.get("completion_tokens"),
        }
    for o in obs:
        ox = _dict(o.get("extra"))
        if "restore_of" in ox:
            meta["restore_of"] = ox["restore_of"]
        if isinstance(ox.get("refold_result"), dict):
            meta.setdefault("refold_result", []).append(ox["refold_result"])
    if "restore_of" in meta:
        meta["restore_of"] = step_numbers(meta["restore_of"])
    return meta


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def extract_actions(reply: Message) -> list[Action]:
    """The commands of a reply: tool calls, mini's ``extra.actions``, SWE-agent's ``action``, or a ```bash block.

    refold's mini wrapper keeps the actions as issued in ``extra.refold.actions`` when it takes
    context commands out of ``extra.actions``; those win (``tool`` names a function tool).
    """
    kept = _refold_actions(reply)
    if kept is not None:
        return kept
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
            out.append(Action(str(command), name, _call_id(c.get("id"))))
        return out
    actions = _dict(reply.get("extra")).get("actions")
    if isinstance(actions, list) and actions:
        return [
            Action(str(a.get("command", "")), "bash", _call_id(a.get("tool_call_id")))
            for a in actions
            if isinstance(a, dict)
        ]
    if isinstance(reply.get("action"), str) and reply["action"].strip():
        return [Action(reply["action"].strip(), "bash")]
    text = content_text(reply.get("content"))
    return [Action(m.strip(), "bash") for m in _BASH_BLOCK.findall(text)[:1]]


def _refold_actions(reply: Message) -> list[Action] | None:
    actions = _dict(_dict(reply.get("extra")).get("refold")).get("actions")
    if not isinstance(actions, list) or not actions:
        return None
    return [
        Action(str(a.get("command", "")), str(a.get("tool") or "bash"), _call_id(a.get("tool_call_id")))
        for a in actions
        if isinstance(a, dict)
    ]


def _call_id(value: Any) -> str | None:
    return value if isinstance(value, str) else None if value is None else str(value)


# ---- loading files ------------------------------------------------------------------------


def read_json(path: str | Path) -> Any:
    """Read a JSON file (``.gz`` too) with one-line errors naming the file."""
    p = Path(path)
    name = str(path)
    try:
        size = p.stat().st_size
    except OSError as e:
        raise TrajectoryError(name, f"cannot read file ({e.strerror or e})") from None
    if size > MAX_FILE_BYTES:
        raise TrajectoryError(name, f"file is {size} bytes, more than the {MAX_FILE_BYTES} byte limit")
    try:
        raw = p.read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
    except (OSError, EOFError, gzip.BadGzipFile) as e:
        raise TrajectoryError(name, f"corrupt or truncated gzip data ({e})") from None
    if not raw.strip():
        raise TrajectoryError(name, "file is empty")
    try:
        text = raw.decode("utf-8-sig")  # a byte-order mark (Windows editors) is not an error
    except UnicodeDecodeError as e:
        raise TrajectoryError(name, f"not UTF-8 text (bad byte at offset {e.start})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        return _json_lines(text, name, e)
    except RecursionError:
        raise TrajectoryError(name, "JSON nested too deeply to be a trajectory") from None


def _json_lines(text: str, name: str, first: json.JSONDecodeError) -> Any:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if len(lines) > 1:
        try:
            return [json.loads(ln) for ln in lines]
        except (json.JSONDecodeError, RecursionError):
            pass
    raise TrajectoryError(name, f"invalid JSON at line {first.lineno} column {first.colno}: {first.msg}")


def detect_format(data: Any) -> str:
    """Name the trajectory format of parsed JSON, or raise ValueError saying what is missing."""
    if isinstance(data, list):
        if data and all(isinstance(m, dict) and "role" in m for m in data):
            return "messages"
        raise ValueError("a JSON list that is not a list of chat messages (objects with 'role')")
    if not isinstance(data, dict):
        raise ValueError("top level is neither an object nor a list of messages")
    fmt = data.get("trajectory_format")
    if isinstance(fmt, str) and fmt.startswith("mini-swe-agent"):
        return fmt
    if "history" in data and "trajectory" in data:
        return "swe-agent"
    if "messages" in data:
        return "messages"
    if isinstance(data.get("history"), list) or isinstance(data.get("trajectory"), list):
        return "swe-agent"  # SWE-agent .traj; some keep only one of history and trajectory
    raise ValueError(
        "unknown trajectory format: expected mini-swe-agent ('trajectory_format', 'messages'), "
        "SWE-agent ('history', 'trajectory') or a list of chat messages"
    )


def load(path: str | Path) -> History:
    """Load a recorded run: mini-swe-agent 1.x/2.x, SWE-agent ``.traj``, refold runs, message lists."""
    name = str(path)
    data = read_json(path)
    try:
        fmt = detect_format(data)
    except ValueError as e:
        raise TrajectoryError(name, str(e)) from None
    if fmt == "swe-agent":
        messages = _sweagent_messages(data, name)
    else:
        messages = data if isinstance(data, list) else data.get("messages")
        if not isinstance(messages, list):
            raise TrajectoryError(name, "field 'messages' is not a list")
    meta: dict[str, Any] = {"format": fmt, "path": name}
    if isinstance(data, dict):
        info = data.get("info") or {}
        if isinstance(info, dict):
            meta["exit_status"] = info.get("exit_status")
            stats = info.get("model_stats") or {}
            meta["api_calls"] = stats.get("api_calls") if isinstance(stats, dict) else None
        meta["instance_id"] = data.get("instance_id")
        config = info.get("config") if isinstance(info, dict) else None
        if isinstance(config, dict) and isinstance(config.get("refold"), dict):
            meta["refold_config"] = config["refold"]  # how a refold run rendered (replay reuses it)
    try:
        history = History.from_messages(messages, source=name, meta=meta)
    except (TypeError, ValueError, AttributeError, KeyError, IndexError, RecursionError) as e:
        reason = " ".join(f"{type(e).__name__}: {e}".split())[:200]
        raise TrajectoryError(name, f"malformed trajectory ({reason})") from None
    if not history.prefix and not len(history):
        raise TrajectoryError(name, "trajectory has no messages")
    if not len(history):
        raise TrajectoryError(name, "trajectory has no assistant replies (no model calls to render)")
    return history


def _sweagent_messages(data: dict[str, Any], name: str) -> list[Message]:
    history = data.get("history")
    if history is None and isinstance(data.get("trajectory"), list):
        return _sweagent_from_trajectory(data["trajectory"], name)
    if not isinstance(history, list):
        raise TrajectoryError(name, "field 'history' is not a list")
    out: list[Message] = []
    for i, m in enumerate(history):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise TrajectoryError(name, f"history[{i}] has no 'role'")
        msg: Message = {"role": m["role"], "content": m.get("content", "")}
        if m.get("is_demo"):
            msg["is_demo"] = True  # a demonstration: prompt prefix, not a model call
        if m.get("tool_calls"):
            msg["tool_calls"] = m["tool_calls"]
        if m["role"] == "tool":
            ids = m.get("tool_call_ids")
            ids = ids if isinstance(ids, list) else [ids] if ids else []
            msg["tool_call_id"] = m.get("tool_call_id") or (ids[0] if ids else None)
        if m["role"] == "assistant" and isinstance(m.get("action"), str) and not m.get("tool_calls"):
            msg["action"] = m["action"]
        out.append(msg)
    return out


def _sweagent_from_trajectory(trajectory: list[Any], name: str) -> list[Message]:
    """A .traj without ``history``: the prompt before the first call (``query``) and one step per entry."""
    out: list[Message] = []
    for i, entry in enumerate(trajectory):
        if not isinstance(entry, dict):
            raise TrajectoryError(name, f"trajectory[{i}] is not an object")
        query = entry.get("query")
        if i == 0 and isinstance(query, list):
            for m in query:
                if not isinstance(m, dict) or m.get("role") == "assistant":
                    break
                out.append({"role": m.get("role"), "content": m.get("content", "")})
        response = entry.get("response")
        action = entry.get("action")
        if not isinstance(response, str) or not response.strip():
            thought = entry.get("thought") if isinstance(entry.get("thought"), str) else ""
            response = (
                f"{thought}\n\n```\n{action}\n```" if isinstance(action, str) and action.strip() else thought
            )
        reply: Message = {"role": "assistant", "content": response}
        if isinstance(action, str) and action.strip():
            reply["action"] = action
        out.append(reply)
        observation = entry.get("observation")
        if observation is not None:
            out.append(
                {
                    "role": "user",
                    "content": observation
                    if isinstance(observation, str)
                    else json.dumps(observation, default=str),
                }
            )
    return out

"""Loading recorded runs from files: mini-swe-agent 1.x/2.x, SWE-agent ``.traj``, message lists.

Every problem with a file becomes one ``TrajectoryError`` naming the file and what is wrong.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

from .errors import TrajectoryError
from .history import History
from .types import Message

MAX_FILE_BYTES = 512 * 1024 * 1024

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

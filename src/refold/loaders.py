"""Loading recorded runs from files: mini-swe-agent 1.x/2.x, SWE-agent ``.traj``, Claude Code logs, Codex
rollouts, message lists.

Every problem with a file becomes one ``TrajectoryError`` naming the file and what is wrong.
"""

from __future__ import annotations

import gzip
import io
import json
import re
import stat
from pathlib import Path
from typing import Any

from .errors import TrajectoryError
from .formats import codex
from .formats.claude_code import FORMAT as CLAUDE_CODE
from .formats.claude_code import is_claude_code, session_messages, session_names
from .history import History
from .integrations.mini_record import read_pins
from .integrations.mini_responses import is_responses_run, to_chat
from .loader_checks import check_parts, check_tool_calls
from .scrub import scrub_calls, scrub_value

__all__ = ["AGENT_SEP", "agent_names", "detect_format", "load", "load_all", "read_json", "split_source", "unreplied_calls"]
from .types import Message

MAX_FILE_BYTES = 512 * 1024 * 1024

def read_json(path: str | Path, *, scrub: bool = True) -> Any:
    """Read a JSON file (``.gz`` too) with one-line errors naming the file; lone surrogates become
    U+FFFD unless ``scrub`` is off (to write the file back as it was)."""
    p = Path(path)
    name = str(path)
    try:
        st = p.stat()
    except OSError as e:
        raise TrajectoryError(name, f"cannot read file ({e.strerror or e})") from None
    if stat.S_ISDIR(st.st_mode):
        raise TrajectoryError(name, "is a folder, not a trajectory file")
    if not stat.S_ISREG(st.st_mode):  # /dev/zero never ends, a FIFO waits for a writer
        raise TrajectoryError(name, "not a regular file (a device, FIFO or socket)")
    if st.st_size > MAX_FILE_BYTES:
        raise TrajectoryError(name, f"file is {st.st_size} bytes, more than the {MAX_FILE_BYTES} byte limit")
    try:
        raw = p.read_bytes()
        if raw[:2] == b"\x1f\x8b":  # read at most one byte past the limit: a small bomb stays small
            with gzip.GzipFile(fileobj=io.BytesIO(raw)) as z:
                raw = z.read(MAX_FILE_BYTES + 1)
            if len(raw) > MAX_FILE_BYTES:
                raise TrajectoryError(name, f"gzip data expands to more than the {MAX_FILE_BYTES} byte limit")
    except (OSError, EOFError, gzip.BadGzipFile) as e:
        raise TrajectoryError(name, f"corrupt or truncated gzip data ({e})") from None
    if not raw.strip():
        raise TrajectoryError(name, "file is empty")
    kind = _not_json(raw)
    if kind:  # `refold view report.html`: "invalid JSON at line 1 column 1" said nothing useful
        raise TrajectoryError(name, f"{kind}, not a trajectory (a JSON file)")
    try:
        text = raw.decode("utf-8-sig")  # a byte-order mark (Windows editors) is not an error
    except UnicodeDecodeError as e:
        raise TrajectoryError(name, f"not UTF-8 text (bad byte at offset {e.start})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        data = _json_lines(text, name, e)
    except RecursionError:
        raise TrajectoryError(name, "JSON nested too deeply to be a trajectory") from None
    # a lone surrogate only comes from an escape of one in the text (UTF-8 cannot carry it)
    return scrub_value(data) if scrub and _SURROGATE_ESCAPE.search(text) else data


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


_MAGIC = ((b"\x89PNG", "a PNG image"), (b"%PDF", "a PDF file"), (b"PK\x03\x04", "a zip archive"))


def _not_json(raw: bytes) -> str:
    """What a file that is plainly no JSON is (an HTML report, an image), or ''."""
    head = raw[:512].lstrip(b"\xef\xbb\xbf \t\r\n").lower()
    if head.startswith((b"<!doctype html", b"<html")):
        return "an HTML page (refold view writes these)"
    if head.startswith(b"<svg") or (head.startswith(b"<?xml") and b"<svg" in head):
        return "an SVG image"
    return next((what for magic, what in _MAGIC if raw.startswith(magic)), "")


def _json_lines(text: str, name: str, first: json.JSONDecodeError) -> Any:
    lines = text.splitlines()
    if sum(1 for ln in lines if ln.strip()) > 1 and first.msg == "Extra data":  # JSON Lines: one value a line
        out = []
        for n, ln in enumerate(lines, 1):
            if not ln.strip():
                continue
            try:
                out.append(json.loads(ln))
            except json.JSONDecodeError as e:
                raise TrajectoryError(name, f"invalid JSON Lines at line {n} column {e.colno}: {e.msg}") from None
            except RecursionError:
                raise TrajectoryError(name, f"JSON nested too deeply at line {n}") from None
        return out
    raise TrajectoryError(name, f"invalid JSON at line {first.lineno} column {first.colno}: {first.msg}")


def detect_format(data: Any) -> str:
    """Name the trajectory format of parsed JSON, or raise ValueError saying what is missing."""
    if _predictions(data):
        raise ValueError("a SWE-bench predictions file (instance id -> model_patch), not a recorded run")
    if is_claude_code(data):
        return CLAUDE_CODE
    if codex.is_rollout(data):
        return codex.FORMAT
    if isinstance(data, list):
        bad = next((i for i, m in enumerate(data) if not (isinstance(m, dict) and "role" in m)), None)
        if data and bad is None:
            return "messages"
        which = f"; item {bad} is {_kind(data[bad])}" if bad is not None else " (it is empty)"
        raise ValueError(f"a JSON list that is not a list of chat messages (objects with 'role'){which}")
    if not isinstance(data, dict):
        raise ValueError("top level is neither an object nor a list of messages")
    own = data.get("format")
    if isinstance(own, str) and own.startswith(("refold-replay", "refold-simulate", "refold-serversim")):
        raise ValueError(f"a report refold wrote ({own}), not a recorded run")
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


_PREDICTION_KEYS = frozenset({"model_patch", "model_name_or_path"})


def _predictions(data: Any) -> bool:
    """What ``mini-extra swebench`` (``preds.json``) and SWE-agent (``all_preds.jsonl``) write next
    to the runs: a patch per instance, as a mapping by instance id or a list of records."""
    rows = list(data.values()) if isinstance(data, dict) else data if isinstance(data, list) else []
    return bool(rows) and all(isinstance(r, dict) and "role" not in r and _PREDICTION_KEYS & r.keys() for r in rows)


def _kind(value: Any) -> str:
    if isinstance(value, dict):
        return "an object without 'role'"
    text = json.dumps(value, default=str)
    return "not an object: " + (text if len(text) <= 30 else text[:27] + "...")


AGENT_SEP = "#"
"""``FILE#Agent`` names one agent's session of a multi-agent file (``run.traj#Programmer``)."""


def split_source(path: str | Path) -> tuple[str, str | None]:
    """``("run.traj", "Programmer")`` for ``run.traj#Programmer``; a path that exists as given is
    never split (a ``#`` may be part of a file name)."""
    name = str(path)
    if AGENT_SEP not in name or _exists(name):
        return name, None
    file, _, agent = name.rpartition(AGENT_SEP)
    return (file, agent) if file and agent else (name, None)


def _exists(name: str) -> bool:
    try:
        return Path(name).exists()
    except OSError:  # e.g. a name too long for the file system
        return False


def agent_names(data: Any) -> list[str]:
    """The agents of a multi-agent SWE-agent/CodeR file, in order of first appearance.

    One entry (e.g. SWE-agent's ``main``) or none means a single-agent file: ``[]``. A Claude Code
    log's sessions (main, compactions, subagents) are named the same way, and so are a Codex
    rollout's contexts (one more per compaction): ``part1``, ``part2``...
    """
    if is_claude_code(data):
        return session_names(data)
    if codex.is_rollout(data):
        return codex.part_names(data)
    if not isinstance(data, dict) or not isinstance(data.get("history"), list):
        return []
    names = list(
        dict.fromkeys(
            m["agent"] for m in data["history"] if isinstance(m, dict) and isinstance(m.get("agent"), str)
        )
    )
    return names if len(names) > 1 else []


def load(path: str | Path) -> History:
    """Load a recorded run: mini-swe-agent 1.x/2.x, SWE-agent ``.traj``, refold runs, message lists.

    A multi-agent file (CodeR: each ``history[]`` entry names its ``agent``) holds one conversation
    per agent, each sent to the model on its own: ``load("run.traj#Programmer")`` loads one of
    them (``#programmer`` too, when only one agent's name matches in any case), ``load_all`` every one. ``load`` of such a file without an agent is an error naming the
    agents, because merging them would replay prompts no model was sent.
    """
    file, agent = split_source(path)
    data = read_json(file)
    names = agent_names(data)
    if agent is None and names:
        raise TrajectoryError(
            file,
            f"holds {len(names)} {_agents_word(data)} ({_listed(names)}); name one as '{file}{AGENT_SEP}{_short(names[0])}' "
            "(refold replay and simulate take every agent; in Python, refold.loaders.load_all)",
        )
    if agent is not None and agent not in names:
        same = [n for n in names if n.casefold() == agent.casefold()]  # run.traj#programmer
        if len(same) == 1:
            return _history(data, file, same[0])
        known = _listed(names) if names else "none: it is a single-agent file"
        raise TrajectoryError(file, f"no agent {_short(agent)!r} (agents: {known})")
    return _history(data, file, agent)


def _agents_word(data: Any) -> str:
    if is_claude_code(data):
        return "sessions"
    return "contexts (Codex compacted its history)" if codex.is_rollout(data) else "agents"


def _short(name: str, limit: int = 40) -> str:
    name = " ".join(name.split())
    return name if len(name) <= limit else name[: limit - 3] + "..."


def _listed(names: list[str], limit: int = 8) -> str:
    """Agent names for a one-line error (a mangled file may hold thousands, or huge ones)."""
    shown = ", ".join(_short(n) for n in names[:limit])
    return shown + (f", ... ({len(names) - limit} more)" if len(names) > limit else "")


def load_all(path: str | Path) -> list[History]:
    """Every session of a file: one ``History`` per agent of a multi-agent file (``source`` and
    ``meta["session"]`` are ``FILE#Agent``), else ``[load(path)]``. ``FILE#Agent`` gives that one."""
    file, agent = split_source(path)
    if agent is not None:
        return [load(path)]
    data = read_json(file)
    names = agent_names(data)
    if not names:
        return [_history(data, file, None)]
    return [_history(data, file, a) for a in names]


def _file_stats(data: dict[str, Any]) -> dict[str, Any]:
    info = data.get("info")
    stats = info.get("model_stats") if isinstance(info, dict) else None
    if not isinstance(stats, dict):
        return {}
    return {
        k: stats[k]
        for k in ("api_calls", "tokens_sent", "tokens_received", "instance_cost")
        if isinstance(stats.get(k), int | float) and not isinstance(stats.get(k), bool)
    }


def _model_name(data: dict[str, Any]) -> str | None:
    info = data.get("info")
    config = info.get("config") if isinstance(info, dict) else None
    model = config.get("model") if isinstance(config, dict) else None
    name = model.get("model_name") if isinstance(model, dict) else None
    return name if isinstance(name, str) else None


def _history(data: Any, name: str, agent: str | None) -> History:
    try:
        fmt = detect_format(data)
    except ValueError as e:
        raise TrajectoryError(name, str(e)) from None
    source = name if agent is None else f"{name}{AGENT_SEP}{agent}"
    extra: dict[str, Any] = {}
    unreplied: list[dict[str, Any]] | None = None
    if fmt == codex.FORMAT:
        parts, found = codex.read_rollout(data, name)
        part = parts[agent_names(data).index(agent)] if agent is not None else parts[0]
        messages, unreplied, extra = part.messages, part.unreplied, found
    elif fmt == "swe-agent":
        messages = _sweagent_messages(data, name, agent)
    elif fmt == CLAUDE_CODE:
        messages, extra = session_messages(data, name, agent)
        unreplied = extra.pop("unreplied", None)  # a compaction's summarization call
    else:
        messages = data if isinstance(data, list) else data.get("messages")
        if not isinstance(messages, list):
            raise TrajectoryError(name, "field 'messages' is not a list")
        if is_responses_run(messages):  # mini's Responses-API models keep response objects and items
            messages = to_chat(messages)
    check_tool_calls(messages, name)
    check_parts(messages, name)
    for m in messages:  # arguments are JSON text: their own escapes may decode to lone surrogates
        if isinstance(m, dict):
            scrub_calls(m)
    meta: dict[str, Any] = {"format": fmt, "path": name, "session": source, **extra}
    if isinstance(data, dict) and fmt != codex.FORMAT:
        info = data.get("info") or {}
        stats = _file_stats(data)
        if isinstance(info, dict):
            meta["exit_status"] = info.get("exit_status")
            # a multi-agent file's stats are the whole file's: kept apart from the agent's own
            meta["api_calls"] = stats.get("api_calls") if agent is None else None
        if stats:
            meta["file_stats"] = stats
        meta["instance_id"] = data.get("instance_id")
        model = _model_name(data)
        if model:
            meta["model"] = model
        config = info.get("config") if isinstance(info, dict) else None
        if isinstance(config, dict) and isinstance(config.get("refold"), dict):
            meta["refold_config"] = config["refold"]  # how a refold run rendered (replay reuses it)
    if agent is not None:
        meta["agent"] = agent
    try:
        history = History.from_messages(messages, source=source, meta=meta)
    except (TypeError, ValueError, AttributeError, KeyError, IndexError, RecursionError) as e:
        reason = " ".join(f"{type(e).__name__}: {e}".split())[:200]
        raise TrajectoryError(source, f"malformed trajectory ({reason})") from None
    if not history.prefix and not len(history):
        raise TrajectoryError(source, "trajectory has no messages")
    if not len(history):
        raise TrajectoryError(source, "trajectory has no assistant replies (no model calls to render)")
    try:
        history.load_pins(read_pins(data, source))  # a refold run's user pins (``refold sessions pin``)
    except ValueError as e:
        raise TrajectoryError(source, str(e).removeprefix(f"{source}: ")) from None
    unreplied = unreplied_calls(messages) if unreplied is None else unreplied
    if unreplied:
        history.meta["unreplied"] = unreplied
    if any(s.reply.get("tool_calls") for s in history.steps):
        history.meta["tool_calls"] = True  # the requests carried tool schemas (see refold.tokens)
    return history


def unreplied_calls(messages: list[Any]) -> list[dict[str, Any]]:
    """Model calls whose reply was not stored (mini 2.x: a ``user`` message with
    ``extra.interrupt_type`` ``FormatError`` that does not answer an assistant message). The other
    interrupt types are the person's (``UserInterruption``, ``UserRejection``, ``UserNewTask``):
    a message typed in, no model call.

    The call's prompt was every message before the interrupt. Each entry places it in the
    History: ``{"step": t, "observations": j, "type": ...}`` = after step t's reply and its first
    j observations (t = 0: within the prefix, j = prefix messages sent). The History itself stays
    one step per stored reply; replay reads this list from ``History.meta["unreplied"]``.
    """
    out: list[dict[str, Any]] = []
    step, seen, prev_role = 0, 0, None
    for m in messages:
        if not isinstance(m, dict) or m.get("role") not in ("system", "user", "assistant", "tool"):
            continue
        role = m["role"]
        if role == "assistant" and not (step == 0 and m.get("is_demo")):
            step, seen = step + 1, 0
        else:
            extra = m.get("extra")
            kind = extra.get("interrupt_type") if isinstance(extra, dict) else None
            if kind == "FormatError" and prev_role != "assistant":
                out.append({"step": step, "observations": seen, "type": kind})
            seen += 1
        prev_role = role
    return out


def _sweagent_messages(data: dict[str, Any], name: str, agent: str | None = None) -> list[Message]:
    history = data.get("history")
    if history is None and isinstance(data.get("trajectory"), list):
        return _sweagent_from_trajectory(data["trajectory"], name)
    if not isinstance(history, list):
        raise TrajectoryError(name, "field 'history' is not a list")
    out: list[Message] = []
    for i, m in enumerate(history):
        if agent is not None and isinstance(m, dict) and m.get("agent") != agent:
            continue  # another agent's conversation: never part of this one's prompts (nor its faults)
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

"""Loading recorded runs from files: mini-swe-agent 1.x/2.x, SWE-agent ``.traj``, Claude Code logs, Codex
rollouts, message lists.

Every problem with a file becomes one ``TrajectoryError`` naming the file and what is wrong.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .errors import TrajectoryError
from .formats import codex
from .formats.claude_code import FORMAT as CLAUDE_CODE
from .formats.claude_code import is_claude_code, session_messages, session_names
from .formats.mini import read_pins, unreplied_calls
from .formats.mini_responses import is_responses_run, to_chat
from .formats.sweagent import sweagent_messages
from .history import History
from .json_file import read_json
from .loader_checks import check_parts, check_tool_calls
from .scrub import scrub_calls

__all__ = ["AGENT_SEP", "agent_names", "detect_format", "load", "load_all", "split_source"]


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
        "SWE-agent ('history', 'trajectory'), a Claude Code session log or Codex rollout (JSON Lines) "
        "or a list of chat messages"
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
    """Load a recorded run: mini-swe-agent 1.x/2.x, SWE-agent ``.traj``, a Claude Code log, a Codex
    rollout, refold runs, message lists.

    A multi-agent file (CodeR: each ``history[]`` entry names its ``agent``; a log's sessions or
    contexts alike) holds one conversation per agent, each sent to the model on its own:
    ``load("run.traj#Programmer")`` loads one of them (``#programmer`` too, when only one agent's
    name matches in any case), ``load_all`` every one. ``load`` of such a file without an agent is
    an error naming the agents, because merging them would replay prompts no model was sent.
    """
    file, agent = split_source(path)
    data = read_json(file)
    names = agent_names(data)
    if agent is None and names:
        raise TrajectoryError(
            file,
            f"holds {len(names)} {_agents_word(data)} ({_listed(names)}); name one as '{file}{AGENT_SEP}{_short(names[0])}' "
            f"(refold replay and simulate take every one; in Python, refold.loaders.load_all)",
        )
    if agent is not None and agent not in names:
        same = [n for n in names if n.casefold() == agent.casefold()]  # run.traj#programmer
        if len(same) == 1:
            return _history(data, file, same[0])
        if not names and agent.casefold() == _sole_name(data):  # FILE#main of a log with one session
            return _history(data, file, None)
        one = _agents_word(data).split()[0].removesuffix("s")
        single = f"it holds one, named without '{AGENT_SEP}'" if _sole_name(data) else "it is a single-agent file"
        known = _listed(names) if names else f"none: {single}"
        raise TrajectoryError(file, f"no {one} {_short(agent)!r} ({one}s: {known})")
    return _history(data, file, agent)


def _sole_name(data: Any) -> str | None:
    """What the only session of a log is called where a log with several names them (Claude Code's
    ``main``, Codex's ``part1``): the docs' ``FILE#main`` must work on a log with just one."""
    if is_claude_code(data):
        return "main"
    return "part1" if codex.is_rollout(data) else None


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
        messages = sweagent_messages(data, name, agent)
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
    if not len(history) and fmt == codex.FORMAT:
        raise TrajectoryError(
            source, "Codex rollout holds no finished model response (none started, or the first is still running): no model call to render"
        )
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

"""Claude Code session logs (``~/.claude/projects/<project>/<session>.jsonl``) as recorded runs.

A log is one JSON object a line. Only ``user``/``assistant`` lines with a ``message`` (an Anthropic
Messages API message) carry the conversation; the other kinds (``summary``, ``system``,
``file-history-snapshot``, ``queue-operation``, ``progress``, ...) are skipped, but their
``uuid``/``parentUuid`` links are followed. How a file becomes sessions (see docs/formats.md):

* Lines form trees by ``parentUuid``. Each tree is one context sent to the model: the main
  conversation, each compaction's continuation (a ``compact_boundary`` starts a new tree, whose
  first user message is the summary: the prompts after it hold the summary, not the old
  messages), and each subagent's conversation (``isSidechain`` lines; a link between a sidechain
  line and a main one is not followed). One tree is a single-session file; more are named
  ``main``, ``compact-N``, ``main-N`` and ``agent-<agentId>`` (else ``sidechain-N``), as in
  ``FILE#compact-1``.
* Within a tree the live conversation is the chain ending at its last line (edits and retries
  leave dead branches). The lines of one API response share ``message.id`` and are one reply;
  the results of its tool calls may hang off any of its lines, so they are taken by
  ``tool_use_id`` (the live chain's copy first).
* A ``compact_boundary`` names (``logicalParentUuid``) the context it summarized: that session
  ends with the summarization call, whose reply (the summary) starts the next one
  (``unreplied``, as for Codex; 2.1.x also writes it to ``subagents/agent-acompact-*.jsonl``).
* Synthetic assistant lines (model ``<synthetic>``, API error notices) were no model call: dropped.
  A ``uuid`` seen twice keeps its first line (compaction may re-emit earlier lines).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from ..errors import TrajectoryError
from ..types import Message
from .claude_code_blocks import one_turn, reply_message, usage_record, user_messages
from .claude_code_tree import (
    CONVERSATION,
    KINDS,
    Log,
    Tree,
    is_call,
    is_line,
    live_lines,
    read_log,
    response_key,
)

__all__ = ["FORMAT", "NOTE", "is_claude_code", "session_messages", "session_names"]

FORMAT = "claude-code"
NOTE = "the system prompt and tool schemas Claude Code sent are not in its log: counts are of the messages only"


def is_claude_code(data: Any) -> bool:
    """Parsed JSON Lines (a list; one line alone parses as an object) from a Claude Code log."""
    if isinstance(data, dict):
        return is_line(data) or (str(data.get("type")) in KINDS and ("leafUuid" in data or "sessionId" in data))
    if not isinstance(data, list) or not data or any(isinstance(item, dict) and "role" in item for item in data[:50]):
        return False
    return any(map(is_line, data)) or all(isinstance(item, dict) and str(item.get("type")) in KINDS for item in data)


def _names(log: Log) -> list[str]:
    out: list[str] = []
    main = compact = side = 0
    agents = [_agent_id(log, t) for t in log.trees if t.sidechain]
    for t in log.trees:
        if t.sidechain:
            side += 1
            agent = _agent_id(log, t)
            out.append(f"agent-{agent}" if agent and agents.count(agent) == 1 else f"sidechain-{side}")
        elif t.compaction and main:
            compact += 1
            out.append(f"compact-{compact}")
        else:
            main += 1
            out.append("main" if main == 1 else f"main-{main}")
    return out


def _agent_id(log: Log, tree: Tree) -> str | None:
    """The subagent's ``agentId`` (newer versions stamp it on its lines), when a short plain id."""
    agent = log.items[tree.lines[0]].get("agentId")
    return agent if isinstance(agent, str) and 0 < len(agent) <= 40 and agent.replace("-", "").isalnum() else None


def session_names(data: Any) -> list[str]:
    """The sessions of a log (``[]`` when it holds one conversation, or none, or cannot be read:
    loading it then says why, naming the file)."""
    try:
        log = read_log(data, "")
    except TrajectoryError:
        return []
    return _names(log) if len(log.trees) > 1 else []


def session_messages(data: Any, name: str, session: str | None) -> tuple[list[Message], dict[str, Any]]:
    """The chat messages of one session (the only one when ``session`` is None) and its meta."""
    log = read_log(data, name)
    if not log.trees:
        if any(is_line(item) for item in log.items):
            raise TrajectoryError(name, "Claude Code log has no assistant replies (no model calls to render)")
        raise TrajectoryError(name, "Claude Code log holds no conversation (only summary or bookkeeping lines)")
    names = _names(log)
    if session is None:
        tree = log.trees[0]
    elif session in names:
        tree = log.trees[names.index(session)]
    else:
        raise TrajectoryError(name, f"no session {session!r} (sessions: {', '.join(names)})")
    lines = live_lines(log, tree)
    messages = _messages(log, lines)
    meta = _meta(log, lines)
    unread = _not_read(log, lines)
    if unread:
        meta["not_read"] = unread
    inside = {_agent_id(log, t) for t in log.trees if t.sidechain}
    elsewhere = [a for a in _subagent_ids(log) if a not in inside]
    if elsewhere:  # their calls are in <session>/subagents/agent-<id>.jsonl (the report checks they were read)
        meta["subagents"] = elsewhere
    if tree.root in log.compacted:  # the summarization call: its reply is not in this session
        replies = [k for k, m in enumerate(messages) if m.get("role") == "assistant"]
        # its reply (the summary the next session starts with: replay counts its tokens) and prompt size
        entry = {"step": len(replies), "observations": len(messages) - replies[-1] - 1, "type": "compaction"}
        meta["unreplied"] = [{**entry, **log.compacted[tree.root]}]
    return messages, meta


def _subagent_ids(log: Log) -> list[str]:
    """The subagents a log names (2.1.x: its Task results' ``toolUseResult.agentId``, its
    ``agent_progress`` lines), in order: each ran in its own ``agent-<id>.jsonl``."""
    out: dict[str, None] = {}
    for item in log.items:
        data, result = item.get("data"), item.get("toolUseResult")
        for holder in (data if isinstance(data, dict) and data.get("type") == "agent_progress" else None, result):
            agent = holder.get("agentId") if isinstance(holder, dict) else None
            if isinstance(agent, str) and 0 < len(agent) <= 40 and agent.replace("-", "").isalnum():
                out[agent] = None
    return list(out)


_READ_BLOCKS = frozenset({"text", "image", "tool_use", "tool_result", "thinking", "redacted_thinking"})


def _not_read(log: Log, lines: list[int]) -> dict[str, int]:
    """What the session's lines hold that is not read (a newer version's blocks, server tool
    blocks) and the file's line kinds this loader does not know: counted for the report, never
    dropped without a word."""
    out: dict[str, int] = {}
    for item in log.items:
        kind = item.get("type")
        if not (isinstance(kind, str) and (kind in KINDS or kind in CONVERSATION)):
            what = f"'{kind}' line" if isinstance(kind, str) else "untyped line"
            out[what] = out.get(what, 0) + 1
        elif kind in CONVERSATION and not is_line(item):  # no message object, or no id: not a turn
            out[f"malformed '{kind}' line"] = out.get(f"malformed '{kind}' line", 0) + 1
    for i in lines:
        content = log.items[i]["message"].get("content")
        for b in content if isinstance(content, list) else []:
            kind = b.get("type") if isinstance(b, dict) else None
            if isinstance(kind, str) and kind not in _READ_BLOCKS:
                out[f"'{kind}' block"] = out.get(f"'{kind}' block", 0) + 1
    return out


def _messages(log: Log, lines: list[int]) -> list[Message]:
    """Replies merged by response, each followed by its tool results in the order they were
    written, then the other user messages before the next reply as one turn: what Claude Code's
    ``normalizeMessagesForAPI`` sends (it joins consecutive user messages in list order)."""
    items = log.items
    turns: list[tuple[str, list[int]]] = []  # ("reply", lines of one response) | ("user", [line])
    where: dict[str, int] = {}
    for i in lines:
        item = items[i]
        if item.get("type") == "assistant":
            if not is_call(item):
                continue
            k = response_key(item)
            if k in where:
                turns[where[k]][1].append(i)
                continue
            where[k] = len(turns)
            turns.append(("reply", [i]))
        else:
            turns.append(("user", [i]))
    out: list[Message] = []
    results: list[Message] = []
    others: list[Message] = []

    def flush() -> None:
        out.extend(results)
        out.extend(one_turn(others))
        results.clear()
        others.clear()

    for kind, idx in turns:
        try:
            if kind == "reply":
                flush()
                group = [items[i] for i in idx]
                out.append(reply_message(group, usage_record(group)))
            else:
                r, o = user_messages(items[idx[0]])
                results.extend(r)
                others.extend(o)
        except ValueError as e:  # the message of one line cannot be read
            raise log.fail(idx[-1], str(e)) from None
    flush()
    return out


def _meta(log: Log, lines: list[int]) -> dict[str, Any]:
    meta: dict[str, Any] = {"note": NOTE}
    models = [m for i in lines if is_call(log.items[i]) and isinstance(m := log.items[i]["message"].get("model"), str)]
    counts = Counter(models)  # in order of first use: a tie goes to the first used, in every process
    if counts:
        meta["model"] = counts.most_common(1)[0][0]
    if len(counts) > 1:  # a /model switch mid-session: priced and fitted as the most common
        meta["models"] = dict(counts.most_common())
    head = log.items[lines[0]]
    for key, out in (("sessionId", "session_id"), ("version", "claude_code_version"), ("cwd", "cwd"), ("agentId", "agent_id")):
        if isinstance(head.get(key), str):
            meta[out] = head[key]
    return meta

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

import gzip
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import TrajectoryError
from ..types import Message
from .claude_code_blocks import one_turn, reply_message, usage_record, user_messages

__all__ = ["FORMAT", "NOTE", "is_claude_code", "session_messages", "session_names"]

FORMAT = "claude-code"
NOTE = "the system prompt and tool schemas Claude Code sent are not in its log: counts are of the messages only"
_CONVERSATION = ("user", "assistant")
_KINDS = frozenset({
    "user", "assistant", "system", "summary", "file-history-snapshot", "queue-operation", "progress",
    "turn_end", "compact_boundary", "attachment", "custom-title", "tag",
})  # fmt: skip


def _is_line(item: Any) -> bool:
    """A conversation line of a Claude Code log (a chat message never has these three keys together)."""
    return (
        isinstance(item, dict)
        and item.get("type") in _CONVERSATION
        and isinstance(item.get("message"), dict)
        and ("uuid" in item or "sessionId" in item or "parentUuid" in item)
    )


def is_claude_code(data: Any) -> bool:
    """Parsed JSON Lines (a list; one line alone parses as an object) from a Claude Code log."""
    if isinstance(data, dict):
        return _is_line(data) or (str(data.get("type")) in _KINDS and ("leafUuid" in data or "sessionId" in data))
    if not isinstance(data, list) or not data or any(isinstance(item, dict) and "role" in item for item in data[:50]):
        return False
    return any(map(_is_line, data)) or all(isinstance(item, dict) and str(item.get("type")) in _KINDS for item in data)


@dataclass(slots=True)
class _Tree:
    root: int  # index of the root line
    lines: list[int] = field(default_factory=list)  # conversation lines, in file order
    sidechain: bool = False
    compaction: bool = False


@dataclass(slots=True)
class _Log:
    name: str
    items: list[Any]
    first: dict[str, int] = field(default_factory=dict)  # uuid -> index of its first line
    trees: list[_Tree] = field(default_factory=list)
    compacted: dict[int, dict[str, Any]] = field(default_factory=dict)
    """Roots of the trees a compaction summarized -> what the log records of that call: ``summary``
    (its reply), ``prompt_tokens`` (``compactMetadata.preTokens``)."""

    def fail(self, index: int, reason: str) -> TrajectoryError:
        return TrajectoryError(self.name, f"line {_line_number(self.name, index)}: {reason}")


def _read(data: Any, name: str) -> _Log:
    items = [data] if isinstance(data, dict) else list(data)
    log = _Log(name, items)
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise log.fail(i, f"is {type(item).__name__}, not a JSON object (a Claude Code log line)")
        uuid = item.get("uuid")
        if isinstance(uuid, str) and uuid not in log.first:
            log.first[uuid] = i
    roots: dict[int, _Tree] = {}
    memo: dict[int, int] = {}
    for i in range(len(items)):
        if not _conversation(log, i):
            continue
        root = _root(log, i, memo)
        tree = roots.get(root)
        if tree is None:
            head = items[root]
            tree = roots[root] = _Tree(root, sidechain=head.get("isSidechain") is True)
            tree.compaction = _starts_compaction(head)
        tree.lines.append(i)
    log.trees = [t for t in sorted(roots.values(), key=lambda t: t.lines[0]) if any(_is_call(items[i]) for i in t.lines)]
    # ids are strings; anything else (a mangled line) names no line and is no dict key
    summaries = {p: _text(item) for item in items if item.get("isCompactSummary") is True and isinstance(p := item.get("parentUuid"), str)}
    for i, item in enumerate(items):  # a compaction summarized its context in a model call (its reply is the summary)
        if item.get("subtype") == "compact_boundary":
            parent = item.get("logicalParentUuid")
            j = log.first.get(parent) if isinstance(parent, str) else None
            if j is None:  # a parent never written (seen in 2.1.x): the main line the boundary follows
                j = next((k for k in range(i - 1, -1, -1) if _is_line(items[k]) and items[k].get("isSidechain") is not True), None)
            if j is not None:
                log.compacted[_root(log, j, memo)] = _compaction_call(item, summaries.get(u, "") if isinstance(u := item.get("uuid"), str) else "")
    return log


def _compaction_call(boundary: dict[str, Any], summary: str) -> dict[str, Any]:
    out: dict[str, Any] = {"summary": summary} if summary else {}
    meta = boundary.get("compactMetadata")
    pre = meta.get("preTokens") if isinstance(meta, dict) else None
    if isinstance(pre, int) and not isinstance(pre, bool) and pre > 0:
        out["prompt_tokens"] = pre  # the context's size when it was summarized (the provider's count)
    return out


def _text(item: dict[str, Any]) -> str:
    """The text of a line's message (a compaction's summary), "" if none."""
    message = item.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, list):
        return "".join(str(b.get("text") or "") for b in content if isinstance(b, dict) and b.get("type") == "text")
    return content if isinstance(content, str) else ""


def _conversation(log: _Log, i: int) -> bool:
    item = log.items[i]
    if not _is_line(item):
        return False
    uuid = item.get("uuid")
    return not isinstance(uuid, str) or log.first[uuid] == i  # a re-emitted copy is not a new line


def _is_call(item: dict[str, Any]) -> bool:
    """An assistant line that was a model call (not Claude Code's synthetic notices)."""
    if item.get("type") != "assistant" or item.get("isApiErrorMessage") is True:
        return False
    return bool(item["message"].get("model") != "<synthetic>")


def _starts_compaction(item: dict[str, Any]) -> bool:
    return (
        item.get("subtype") == "compact_boundary"
        or item.get("type") == "compact_boundary"
        or item.get("isCompactSummary") is True
        or "logicalParentUuid" in item
    )


def _parent(log: _Log, i: int) -> int | None:
    """The line ``i`` hangs off, when it is in the file and on the same side (main or sidechain)."""
    item = log.items[i]
    parent = item.get("parentUuid")
    j = log.first.get(parent) if isinstance(parent, str) else None
    if j is None or j == i:
        return None
    if (log.items[j].get("isSidechain") is True) != (item.get("isSidechain") is True):
        return None  # a subagent's first line may name the Task call: still its own conversation
    return j


def _root(log: _Log, i: int, memo: dict[int, int]) -> int:
    path: list[int] = []
    seen: set[int] = set()
    node: int | None = i
    while node is not None and node not in memo and node not in seen:
        seen.add(node)
        path.append(node)
        node = _parent(log, node)
    root = memo[node] if node is not None and node in memo else path[-1]  # a cycle ends at its last new line
    for n in path:
        memo[n] = root
    return root


def _names(log: _Log) -> list[str]:
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


def _agent_id(log: _Log, tree: _Tree) -> str | None:
    """The subagent's ``agentId`` (newer versions stamp it on its lines), when a short plain id."""
    agent = log.items[tree.lines[0]].get("agentId")
    return agent if isinstance(agent, str) and 0 < len(agent) <= 40 and agent.replace("-", "").isalnum() else None


def session_names(data: Any) -> list[str]:
    """The sessions of a log (``[]`` when it holds one conversation, or none, or cannot be read:
    loading it then says why, naming the file)."""
    try:
        log = _read(data, "")
    except TrajectoryError:
        return []
    return _names(log) if len(log.trees) > 1 else []


def session_messages(data: Any, name: str, session: str | None) -> tuple[list[Message], dict[str, Any]]:
    """The chat messages of one session (the only one when ``session`` is None) and its meta."""
    log = _read(data, name)
    if not log.trees:
        if any(_is_line(item) for item in log.items):
            raise TrajectoryError(name, "Claude Code log has no assistant replies (no model calls to render)")
        raise TrajectoryError(name, "Claude Code log holds no conversation (only summary or bookkeeping lines)")
    names = _names(log)
    if session is None:
        tree = log.trees[0]
    elif session in names:
        tree = log.trees[names.index(session)]
    else:
        raise TrajectoryError(name, f"no session {session!r} (sessions: {', '.join(names)})")
    lines = _live(log, tree)
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


def _subagent_ids(log: _Log) -> list[str]:
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


def _not_read(log: _Log, lines: list[int]) -> dict[str, int]:
    """What the session's lines hold that is not read (a newer version's blocks, server tool
    blocks) and the file's line kinds this loader does not know: counted for the report, never
    dropped without a word."""
    out: dict[str, int] = {}
    for item in log.items:
        kind = item.get("type")
        if not (isinstance(kind, str) and (kind in _KINDS or kind in _CONVERSATION)):
            what = f"'{kind}' line" if isinstance(kind, str) else "untyped line"
            out[what] = out.get(what, 0) + 1
    for i in lines:
        content = log.items[i]["message"].get("content")
        for b in content if isinstance(content, list) else []:
            kind = b.get("type") if isinstance(b, dict) else None
            if isinstance(kind, str) and kind not in _READ_BLOCKS:
                out[f"'{kind}' block"] = out.get(f"'{kind}' block", 0) + 1
    return out


def _key(item: dict[str, Any]) -> str:
    mid = item["message"].get("id")
    return f"id:{mid}" if isinstance(mid, str) and mid else f"uuid:{item.get('uuid')}"


def _live(log: _Log, tree: _Tree) -> list[int]:
    """The lines of the live conversation, in file order: the chain ending at the tree's last line,
    every line of each response on it, and the result of each of their tool calls."""
    items = log.items
    spine: set[int] = set()
    node: int | None = tree.lines[-1]
    while node is not None and node not in spine:
        spine.add(node)
        node = _parent(log, node)
    spine &= set(tree.lines)  # the conversation lines on it (the chain also passes other kinds)
    keys = {_key(items[i]) for i in spine if items[i].get("type") == "assistant"}
    chosen = [i for i in tree.lines if i in spine or (items[i].get("type") == "assistant" and _key(items[i]) in keys)]
    calls = {cid for i in chosen for cid in _call_ids(items[i])}
    answered = {cid for i in chosen if i in spine for cid in _result_ids(items[i])}
    for i in tree.lines:
        if i in spine or items[i].get("type") != "user":
            continue
        ids = _result_ids(items[i])
        if ids and ids <= calls and not ids & answered and _only_results(items[i]):
            chosen.append(i)
            answered |= ids
    return sorted(set(chosen))


def _call_ids(item: dict[str, Any]) -> Iterator[str]:
    content = item["message"].get("content") if item.get("type") == "assistant" else None
    for b in content if isinstance(content, list) else ():
        if isinstance(b, dict) and b.get("type") == "tool_use" and isinstance(b.get("id"), str):
            yield b["id"]


def _result_ids(item: dict[str, Any]) -> set[str]:
    content = item["message"].get("content") if item.get("type") == "user" else None
    return {
        b["tool_use_id"]
        for b in (content if isinstance(content, list) else ())
        if isinstance(b, dict) and b.get("type") == "tool_result" and isinstance(b.get("tool_use_id"), str)
    }


def _only_results(item: dict[str, Any]) -> bool:
    content = item["message"].get("content")
    return isinstance(content, list) and all(isinstance(b, dict) and b.get("type") == "tool_result" for b in content)


def _messages(log: _Log, lines: list[int]) -> list[Message]:
    """Replies merged by response, each followed by its tool results in the order they were
    written, then the other user messages before the next reply as one turn: what Claude Code's
    ``normalizeMessagesForAPI`` sends (it joins consecutive user messages in list order)."""
    items = log.items
    turns: list[tuple[str, list[int]]] = []  # ("reply", lines of one response) | ("user", [line])
    where: dict[str, int] = {}
    for i in lines:
        item = items[i]
        if item.get("type") == "assistant":
            if not _is_call(item):
                continue
            k = _key(item)
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


def _meta(log: _Log, lines: list[int]) -> dict[str, Any]:
    meta: dict[str, Any] = {"note": NOTE}
    models = [m for i in lines if _is_call(log.items[i]) and isinstance(m := log.items[i]["message"].get("model"), str)]
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


def _line_number(name: str, index: int) -> int:
    """The file line of the ``index``-th JSON value (blank lines are skipped when reading); only
    read again for an error message."""
    try:
        raw = Path(name).read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
    except (OSError, EOFError, gzip.BadGzipFile):
        return index + 1
    seen = -1
    for n, line in enumerate(raw.splitlines(), 1):
        if line.strip():
            seen += 1
            if seen == index:
                return n
    return index + 1

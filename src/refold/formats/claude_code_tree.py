"""A Claude Code log read into trees: its lines by ``uuid``, each conversation tree by
``parentUuid`` (main / compaction / sidechain), what each compaction summarized, and a tree's live
chain (see formats/claude_code.py for how trees become sessions)."""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import TrajectoryError

CONVERSATION = ("user", "assistant")  # the line kinds that carry the conversation
KINDS = frozenset({
    "user", "assistant", "system", "summary", "file-history-snapshot", "queue-operation", "progress",
    "turn_end", "compact_boundary", "attachment", "custom-title", "tag",
})  # fmt: skip


def is_line(item: Any) -> bool:
    """A conversation line of a Claude Code log (a chat message never has these three keys together)."""
    return (
        isinstance(item, dict)
        and item.get("type") in CONVERSATION
        and isinstance(item.get("message"), dict)
        and ("uuid" in item or "sessionId" in item or "parentUuid" in item)
    )


@dataclass(slots=True)
class Tree:
    """One context sent to the model: the conversation lines sharing a root."""

    root: int  # index of the root line
    lines: list[int] = field(default_factory=list)  # conversation lines, in file order
    sidechain: bool = False
    compaction: bool = False


@dataclass(slots=True)
class Log:
    """A log's lines, its trees that made model calls (file order) and what each compaction summarized."""

    name: str
    items: list[Any]
    first: dict[str, int] = field(default_factory=dict)  # uuid -> index of its first line
    trees: list[Tree] = field(default_factory=list)
    compacted: dict[int, dict[str, Any]] = field(default_factory=dict)
    """Roots of the trees a compaction summarized -> what the log records of that call: ``summary``
    (its reply), ``prompt_tokens`` (``compactMetadata.preTokens``)."""

    def fail(self, index: int, reason: str) -> TrajectoryError:
        return TrajectoryError(self.name, f"line {_line_number(self.name, index)}: {reason}")


def read_log(data: Any, name: str) -> Log:
    """The log's lines into trees (``name``: the file, for errors naming its line)."""
    items = [data] if isinstance(data, dict) else list(data)
    log = Log(name, items)
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise log.fail(i, f"is {type(item).__name__}, not a JSON object (a Claude Code log line)")
        uuid = item.get("uuid")
        if isinstance(uuid, str) and uuid not in log.first:
            log.first[uuid] = i
    roots: dict[int, Tree] = {}
    memo: dict[int, int] = {}
    for i in range(len(items)):
        if not _conversation(log, i):
            continue
        root = _root(log, i, memo)
        tree = roots.get(root)
        if tree is None:
            head = items[root]
            tree = roots[root] = Tree(root, sidechain=head.get("isSidechain") is True)
            tree.compaction = _starts_compaction(head)
        tree.lines.append(i)
    log.trees = [t for t in sorted(roots.values(), key=lambda t: t.lines[0]) if any(is_call(items[i]) for i in t.lines)]
    # ids are strings; anything else (a mangled line) names no line and is no dict key
    summaries = {p: _text(item) for item in items if item.get("isCompactSummary") is True and isinstance(p := item.get("parentUuid"), str)}
    for i, item in enumerate(items):  # a compaction summarized its context in a model call (its reply is the summary)
        if item.get("subtype") == "compact_boundary":
            parent = item.get("logicalParentUuid")
            j = log.first.get(parent) if isinstance(parent, str) else None
            if j is None:  # a parent never written (seen in 2.1.x): the main line the boundary follows
                j = next((k for k in range(i - 1, -1, -1) if is_line(items[k]) and items[k].get("isSidechain") is not True), None)
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


def _conversation(log: Log, i: int) -> bool:
    item = log.items[i]
    if not is_line(item):
        return False
    uuid = item.get("uuid")
    return not isinstance(uuid, str) or log.first[uuid] == i  # a re-emitted copy is not a new line


def is_call(item: dict[str, Any]) -> bool:
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


def _parent(log: Log, i: int) -> int | None:
    """The line ``i`` hangs off, when it is in the file and on the same side (main or sidechain)."""
    item = log.items[i]
    parent = item.get("parentUuid")
    j = log.first.get(parent) if isinstance(parent, str) else None
    if j is None or j == i:
        return None
    if (log.items[j].get("isSidechain") is True) != (item.get("isSidechain") is True):
        return None  # a subagent's first line may name the Task call: still its own conversation
    return j


def _root(log: Log, i: int, memo: dict[int, int]) -> int:
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


def response_key(item: dict[str, Any]) -> str:
    mid = item["message"].get("id")
    return f"id:{mid}" if isinstance(mid, str) and mid else f"uuid:{item.get('uuid')}"


def live_lines(log: Log, tree: Tree) -> list[int]:
    """The lines of the live conversation, in file order: the chain ending at the tree's last line,
    every line of each response on it, and the result of each of their tool calls."""
    items = log.items
    spine: set[int] = set()
    node: int | None = tree.lines[-1]
    while node is not None and node not in spine:
        spine.add(node)
        node = _parent(log, node)
    spine &= set(tree.lines)  # the conversation lines on it (the chain also passes other kinds)
    keys = {response_key(items[i]) for i in spine if items[i].get("type") == "assistant"}
    chosen = [i for i in tree.lines if i in spine or (items[i].get("type") == "assistant" and response_key(items[i]) in keys)]
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

"""Automatic reversible masking (``Policy.mask_after``) for agents that never write STALE.

Behind the boundary, an output more than ``n`` steps older than the boundary becomes a restorable
one-line note. Keyed to the boundary, not to t, so the prompt still changes only when the boundary
moves. A step whose stubs point at a masked step is masked too: nothing may point at hidden content.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from ..protocol import CM
from ..reply_command import command_spans
from ..types import Step


def newly_masked(
    *,
    b: int,
    n: int,
    scanned: int,
    masked: set[int],
    size_of: Callable[[int], int | None],
    cited_by: Callable[[int], Sequence[int]],
    min_chars: int,
    held: Callable[[int], bool] | None = None,
    waiting: set[int] | None = None,
) -> list[int]:
    """Steps to mask now that the boundary is at ``b``; ``scanned`` steps were considered before.

    ``size_of(i)`` is the shown size of step i's outputs (None: folded, nothing to mask);
    ``cited_by(i)`` the steps whose stubs cite step i, ascending (an index kept as steps cross the
    boundary, so a masked step costs what cites it, not a scan of every later step).
    ``held(i)``: step i is still in use (``mask_by = "use"``); it then waits in ``waiting`` and is
    weighed again at the next move.
    """
    fresh = range(scanned + 1, max(0, b - n) + 1)
    candidates = sorted(waiting.union(fresh)) if waiting else fresh
    queue = [i for i in candidates if i not in masked and (size := size_of(i)) is not None and size >= min_chars]
    if held is not None and waiting is not None:
        waiting.clear()
        waiting.update(i for i in queue if held(i))
        queue = [i for i in queue if i not in waiting]
    out: list[int] = []
    seen: set[int] = set()  # not a copy of ``masked``: that would cost every masked step per call
    while queue:
        i = queue.pop()
        if i in seen or i in masked:
            continue
        seen.add(i)
        out.append(i)
        for j in cited_by(i):
            if i < j <= b and j not in seen and j not in masked:
                queue.append(j)
    return out


_HEAD = re.compile(r"^\W*(PROGRESS|STALE)\b", re.IGNORECASE)
_LABEL = re.compile(r"[#*\s]*[A-Za-z]+[:*\s]*")  # one word, markup and a colon: a section heading
_PROGRESS = re.compile(r"^\W*PROGRESS\b", re.IGNORECASE)


def condensed_reply(step: Step, *, reversible: bool, min_chars: int) -> str | None:
    """An old reply with its reasoning hidden: its PROGRESS line (or, without one, its first line),
    then every command block byte-exact (what the agent did stays visible). Its STALE line goes: it
    has done its work. None when it would not save anything."""
    text = step.reply_text
    spans = command_spans(text)  # what it ran; other fenced code is quoted reasoning
    blocks = [text[a:b] for a, b in spans]
    prose = "\n".join(text[a:b] for a, b in zip([0] + [e for _, e in spans], [s for s, _ in spans] + [len(text)], strict=True))
    if len(prose) < min_chars:
        return None
    lines = [ln.strip() for ln in prose.splitlines() if ln.strip()]
    # the agent's own PROGRESS line says what the step did; without one, the reply's first line does
    progress = next((ln for ln in lines[:4] if _PROGRESS.match(ln)), "")
    body = [ln for ln in lines if not _HEAD.match(ln)]
    # a bare heading ('DISCUSSION', 'THOUGHT:') says nothing: the line after it goes with it
    firsts = body[:2] if len(body) > 1 and _LABEL.fullmatch(body[0]) else body[:1]
    kept = [ln if len(ln) <= 200 else ln[:199] + "…" for ln in ([progress] if progress else firsts)]
    hidden = len(lines) - len(kept)
    if hidden <= 0:
        return None
    shorts = [_short_block(b, step.index, reversible) for b in blocks]
    shown = "\n".join([*kept, *shorts])
    # names in the hidden reasoning and in the hidden middle of long commands (a script's classes)
    hidden_text = "\n".join([prose, *(b for b, short in zip(blocks, shorts, strict=True) if short != b)])
    # a tool call stays shown beside the condensed text: what it names needs no mention either
    calls = "\n".join(a.command for a in step.actions if a.tool_call_id is not None)
    names = list(dict.fromkeys(m.group(0) for m in _NAME.finditer(hidden_text) if m.group(0) not in shown and m.group(0) not in calls))
    # what the hidden reasoning talked about stays findable (files, functions, tests), inside the
    # marker: a bare "Mentions:" line reads as the agent's own words, one it might imitate
    mentions = ""
    if names:
        more = f", +{len(names) - _MAX_NAMES} more" if len(names) > _MAX_NAMES else ""
        mentions = " (mentions " + ", ".join(names[:_MAX_NAMES]) + more + ")"
    hint = f" `restore {step.index}` shows {'it' if hidden == 1 else 'them'}." if reversible else ""
    kept.append(f"{CM} {hidden} more line{'' if hidden == 1 else 's'} of reasoning hidden{mentions}.{hint}")
    out = "\n".join(kept) + "".join("\n\n" + short for short in shorts)
    return out if len(out) < len(text) else None  # a marker longer than what it hides saves nothing


_NAME = re.compile(
    r"(?<!\\)(?:[\w./-]+\.(?:py|pyi|js|ts|tsx|go|rs|java|c|h|cc|cpp|rb|php|txt|cfg|ini|toml|yaml|yml|json|md|rst|html)\b"
    r"|\b_*[A-Za-z]\w*_\w+\b|\b[a-z]+[A-Z]\w+\b|\b[A-Z][a-z0-9]+[A-Z]\w*\b)"
)  # paths, snake_case, camelCase and CamelCase names; not after a backslash ('\nPY' is no name)
_MAX_NAMES = 12
_BLOCK_KEEP = (4, 2)  # first and last lines of a long command kept (its opening and its heredoc end)


def _short_block(block: str, index: int, reversible: bool) -> str:
    """A long command block (a heredoc writing a file, a long script) with its middle hidden."""
    lines = block.split("\n")
    head, tail = _BLOCK_KEEP
    if len(lines) <= head + tail + 6:
        return block
    hint = f"; `restore {index}` shows them" if reversible else ""
    marker = f"{CM} {len(lines) - head - tail} lines of this command hidden{hint}"
    return "\n".join([*lines[:head], marker, *lines[-tail:]])

"""Where STALE marks come from in a replay: the recorded replies, none, or a hindsight estimate.

Recorded runs of agents that never saw refold's protocol carry no STALE lines, so refold's fold
would never fire on them. ``hindsight`` estimates what an agent *would* have marked, from what
later turns actually use: step ``i`` is last used at ``L(i)``, the last later step whose reply
(reasoning and command) refers to something step ``i`` produced. The agent marks ``i`` stale in the
first reply after that, ``m = L(i) + 1`` (or ``i + 1`` / ``i + 2`` if never used again), but only
if ``m`` is inside the seed's window (``i >= m - k``), and the reply gains synthetic head lines
``PROGRESS: ...`` / ``STALE: ...``. Every figure computed on such a history is SIMULATED.

Three variants, which differ in what counts as *using* step ``i``:

* ``produced`` (the default ``hindsight``): a later reply uses step ``i`` if it names an identifier
  step ``i``'s output introduced (``snake_case``, ``CamelCase``, ``dotted.name``, 4+ chars, not in
  the task nor in an earlier output or command: something only step ``i`` showed), or its command
  edits a file step ``i`` read (line numbers and content came from there). Unused steps are marked
  one reply late.
* ``conservative``: a later reply uses step ``i`` if it names any path step ``i``'s command touched
  or any identifier in step ``i``'s output or command, even one the task already mentions (so a
  step counts as used whenever a later reply names the file or function the whole run is about;
  on the dev runs it marks about one step in eight, ``produced`` seven in ten). Unused steps are
  marked one reply late.
* ``aggressive``: as ``produced``, but unused steps are marked in the very next reply.
* ``latest``: as ``produced``, but a use counts only while step ``i`` is the latest source of what
  is used: once a later output or command shows the identifier again (or a later command reads
  the file again), later replies are taken to work from that newer step. On the dev runs it saves
  more tokens than ``produced`` (0.407x base against 0.457x) but hides more that a later reply
  names (9.74% of calls against 8.25%; benchmarks/results/default_dev.txt), so it is not the default.
"""

from __future__ import annotations

import re

from ...history import History
from ...mechanisms.fold import one_line
from ...shell_paths import paths_overlap
from ...types import Message, Step, content_text

__all__ = ["STALE_SOURCES", "hindsight_marks", "with_stale"]

STALE_SOURCES = ("recorded", "none", "hindsight", "hindsight-produced", "hindsight-conservative", "hindsight-aggressive", "hindsight-latest")
HINDSIGHT_VARIANTS = ("produced", "conservative", "aggressive", "latest")

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
_HEAD_LINE = re.compile(r"^[\s>#*_`\-+]*(PROGRESS|STALE)\s*[*_`]*\s*[:：\-–]", re.IGNORECASE)


def _distinctive(word: str) -> bool:
    if len(word) < 4:
        return False
    return (
        "_" in word.strip("_")
        or "." in word
        or (any(c.isupper() for c in word[1:]) and any(c.islower() for c in word))
    )


def _idents(text: str) -> set[str]:
    return {w for w in _IDENT.findall(text) if _distinctive(w)}


def _words(text: str) -> set[str]:
    """Every identifier-like word of a text and its dotted parts (for matching references)."""
    out: set[str] = set()
    for w in _IDENT.findall(text):
        out.add(w)
        if "." in w:
            parts = w.split(".")
            out.update(parts)
            out.update(".".join(parts[i:]) for i in range(1, len(parts)))
    return out


def _paths(step: Step) -> tuple[set[str], set[str]]:
    reads: set[str] = set()
    writes: set[str] = set()
    for a in step.actions:
        info = a.effects
        reads.update(info.reads)
        writes.update(info.writes)
    return reads, writes


def _path_keys(paths: set[str]) -> set[str]:
    keys = set()
    for p in paths:
        keys.add(p)
        base = p.rsplit("/", 1)[-1]
        if len(base) >= 4:
            keys.add(base)
    return keys


def _reply_use_text(step: Step) -> str:
    return step.reply_text + "\n" + "\n".join(a.command for a in step.actions)


def hindsight_marks(
    history: History, k: int = 3, variant: str = "produced"
) -> dict[int, tuple[int, ...]]:
    """Step m -> the steps its reply would mark STALE (all within {m-k..m-1})."""
    if variant not in HINDSIGHT_VARIANTS:
        raise ValueError(f"unknown hindsight variant {variant!r}; valid choices: {', '.join(HINDSIGHT_VARIANTS)}")
    steps = history.steps
    n = len(steps)
    task = "\n".join(content_text(m.get("content")) for m in history.prefix)
    seen = _idents(task)
    features: list[set[str]] = []
    edit_targets: list[set[str]] = []  # paths whose later edit means "uses step i"
    shown: list[tuple[set[str], set[str]]] = []  # per step, identifiers its output and command show, paths it reads
    for s in steps:
        out_ids = _idents("\n".join(s.output_texts))
        cmd_ids = _idents("\n".join(a.command for a in s.actions))
        reads, writes = _paths(s)
        if variant == "conservative":
            features.append(out_ids | cmd_ids | _path_keys(reads | writes))
            edit_targets.append(set())
        else:
            features.append(out_ids - seen - cmd_ids)
            edit_targets.append(reads)
        shown.append((out_ids | cmd_ids, reads))
        seen |= out_ids | cmd_ids
    uses = [(_words(_reply_use_text(s)), _paths(s)[1]) for s in steps]
    marks: dict[int, list[int]] = {}
    for i in range(1, n + 1):
        last = _last_use(i, features, edit_targets, uses, shown if variant == "latest" else None)
        m = i + (1 if variant == "aggressive" else 2) if last is None else last + 1
        if m <= n and m - k <= i < m:
            marks.setdefault(m, []).append(i)
    return {m: tuple(sorted(v)) for m, v in marks.items()}


def _last_use(
    i: int,
    features: list[set[str]],
    targets: list[set[str]],
    uses: list[tuple[set[str], set[str]]],
    shown: list[tuple[set[str], set[str]]] | None,
) -> int | None:
    """The last later step whose reply uses step i; with ``shown`` (``latest``), what a later
    output or command shows again (a file read again) is no longer step i's to be used for."""
    n = len(uses)
    if shown is None:
        for j in range(n, i, -1):
            words, writes = uses[j - 1]
            if features[i - 1] & words or any(_overlaps(w, targets[i - 1]) for w in writes):
                return j
        return None
    live, tg, last = set(features[i - 1]), set(targets[i - 1]), None
    for j in range(i + 1, n + 1):
        if not live and not tg:
            break
        words, writes = uses[j - 1]
        if live & words or any(_overlaps(w, tg) for w in writes):
            last = j
        ids, reads = shown[j - 1]  # after step j's reply: its output is the newer source from then on
        live -= ids
        tg = {t for t in tg if not any(paths_overlap(t, r) for r in reads)}
    return last


def _overlaps(path: str, targets: set[str]) -> bool:
    return any(paths_overlap(path, t) for t in targets)


def _strip_head(text: str) -> str:
    lines = text.splitlines(keepends=True)
    kept = [ln for i, ln in enumerate(lines) if not (i < 6 and _HEAD_LINE.match(ln))]
    return "".join(kept).lstrip("\n")


def _with_head(reply: Message, head: str) -> Message:
    out = dict(reply)
    content = reply.get("content")
    if isinstance(content, list):
        parts = [p for p in content if not (isinstance(p, dict) and p.get("type") == "text")]
        text = _strip_head(content_text(content))
        out["content"] = [{"type": "text", "text": head + text}, *parts]
    else:
        out["content"] = head + _strip_head(content_text(content))
    return out


def with_stale(history: History, source: str, k: int = 3) -> History:
    """The history whose replies carry the STALE marks of ``source`` (``recorded`` returns it as is).

    ``none`` removes recorded PROGRESS/STALE head lines; the hindsight variants replace them by
    synthetic ones (see the module docstring). The original history is not changed.
    """
    if source == "recorded":
        return history
    if source not in STALE_SOURCES:
        raise ValueError(f"unknown STALE source {source!r}; valid choices: {', '.join(STALE_SOURCES)}")
    marks: dict[int, tuple[int, ...]] = {}
    if source != "none":
        variant = source.removeprefix("hindsight").removeprefix("-") or "produced"
        marks = hindsight_marks(history, k, variant)
    meta = {**history.meta, "stale_source": source}
    out = History(history.prefix, source=history.source, meta=meta)
    for s in history.steps:
        if source == "none":
            reply = _with_head(s.reply, "") if s.has_protocol else s.reply
        else:
            stale = marks.get(s.index, ())
            head = f"PROGRESS: {_progress(s)}\nSTALE: {', '.join(map(str, stale)) if stale else '-'}\n"
            reply = _with_head(s.reply, head)
        out.append(reply, s.observations, meta=s.meta)
    return out


def _progress(step: Step) -> str:
    return one_line(step, limit=80) if not step.progress else step.progress[:80]

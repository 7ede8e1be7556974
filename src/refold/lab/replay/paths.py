"""Which files a replay or a simulation reads: the files named, and the trajectory files inside
the folders named (recursively, sorted; hidden files, refold's own reports, the predictions
files agents write next to their runs, Claude Code's ``agent-*.meta.json`` and the
compaction calls its session logs already end with left out)."""

from __future__ import annotations

import gzip
import hashlib
import os
import re
from collections.abc import Sequence
from pathlib import Path

from ...errors import PolicyError
from ...json_file import incomplete_last_line
from ...loaders import split_source

__all__ = ["TRAJECTORY_SUFFIXES", "collect_paths", "half_written", "left_out_note", "same_runs"]

TRAJECTORY_SUFFIXES = (".json", ".traj", ".jsonl", ".gz")


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except OSError:
        return False


def _is_file(name: str) -> bool:
    try:
        return Path(name).is_file()
    except OSError:  # a name too long for the file system is no file
        return False


_OUTPUT_HEAD = re.compile(rb'^\s*\{\s*"format"\s*:\s*"refold-(?:replay|simulate|serversim)')


def _refold_output(f: Path) -> bool:
    """A report refold wrote (``--json`` of replay or simulate), saved among the runs it reports on."""
    try:
        with f.open("rb") as fh:
            return _OUTPUT_HEAD.match(fh.read(200)) is not None
    except OSError:
        return False


_PREDICTIONS_HEAD = re.compile(
    rb'^\s*(?:\{\s*"[^"\n]{1,300}"\s*:\s*|\[\s*)?\{\s*"(?:model_name_or_path|instance_id|model_patch)"\s*:'
)


def _predictions(f: Path) -> bool:
    """``preds.json`` of ``mini-extra swebench``, ``all_preds.jsonl`` of SWE-agent: patches, no run."""
    if f.name.endswith(".gz"):
        return False
    try:
        with f.open("rb") as fh:
            return _PREDICTIONS_HEAD.match(fh.read(400)) is not None
    except OSError:
        return False


_LOG_FOLDERS = {".claude": ("projects",), ".codex": ("sessions", "archived_sessions")}


def _harness_state(f: Path) -> bool:
    """A file of Claude Code's or Codex's home outside the folders that hold session logs
    (``~/.claude/history.jsonl``, ``settings.json``, ``todos/``; ``~/.codex/history.jsonl``)."""
    parts = f.parts
    for i in range(len(parts) - 2, -1, -1):
        logs = _LOG_FOLDERS.get(parts[i])
        if logs is not None:
            return parts[i + 1] not in logs
    return False


def _not_a_run(f: Path) -> str:
    """Why a file in a folder is not read as a run ('' when it is one)."""
    try:
        if f.stat().st_size == 0:  # a session Claude Code opened and never wrote to
            return "empty files"
    except OSError:
        return ""  # the replay names what is wrong with it
    if _harness_state(f):
        return "Claude Code / Codex settings and history files (their session logs are in projects/, sessions/)"
    if f.name.startswith("agent-") and f.name.endswith(".meta.json"):
        return "Claude Code subagent notes (agent-*.meta.json)"
    if _refold_output(f):
        return "reports refold wrote"
    if _predictions(f):
        return "predictions files (patches, no run)"
    return ""


def _compaction_call(f: Path, found: list[str]) -> bool:
    """Claude Code 2.1.x's ``<session>/subagents/agent-acompact-*.jsonl`` when ``<session>.jsonl`` is
    read too: the compaction's summarization call, which that log ends with (``formats.claude_code``)."""
    if f.parent.name != "subagents" or not f.name.startswith("agent-acompact-"):
        return False
    return str(f.parent.parent.with_name(f.parent.parent.name + ".jsonl")) in found


def _walk(top: Path, skipped: dict[str, int]) -> list[Path]:
    """Every file under ``top``, through links to folders too (a project folder kept elsewhere;
    ``Path.rglob`` skipped them without a word), each real folder once (a link loop ends); hidden
    folders below ``top`` (``.cache``, ``.git``) are left out and counted."""
    seen: set[str] = set()
    out: list[Path] = []
    for root, dirs, files in os.walk(top, followlinks=True):
        real = os.path.realpath(root)
        if real in seen:
            dirs[:] = []
            continue
        seen.add(real)
        hidden = [d for d in dirs if d.startswith(".")]
        if hidden:
            skipped[_HIDDEN] = skipped.get(_HIDDEN, 0) + len(hidden)
            dirs[:] = [d for d in dirs if not d.startswith(".")]
        out.extend(Path(root, f) for f in files)
    return out


_HIDDEN = "hidden folders (.name: name one to read it)"
_BROKEN = "broken links (their target is missing)"
_SPECIAL = "FIFOs, sockets or devices named like runs"


def collect_paths(paths: Sequence[str | Path], left_out: dict[str, int] | None = None) -> list[str]:
    """Files as given, and the trajectory files inside folders (recursively, sorted). ``left_out``
    is given how many files of each kind a folder held that are not read (the caller says so)."""
    out: list[str] = []
    skipped = left_out if left_out is not None else {}
    for p in paths:
        path = Path(p)
        if _is_dir(path):
            named = [f for f in _walk(path, skipped) if f.name.endswith(TRAJECTORY_SUFFIXES) and not f.name.startswith(".")]
            candidates = [f for f in named if f.is_file()]
            for f in named:  # a run file that cannot be read is named, not passed over in silence
                if not f.is_file():
                    why = _BROKEN if f.is_symlink() and not f.exists() else _SPECIAL
                    skipped[why] = skipped.get(why, 0) + 1
            found: list[str] = []
            for f in candidates:
                why = _not_a_run(f)
                if why:
                    skipped[why] = skipped.get(why, 0) + 1
                else:
                    found.append(str(f))
            found.sort()
            calls = [f for f in found if _compaction_call(Path(f), found)]
            if calls:
                why = "Claude Code compaction call logs (agent-acompact-*.jsonl: the call their session log ends with)"
                skipped[why] = skipped.get(why, 0) + len(calls)
            out.extend(f for f in found if f not in calls)
        elif _is_file(str(path)) or _is_file(split_source(str(path))[0]):
            out.append(str(path))  # FILE#Agent: one agent's session
        elif path.exists():
            raise PolicyError(f"{p}: not a regular file or folder (a device, FIFO or socket)")
        else:
            raise PolicyError(f"no such file or folder: {p}")
    seen: dict[tuple[str, str | None], str] = {}  # one file through a link or a second spelling: once
    for name in out:
        file, agent = split_source(name)
        seen.setdefault((os.path.realpath(file), agent), name)
    whole = {real for real, agent in seen if agent is None}  # a file named whole replays every agent
    return [name for (real, agent), name in seen.items() if agent is None or real not in whole]


def _digest(name: str) -> str | None:
    """A hash of the file's bytes (a ``.gz`` file's uncompressed bytes), or None if unreadable."""
    h = hashlib.sha256()
    try:
        with open(name, "rb") as fh:
            gz = fh.read(2) == b"\x1f\x8b"
        with gzip.open(name, "rb") if gz else open(name, "rb") as fh:
            while chunk := fh.read(1 << 20):
                h.update(chunk)
    except (OSError, EOFError, gzip.BadGzipFile):  # the replay names what is wrong with it
        return None
    return h.hexdigest()


def same_runs(files: Sequence[str]) -> list[tuple[str, str]]:
    """``(copy, first)`` for each file whose content equals an earlier file's: a copy of a run, or
    the ``.gz`` of a ``.json`` beside it. Both are replayed; the caller says so (totals count it twice)."""
    first: dict[tuple[str, str | None], str] = {}
    out: list[tuple[str, str]] = []
    for name in files:
        file, agent = split_source(name)
        digest = _digest(file)
        if digest is None:
            continue
        earlier = first.setdefault((digest, agent), name)
        if earlier != name:
            out.append((name, earlier))
    return out


def half_written(files: Sequence[str]) -> list[str]:
    """A note for each file whose last line is half-written (a session still running), which the
    replay leaves out: said, not silently dropped."""
    out: list[str] = []
    for file in dict.fromkeys(split_source(name)[0] for name in files):
        n = incomplete_last_line(file)
        if n is not None:
            out.append(f"{file}: line {n} is half-written (a session still running?): read up to line {n - 1}")
    return out


def left_out_note(left_out: dict[str, int]) -> str:
    """One line naming the files the folders held that were not read, by kind ('' for none)."""
    if not left_out:
        return ""
    return "left out of the folders (not runs): " + "; ".join(f"{n} {why}" for why, n in sorted(left_out.items()))

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

__all__ = ["TRAJECTORY_SUFFIXES", "collect_paths", "half_written", "same_runs"]

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


def _compaction_call(f: Path, found: list[str]) -> bool:
    """Claude Code 2.1.x's ``<session>/subagents/agent-acompact-*.jsonl`` when ``<session>.jsonl`` is
    read too: the compaction's summarization call, which that log ends with (``formats.claude_code``)."""
    if f.parent.name != "subagents" or not f.name.startswith("agent-acompact-"):
        return False
    return str(f.parent.parent.with_name(f.parent.parent.name + ".jsonl")) in found


def _walk(top: Path) -> list[Path]:
    """Every file under ``top``, through links to folders too (a project folder kept elsewhere;
    ``Path.rglob`` skipped them without a word), each real folder once (a link loop ends)."""
    seen: set[str] = set()
    out: list[Path] = []
    for root, dirs, files in os.walk(top, followlinks=True):
        real = os.path.realpath(root)
        if real in seen:
            dirs[:] = []
            continue
        seen.add(real)
        out.extend(Path(root, f) for f in files)
    return out


def collect_paths(paths: Sequence[str | Path]) -> list[str]:
    """Files as given, and the trajectory files inside folders (recursively, sorted)."""
    out: list[str] = []
    for p in paths:
        path = Path(p)
        if _is_dir(path):
            found = sorted(
                str(f)
                for f in _walk(path)
                if f.is_file() and f.name.endswith(TRAJECTORY_SUFFIXES) and not f.name.startswith(".")
                and not _refold_output(f)
                and not _predictions(f)
                and not (f.name.startswith("agent-") and f.name.endswith(".meta.json"))  # Claude Code's notes on a subagent
            )
            out.extend(f for f in found if not _compaction_call(Path(f), found))
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

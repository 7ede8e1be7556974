"""Reading a recorded run's file: JSON, JSON Lines or gzip of either, with one-line errors naming
the file (a folder, a device, an HTML report, a bomb, bad UTF-8 or bad JSON), never a traceback."""

from __future__ import annotations

import gzip
import io
import json
import re
import stat
from pathlib import Path
from typing import Any

from .errors import TrajectoryError
from .scrub import scrub_value

__all__ = ["MAX_FILE_BYTES", "incomplete_last_line", "read_json"]

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
        line = raw.count(b"\n", 0, e.start) + 1
        raise TrajectoryError(name, f"not UTF-8 text (bad byte at offset {e.start}, line {line})") from None
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
                if n == len(lines) and out and not text.endswith(("\n", "\r")):
                    break  # a session still running: its last line is half-written (incomplete_last_line)
                raise TrajectoryError(name, f"invalid JSON Lines at line {n} column {e.colno}: {e.msg}") from None
            except RecursionError:
                raise TrajectoryError(name, f"JSON nested too deeply at line {n}") from None
        return out
    raise TrajectoryError(name, f"invalid JSON at line {first.lineno} column {first.colno}: {first.msg}")


def incomplete_last_line(path: str | Path) -> int | None:
    """The number of a JSON Lines file's last line when it is half-written (no newline ends it and
    it is no JSON value: a Claude Code or Codex session still running), which ``read_json`` leaves
    out; None otherwise (a ``.gz`` is not checked)."""
    try:
        with open(path, "rb") as fh:
            if fh.read(2) == b"\x1f\x8b":
                return None
            fh.seek(0)
            if not _is_value(fh.readline(1 << 22)):  # not JSON Lines (e.g. an indented .json file)
                return None
            fh.seek(0)
            lines = 1
            last = b""
            while chunk := fh.read(1 << 20):
                lines += chunk.count(b"\n")
                last = (last + chunk)[-(1 << 22) :]
    except OSError:
        return None
    if lines < 2 or last.endswith((b"\n", b"\r")):
        return None
    return None if _is_value(last.rsplit(b"\n", 1)[-1]) else lines


def _is_value(line: bytes) -> bool:
    try:
        json.loads(line.removeprefix(b"\xef\xbb\xbf"))  # a byte-order mark, as read_json allows
    except (ValueError, RecursionError):
        return False
    return True

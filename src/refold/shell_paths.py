"""Which words of a command name files, and when two paths are the same file."""

from __future__ import annotations

import re

__all__ = ["MAX_PATH", "is_path", "normalize_path", "patch_paths", "path_words", "paths_overlap"]

MAX_PATH = 4096
_PATH_CHARS = re.compile(r"[\w./~+ @,-]++")  # a space only in a quoted or escaped word


def is_path(word: str) -> bool:
    """A word that names a file: has a slash, or a name with an extension (``a.py``)."""
    if not word or len(word) > MAX_PATH or not _PATH_CHARS.fullmatch(word):
        return False
    if word.replace(".", "").isdigit():
        return False  # 1.2, 3
    if "/" in word:
        return True
    stem, dot, ext = word.rpartition(".")
    return bool(dot) and 1 <= len(ext) <= 8 and ext.isalnum() and bool(stem.strip(".~+"))


def path_words(words: list[str]) -> list[str]:
    return [normalize_path(w) for w in words if not w.startswith(("-", "$")) and "=" not in w and is_path(w)]


def normalize_path(path: str) -> str:
    path = path.strip().strip("'\"")
    while path.startswith("./"):
        path = path[2:]
    return path.rstrip("/") or "/"


def paths_overlap(a: str, b: str) -> bool:
    """Same file, or one is a directory containing the other; tolerant of cwd prefixes."""
    if a == b:
        return True
    for x, y in ((a, b), (b, a)):
        if x.endswith("/" + y) or y.startswith(x + "/") or ("/" + y + "/") in ("/" + x + "/"):
            return True
    return False


_PATCH_FILE = re.compile(
    r"^(?:\*\*\* (?:Update|Add|Delete) File: |\*\*\* Move to: |\+\+\+ (?:b/)?)(\S[^\n\t]*?)[ \t]*$", re.MULTILINE
)


def patch_paths(text: str) -> list[str]:
    """Files a patch names: apply_patch's ``*** Update File: p`` lines, a diff's ``+++ b/p``."""
    out = []
    for p in _PATCH_FILE.findall(text):
        if p != "/dev/null" and len(p) <= MAX_PATH:
            out.append(normalize_path(p))
    return out

"""What an agent's command reads and writes, judged from its text (no execution).

Dedup must not point a new file read at an old one when the file was edited in between,
so we need a cheap, conservative guess of the paths each command reads and writes.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

_READERS = {"cat", "nl", "head", "tail", "less", "more", "sed", "awk", "open", "goto", "view", "bat"}
_SEARCHERS = {"grep", "rg", "ag", "find", "ls", "tree", "search_file", "search_dir", "find_file", "git"}
_EDITORS = {"edit", "create", "insert", "str_replace", "apply_patch", "write_file"}
_TESTS = ("pytest", "tox", "unittest", "runtests", "manage.py test", "npm test", "go test", "cargo test")
_PATH_RE = re.compile(r"^[\w./~+-]*[\w-]+\.[A-Za-z0-9]{1,8}$|^[\w.~+-]*/[\w./+-]*$")
_REDIRECT_RE = re.compile(r"(?<![0-9&])>{1,2}\s*([^\s;&|<>]+)")
_SPLIT_RE = re.compile(r"&&|\|\||;|\|")
_INTERPRETER_RE = re.compile(r"\b(python[0-9.]*|perl|ruby|node)\b")
_SCRIPT_WRITE_RE = re.compile(r"open\([^)]*['\"][wax]b?\+?['\"]|write_text|write_bytes|os\.replace|shutil\.|\.unlink\(")


@dataclass(frozen=True, slots=True)
class CommandInfo:
    kind: str  # "read" | "search" | "edit" | "test" | "command"
    reads: tuple[str, ...]
    writes: tuple[str, ...]
    writes_anything: bool  # may change files we cannot name (git checkout, patch, ...)


def _words(segment: str) -> list[str]:
    try:
        return shlex.split(segment, posix=True)
    except ValueError:
        return segment.split()


def _paths(words: list[str]) -> list[str]:
    out = []
    for w in words:
        if w.startswith("-") or "=" in w or w.startswith("'") or w.startswith("$"):
            continue
        if _PATH_RE.match(w) and not w.replace(".", "").isdigit():
            out.append(normalize_path(w))
    return out


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


def analyze(command: str, tool: str = "bash") -> CommandInfo:
    """Classify a command and name the paths it reads and writes (best effort, conservative)."""
    if tool not in ("bash", "shell", "execute_bash", "run"):
        # A named tool (SWE-agent's editor functions, our own context commands).
        return _analyze_tool(tool, command)
    text = command.strip()
    heredoc = re.search(r"<<-?\s*['\"]?(\w+)['\"]?", text)
    writes_anything = False
    if heredoc:  # the heredoc body is data, not commands
        first, _, body = text.partition("\n")
        # ... unless an interpreter runs it and it writes files (python - <<EOF ... open(f, "w"))
        writes_anything = bool(_INTERPRETER_RE.search(first) and _SCRIPT_WRITE_RE.search(body))
        text = first
    reads: list[str] = []
    writes: list[str] = []
    kinds: list[str] = []
    for target in _REDIRECT_RE.findall(text):
        if not target.startswith("/dev/"):
            writes.append(normalize_path(target))
    for segment in _SPLIT_RE.split(_REDIRECT_RE.sub(" ", text)):
        words = _words(segment)
        if not words:
            continue
        head = words[0].rsplit("/", 1)[-1]
        rest = words[1:]
        if head in ("sed", "perl") and any(w.startswith("-i") or w == "-pi" for w in rest):
            operands = [w for w in rest if not w.startswith("-")]
            writes.extend(_paths(operands[1:]))
            kinds.append("edit")
        elif head in ("tee", "touch", "rm", "mkdir"):
            writes.extend(_paths(rest))
            kinds.append("edit")
        elif head in ("mv", "cp") and rest:
            writes.extend(_paths(rest[-1:]))
            kinds.append("edit")
        elif head in ("patch",) or (head == "git" and rest[:1] and rest[0] in ("apply", "checkout", "stash", "reset", "restore", "am", "merge", "rebase", "pull", "switch")):
            writes_anything = True
            kinds.append("edit")
        elif head in _EDITORS:
            writes.extend(_paths(rest[:1]))
            kinds.append("edit")
        elif head in _READERS:
            reads.extend(_paths(rest))
            kinds.append("read")
        elif head in _SEARCHERS:
            reads.extend(_paths(rest) or ["."])
            kinds.append("search")
        elif any(t in segment for t in _TESTS):
            kinds.append("test")
        elif head in ("python", "python3") and rest[:1] == ["-c"]:
            if re.search(r"open\([^)]*['\"][wa]", segment) or "write_text" in segment:
                writes_anything = True
                kinds.append("edit")
            else:
                kinds.append("command")
        else:
            kinds.append("command")
    if writes or writes_anything:
        kind = "edit"
    elif "test" in kinds:
        kind = "test"
    elif kinds and all(k == "read" for k in kinds):
        kind = "read"
    elif "search" in kinds:
        kind = "search"
    elif "read" in kinds:
        kind = "read"
    else:
        kind = "command"
    return CommandInfo(kind, tuple(dict.fromkeys(reads)), tuple(dict.fromkeys(writes)), writes_anything)


def _analyze_tool(tool: str, arguments: str) -> CommandInfo:
    paths = re.findall(r'"(?:path|file|filename|file_path)"\s*:\s*"([^"]+)"', arguments)
    norm = tuple(normalize_path(p) for p in paths)
    sub = re.search(r'"command"\s*:\s*"(\w+)"', arguments)
    verb = sub.group(1) if sub else tool
    if verb in ("view", "open", "read_file", "goto", "scroll_up", "scroll_down"):
        return CommandInfo("read", norm, (), False)
    if verb in ("create", "str_replace", "insert", "edit", "undo_edit", "write_file", "apply_patch"):
        return CommandInfo("edit", (), norm, not norm)
    if verb in ("search_file", "search_dir", "find_file", "grep", "glob"):
        return CommandInfo("search", norm or (".",), (), False)
    return CommandInfo("command", norm, (), False)

"""What a function tool call reads and writes (``read_file``, ``str_replace_editor``, ``apply_patch``,
SWE-agent's ``open``/``edit``/``goto``...), judged from its name and JSON arguments: the tool-call
counterpart of ``shell``'s command-line analysis."""

from __future__ import annotations

import json
import re
from typing import Any

from .shell_info import CommandInfo
from .shell_paths import normalize_path, patch_paths

__all__ = ["analyze_tool"]

_PATH_KEYS = ("path", "file", "filename", "file_name", "file_path", "filepath", "target_file", "target", "dir",
              "notebook_path")  # fmt: skip
_READ_VERBS = {"view", "open", "read_file", "read", "cat"}
_OPEN_READ_VERBS = {"goto", "scroll_up", "scroll_down"}
_WRITE_VERBS = {"create", "str_replace", "insert", "edit", "undo_edit", "write_file", "write", "apply_patch",
                "edit_file", "multiedit", "replace", "append", "delete_file", "patch", "notebookedit"}  # fmt: skip
_SEARCH_VERBS = {"search_file", "search_dir", "find_file", "grep", "glob", "search", "find", "ls", "list_dir"}


def analyze_tool(tool: str, arguments: str) -> CommandInfo:
    args = _json_object(arguments)
    if args is None:  # not JSON: the old key sniffing, bounded
        paths = re.findall(r'"(?:path|file|filename|file_path)"\s*+:\s*+"([^"]{1,4096})"', arguments)
        sub = re.search(r'"command"\s*+:\s*+"(\w++)"', arguments)
        args = {"command": sub.group(1)} if sub else {}
        named = [normalize_path(p) for p in paths]
    else:
        named = [normalize_path(v) for k in _PATH_KEYS if isinstance(v := args.get(k), str) and v.strip()]
    verb = str(args.get("command") or args.get("action") or tool).lower()
    name = tool.lower()
    if name == "apply_patch" or verb == "apply_patch":
        patch = " ".join(str(v) for v in args.values() if isinstance(v, str)) or arguments
        named = patch_paths(patch) or named
        return CommandInfo("edit", (), tuple(dict.fromkeys(named)), not named)
    if name == "create" and named:  # SWE-agent's create opens what it creates
        return CommandInfo("edit", (), tuple(named[:1]), False, opens=named[0])
    if verb in _READ_VERBS:
        start = args.get("offset") if name == "read" else None  # Claude Code's Read: the first line it shows
        first = start if isinstance(start, int) and not isinstance(start, bool) and start >= 1 else None
        return CommandInfo("read", tuple(named), (), False, opens=named[0] if named and name == "open" else None, first_line=first)
    if verb in _OPEN_READ_VERBS:
        return CommandInfo("read", tuple(named), (), False, open_reads=not named)
    if verb in _WRITE_VERBS or name in _WRITE_VERBS:
        if named:
            return CommandInfo("edit", (), tuple(dict.fromkeys(named)), False)
        # SWE-agent's windowed edit/insert/append change the open file
        return CommandInfo("edit", (), (), False, open_writes=True)
    if verb in _SEARCH_VERBS:
        dirs = [normalize_path(v) for v in (args.get("dir"), args.get("directory")) if isinstance(v, str)]
        return CommandInfo("search", tuple(dict.fromkeys(named + dirs)) or (".",), (), False)
    return CommandInfo("command", tuple(named), (), False)


def _json_object(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text) if text.strip() else {}
    except ValueError:
        return None
    return value if isinstance(value, dict) else None

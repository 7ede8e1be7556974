"""A harness's shell tool under its own name, read as ``bash`` with ``{"command": str}``: what
refold's shell analysis and context-command recognizer read. Shared by the proxy's surfaces (a
live call) and the loaders of recorded harness runs (Codex rollouts)."""

from __future__ import annotations

import json
import shlex

SHELL_NAMES = frozenset({"bash", "shell", "exec_command", "shell_command", "local_shell"})
"""A harness's shell tool under its own name: Claude Code's ``Bash``, Copilot's ``bash``, Codex's
``shell`` (an argv list), ``shell_command`` (a string) and ``exec_command`` (``cmd``)."""

_SHELL_C = ("-c", "-lc")


def canonical_call(name: str, arguments: str, *, free_form: bool = False) -> tuple[str, str]:
    """How a session records a call: a harness's shell tool as ``bash`` with ``{"command": str}``;
    other tools as issued. ``free_form``: a custom tool's text input, the command itself. An argv
    list ``["bash", "-lc", "cd x && rg foo"]`` is the script it runs; any other argv is quoted
    back into one command line."""
    if name.lower() not in SHELL_NAMES:
        return name, arguments
    if free_form:
        return "bash", json.dumps({"command": arguments}, ensure_ascii=False)
    try:
        args = json.loads(arguments)
    except ValueError:
        return name, arguments
    cmd = args.get("command", args.get("cmd")) if isinstance(args, dict) else None
    if isinstance(cmd, list) and cmd and all(isinstance(c, str) for c in cmd):
        shell_c = len(cmd) == 3 and cmd[0].rsplit("/", 1)[-1] in ("bash", "sh", "zsh") and cmd[1] in _SHELL_C
        cmd = cmd[2] if shell_c else shlex.join(cmd)
    if not isinstance(cmd, str):
        return name, arguments
    return "bash", json.dumps({"command": cmd}, ensure_ascii=False)


def tool_name(name: str) -> str:
    return "bash" if name.lower() in SHELL_NAMES else name

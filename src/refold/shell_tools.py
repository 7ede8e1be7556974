"""A harness's shell tool under its own name, read as ``bash`` with ``{"command": str}``: what
refold's shell analysis and context-command recognizer read. Shared by the proxy's surfaces (a
live call) and the loaders of recorded harness runs (Codex rollouts)."""

from __future__ import annotations

import json
import re
import shlex

from .protocol import COMMAND_NAMES

SHELL_NAMES = frozenset({"bash", "shell", "exec_command", "shell_command", "local_shell"})
"""A harness's shell tool under its own name: Claude Code's ``Bash``, Copilot's ``bash``, Codex's
``shell`` (an argv list), ``shell_command`` (a string) and ``exec_command`` (``cmd``)."""

_SHELL_C = ("-c", "-lc")


def canonical_call(name: str, arguments: str, *, free_form: bool = False) -> tuple[str, str]:
    """How a session records a call: a harness's shell tool as ``bash`` with ``{"command": str}``;
    other tools as issued. ``free_form``: a custom tool's text input, the command itself. An argv
    list ``["bash", "-lc", "cd x && rg foo"]`` is the script it runs; any other argv is quoted
    back into one command line."""
    if free_form and name == "exec":  # Codex's code mode: a JavaScript program calling its tools
        return code_mode_call(arguments) or (name, arguments)
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


# Codex's code mode (0.14x): the free-form ``exec`` tool's input is JavaScript calling ``tools.*``
_TOOL_CALL = re.compile(r"\btools\.(\w+)\s*\(\s*")
_CONTROL = re.compile(r"\b(?:for|while|if|else|switch|function|try|catch|do|eval)\b|=>")
_CMD_KEY = re.compile(r"""[{,]\s*(?:cmd|"cmd"|'cmd')\s*:\s*""")
_CONTEXT_WORD = re.compile(r"(?:^|[\s;&|(])(?:" + "|".join(COMMAND_NAMES) + r")(?=$|[\s;&|)])")
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "'": "'", '"': '"', "`": "`", "$": "$"}


def is_code_mode(program: str) -> bool:
    """Whether an ``exec`` call's input is a code-mode program (it calls ``tools.*``), not a shell command."""
    return _TOOL_CALL.search(program) is not None


def code_mode_call(program: str) -> tuple[str, str] | None:
    """A code-mode program that only runs shell commands given as literals (``tools.exec_command``,
    in order, no branches or loops) as the ``bash`` call of those commands (one per line); one
    that only applies one literal patch as that ``apply_patch`` call. None for anything else (it
    stays an ``exec`` call of its program), also when a context command's name is one of its words:
    the program ran in the client's runtime, so nothing in it is read as a command to answer."""
    calls = list(_TOOL_CALL.finditer(program))
    code = _without_strings(program)  # `ls | grep if` runs no branch: keywords count outside literals
    if not calls or code is None or _CONTROL.search(code) or len(re.findall(r"\btools\b", code)) != len(calls):
        return None
    names = {c.group(1) for c in calls}
    if names == {"apply_patch"} and len(calls) == 1:
        patch = _literal(program, calls[0].end())
        return ("apply_patch", patch) if patch is not None else None
    if names != {"exec_command"}:
        return None
    commands = []
    for c in calls:
        at = c.end()
        if program.startswith("{", at):
            key = _CMD_KEY.search(program, at, program.find("}", at) + 1 or len(program))
            at = key.end() if key else -1
        command = _literal(program, at) if at >= 0 else None
        if command is None or _CONTEXT_WORD.search(command):
            return None
        commands.append(command)
    return "bash", json.dumps({"command": "\n".join(commands)}, ensure_ascii=False)


def _literal(text: str, at: int) -> str | None:
    """The JavaScript string literal at ``text[at]`` (quoted or a template without ``${}``) when it
    is the whole argument (``"cat " + f`` is not: its text is no command that ran), or None."""
    found = _string(text, at)
    if found is None:
        return None
    value, end = found
    return value if text[end:].lstrip()[:1] in (",", "}", ")") else None


def _without_strings(program: str) -> str | None:
    """The program with each string literal's text blanked (its quotes kept), or None when a literal
    is not read (an escape or ``${}`` it cannot follow, or no closing quote)."""
    out: list[str] = []
    i = 0
    while i < len(program):
        if program[i] in ('"', "'", "`"):
            found = _string(program, i)
            if found is None:
                return None
            out.append(program[i] + " " * (found[1] - i - 2) + program[found[1] - 1])
            i = found[1]
            continue
        out.append(program[i])
        i += 1
    return "".join(out)


def _string(text: str, at: int) -> tuple[str, int] | None:
    """The string literal at ``text[at]`` and the index after its closing quote, or None."""
    quote = text[at : at + 1]
    if quote not in ('"', "'", "`"):
        return None
    out: list[str] = []
    i = at + 1
    while i < len(text):
        ch = text[i]
        if ch == quote:
            return "".join(out), i + 1
        if ch == "\\":
            mapped = _ESCAPES.get(text[i + 1 : i + 2])
            if mapped is None:
                return None  # \u, \x, a line continuation: not worth reading
            out.append(mapped)
            i += 2
            continue
        if quote == "`" and text.startswith("${", i):
            return None
        if ch == "\n" and quote != "`":
            return None
        out.append(ch)
        i += 1
    return None

"""What a recorded observation printed, without its agent's wrapper, and a command as one short line.

Shared by the summaries of hidden outputs and the ledger's object lines (which must not import the
summarizer: it reads the context commands, and those read the ledger).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from .summary_text import _one_line

__all__ = ["Unwrapped", "command_line", "exit_status", "printed_lines", "unwrap"]


@dataclass(frozen=True, slots=True)
class Unwrapped:
    body: str  # what the command printed, without the agent's wrapper
    status: int | None
    exception: str | None  # mini 2.x <exception> (e.g. a timeout)
    elided: int | None  # characters mini elided between head and tail
    head_chars: int | None = None  # body[:head_chars] is the head when elided, the rest the tail
    blank_tail: int = 0
    """Blank lines the command printed after the body's last line (the body ends at its last
    printed text; ``sed -n '242,262p'`` of a file whose line 262 is empty prints one)."""

    @property
    def lines(self) -> int:
        """How many lines the command printed: what every note and stub counts (never the wrapper's)."""
        return (self.body.count("\n") + 1 if self.body else 0) + self.blank_tail


# ---- wrappers ---------------------------------------------------------------------------------

_RC = re.compile(r"<returncode>\s*(-?\d{1,9})\s*</returncode>")
_EXC = re.compile(r"<exception>(.*?)</exception>", re.DOTALL)
_WRAPPED = re.compile(r"^\s*<(?:returncode|exception|warning|output)>")
_ELIDED = re.compile(r"<elided_chars>\s*(\d{1,12}) characters elided\s*</elided_chars>")
# mini 1.x's timeout template: no <returncode>, the partial output inside <output>
_TIMED_OUT = re.compile(r"The last command <command>.{0,20000}?</command> timed out and has been killed\.", re.DOTALL)
# Codex's shell outputs: the freeform header (``shell``/``shell_command``) and unified exec's
# (``exec_command``), each line optional but the wall time and the ``Output:`` line that ends it
_CODEX_HEAD = re.compile(
    r"(?:Chunk ID: [^\n]{0,80}\n)?(?:Exit code: (-?\d{1,9})\n)?Wall time: [\d.]{1,20} seconds\n"
    r"(?:Process exited with code (-?\d{1,9})\n)?(?:Process running with session ID ([^\n]{0,80})\n)?"
    r"(?:Total output lines: \d{1,12}\n)?(?:Original token count: \d{1,12}\n)?Output:\n?"
    r"(?:Total output lines: \d{1,12}\n\n?)?"  # unified exec's notice of a cut output, not printed by it
)
# Claude Code's failed Bash: ``Exit code N`` then the output (a success prints the output alone)
_CLAUDE_EXIT = re.compile(r"Exit code (-?\d{1,9})\n")
_PERSISTED = re.compile(r"<persisted-output>\nOutput too large \(([\d.]+\s?[KMG]?B)\)\. Full output saved to: [^\n]*\n\s*(?:Preview \(first [^)\n]*\):\n)?")
_SWE_TRAILER = re.compile(r"^\((?:Open file|Current directory): .*\)$|^bash-\$\s*$")


def _between(text: str, tag: str) -> str | None:
    start = text.find(f"<{tag}>")
    if start < 0:
        return None
    start += len(tag) + 2
    end = text.rfind(f"</{tag}>")
    inner = text[start:] if end < start else text[start:end]
    return inner[1:] if inner.startswith("\n") else inner


def _without_reminders(text: str) -> str:
    """``text`` without the ``<system-reminder>`` blocks that end it and the blank lines before them:
    Claude Code appends its own notes to a tool's result (a Read's malware reminder), not printed by
    the tool, so neither counted as its lines nor read as its text (a read's numbered lines end before)."""
    kept = text
    while (end := kept.rstrip()).endswith("</system-reminder>"):
        start = end.rfind("<system-reminder>")
        if start < 0:
            break
        kept = end[:start].rstrip("\n")
    if kept.strip() or kept == text:
        return kept
    # the tool's whole answer is a reminder ('the file exists but is shorter than the offset'): its text
    return re.sub(r"</?system-reminder>", "", text).strip()


def unwrap(text: str) -> Unwrapped:
    """The printed output and the exit status of a recorded observation."""
    status = exception = elided = head_chars = None
    text = text.replace("\r\n", "\n")  # SWE-agent windows mix line ends
    text = _without_reminders(text)
    body = text
    if _WRAPPED.match(text):
        head_part = text[: text.find("<output")] if "<output" in text else text
        m = _RC.search(head_part)
        status = int(m.group(1)) if m else None
        e = _EXC.search(head_part)
        exception = " ".join(e.group(1).split()) if e else None
        inner = _between(text, "output")
        if inner is not None and "<output_head>" not in text[:200]:
            body = inner
        else:
            head, tail = _between(text, "output_head"), _between(text, "output_tail")
            if head is not None or tail is not None:
                body = (head or "") + "\n" + (tail or "")
                head_chars = len(head or "")
                em = _ELIDED.search(text)
                elided = int(em.group(1)) if em else None
            else:
                body = _RC.sub("", _EXC.sub("", text))
    elif text.startswith(("Exit code: ", "Wall time: ", "Chunk ID: ")) and (c := _CODEX_HEAD.match(text)):
        code = c.group(1) or c.group(2)
        status = int(code) if code is not None else None
        body = text[c.end() :]
        if c.group(3) is not None and status is None:  # exec_command's process lives on: more output may come
            exception = f"still running (session {c.group(3).strip()})"
    elif text.startswith("Exit code ") and (c := _CLAUDE_EXIT.match(text)):
        status, body = int(c.group(1)), text[c.end() :]
    elif text.startswith("<retrieval_status>"):  # Claude Code's TaskOutput: a background command's output
        code = _between(text, "exit_code")
        status = int(code) if code is not None and code.strip().lstrip("-").isdigit() else None
        state = (_between(text, "status") or "").strip()
        exception = f"background task {state}" if state and state != "completed" else None
        body = _between(text, "output") or ""
    elif text.startswith("<persisted-output>") and (p := _PERSISTED.match(text)):
        # Claude Code kept only a preview; the whole output went to a file (restore shows its path)
        exception = f"output too large ({p.group(1)}), only its preview shown"
        body = (_between(text, "persisted-output") or "")[p.end() - len("<persisted-output>\n") :]
    elif text.startswith("The last command <command>") and (t := _TIMED_OUT.match(text)):
        exception = "timed out and was killed"
        inner = _between(text[t.end() :], "output")
        body = inner if inner is not None else text[t.end() :]
    if text.startswith("{") and ('"returncode"' in text[:200] or '"exit_code"' in text[-200:]):
        status, body, exception = _json_observation(text, status, body, exception)
    text_end = body.rstrip()
    lines = text_end.split("\n")
    printed = len(lines)
    while lines and (not lines[-1].strip() or _SWE_TRAILER.match(lines[-1].strip())):
        lines.pop()  # SWE-agent's state lines after every observation
    blank = 0
    if len(lines) == printed and elided is None:  # no trailer: what follows the last text is the command's
        after = body[len(text_end) :].split("\n")  # the rest of the last line, then one part per line
        blank = max(0, len(after) - 1 - (after[-1] == ""))  # a final newline ends a line, starts none
    return Unwrapped("\n".join(lines), status, exception, elided, head_chars, blank)


def _json_observation(
    text: str, status: int | None, body: str, exception: str | None
) -> tuple[int | None, str, str | None]:
    """mini's tool-call observations as JSON: ``{"returncode": 0, "output": "..."}``; Codex's
    ``shell`` outputs: ``{"output": "...", "metadata": {"exit_code": 0, ...}}``."""
    try:
        data = json.loads(text)
    except ValueError:
        return status, body, exception
    if not isinstance(data, dict):
        return status, body, exception
    meta = data.get("metadata")
    rc = data.get("returncode", meta.get("exit_code") if isinstance(meta, dict) else None)
    status = rc if isinstance(rc, int) and not isinstance(rc, bool) else status
    output = data.get("output")
    body = output if isinstance(output, str) else body
    info = data.get("exception_info") or data.get("exception")
    exception = " ".join(info.split()) if isinstance(info, str) and info.strip() else exception
    return status, body, exception


def printed_lines(text: str) -> int:
    """How many lines a recorded observation's command printed (``Unwrapped.lines``)."""
    return unwrap(text).lines


def exit_status(text: str) -> int | None:
    """The exit status an observation records (mini's ``<returncode>``, Codex's ``Exit code:``,
    Claude Code's ``Exit code N`` on a failure), or None."""
    return unwrap(text).status


# ---- helpers ----------------------------------------------------------------------------------


def command_line(tool: str, command: str, limit: int = 80) -> str:
    """The command as one short line: shell text, or ``tool arg ...`` for a function tool."""
    text = command.strip()
    if tool not in ("bash", "shell", "execute_bash", "run") and text.startswith("{"):
        try:
            args = json.loads(text)
        except ValueError:
            args = None
        if isinstance(args, dict):
            if isinstance(args.get("command"), str) and tool in (
                "str_replace_editor",
                "str_replace_based_edit_tool",
            ):
                tool, args = f"{tool} {args.pop('command')}", args
            values = [
                str(v) for v in args.values() if isinstance(v, (str, int, float)) and not isinstance(v, bool)
            ]
            text = " ".join([tool, *values])
        else:
            text = f"{tool} {text}"
    elif tool not in ("bash", "shell", "execute_bash", "run"):
        text = f"{tool} {text}".strip()
    first, _, rest = text.partition("\n")
    first = _one_line(first.replace("`", "'"), limit)
    if rest.strip() and not first.endswith("\u2026"):
        first = _one_line(first + " \u2026", limit)
    return first

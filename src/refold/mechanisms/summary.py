"""One-line summaries of tool outputs, made without a model call (the notes of hidden outputs).

``summarize(command, text, tool)`` reads the command that produced an output and the output
itself, in every shape refold loads (mini 1.x/2.x ``<returncode>`` wrappers with head/tail
elision, SWE-agent windows and search results, editor tools), and says in one line what the
output showed: a file read's path, line range and outline; a search's hits and files; a test
run's counts and first failure; an error's first error line. Deterministic, bounded, never raises.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache

from ..shell import analyze, normalize_path

__all__ = ["MAX_CHARS", "Summary", "command_line", "exit_status", "summarize", "unwrap"]

MAX_CHARS = 160
_SCAN = 400_000  # characters of an output we look at (summaries of huge outputs stay linear and cheap)


@dataclass(frozen=True, slots=True)
class Summary:
    kind: str  # read | search | test | error | edit | listing | diff | vcs | install | empty | format | control | context | output
    text: str  # one line, at most the limit
    status: int | None  # the recorded exit status (mini's <returncode>); None when none was recorded
    informative: bool  # False: only the generic first/last-line fallback


@dataclass(frozen=True, slots=True)
class Unwrapped:
    body: str  # what the command printed, without the agent's wrapper
    status: int | None
    exception: str | None  # mini 2.x <exception> (e.g. a timeout)
    elided: int | None  # characters mini elided between head and tail
    head_chars: int | None = None  # body[:head_chars] is the head when elided, the rest the tail


# ---- wrappers ---------------------------------------------------------------------------------

_RC = re.compile(r"<returncode>\s*(-?\d{1,9})\s*</returncode>")
_EXC = re.compile(r"<exception>(.*?)</exception>", re.DOTALL)
_WRAPPED = re.compile(r"^\s*<(?:returncode|exception|warning|output)>")
_ELIDED = re.compile(r"<elided_chars>\s*(\d{1,12}) characters elided\s*</elided_chars>")
_SWE_TRAILER = re.compile(r"^\((?:Open file|Current directory): .*\)$|^bash-\$\s*$")


def _between(text: str, tag: str) -> str | None:
    start = text.find(f"<{tag}>")
    if start < 0:
        return None
    start += len(tag) + 2
    end = text.rfind(f"</{tag}>")
    inner = text[start:] if end < start else text[start:end]
    return inner[1:] if inner.startswith("\n") else inner


def unwrap(text: str) -> Unwrapped:
    """The printed output and the exit status of a recorded observation."""
    status = exception = elided = head_chars = None
    text = text.replace("\r\n", "\n")  # SWE-agent windows mix line ends
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
    if text.startswith("{") and '"returncode"' in text[:200]:
        status, body, exception = _json_observation(text, status, body, exception)
    lines = body.rstrip().split("\n")
    while lines and (not lines[-1].strip() or _SWE_TRAILER.match(lines[-1].strip())):
        lines.pop()  # SWE-agent's state lines after every observation
    return Unwrapped("\n".join(lines), status, exception, elided, head_chars)


def _json_observation(
    text: str, status: int | None, body: str, exception: str | None
) -> tuple[int | None, str, str | None]:
    """mini's tool-call observations as JSON: ``{"returncode": 0, "output": "..."}``."""
    try:
        data = json.loads(text)
    except ValueError:
        return status, body, exception
    if not isinstance(data, dict):
        return status, body, exception
    rc = data.get("returncode")
    status = rc if isinstance(rc, int) and not isinstance(rc, bool) else status
    output = data.get("output")
    body = output if isinstance(output, str) else body
    info = data.get("exception_info") or data.get("exception")
    exception = " ".join(info.split()) if isinstance(info, str) and info.strip() else exception
    return status, body, exception


def exit_status(text: str) -> int | None:
    """The exit status an observation records (mini's ``<returncode>``), or None."""
    return unwrap(text).status


# ---- helpers ----------------------------------------------------------------------------------


def _one_line(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: max(0, limit - 1)] + "\u2026"


def _q(text: str, limit: int = 60) -> str:
    return _one_line(text, limit)


def _nonblank(body: str) -> list[str]:
    return [ln for ln in body.split("\n") if ln.strip()]


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


# ---- error lines ------------------------------------------------------------------------------

_EXC_LINE = re.compile(
    r"^(?:E\s+)?([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Failure|Warning|Fault))\b(?::.*)?$"
)
_ERR_LINE = re.compile(
    r"^(?:[-*]\s*)?(?:[EF]\d{3}\s+\S|(?:[\w./ -]{1,60}: )?(?:error|fatal|ERROR|FATAL|Error)\b[:\s]"
    r"|.*(?:command not found|No such file or directory|No module named |Permission denied|cannot open))"
)
# Wordings that are errors only when the command failed or recorded no status (a script may print them).
_WEAK_ERR_LINE = re.compile(r"^.*(?:\bnot found\.?$|\bdoes not exist\.?$|\bCould not find |\bUnable to )")


def first_error(body: str, *, weak: bool = True) -> str | None:
    """The line that says what went wrong: the exception of the last traceback, else an error line.

    ``weak=False`` ignores wordings a successful script may print ("x does not exist").
    """
    lines = body.split("\n")
    tb = max(
        (i for i, ln in enumerate(lines) if ln.strip().startswith("Traceback (most recent call last)")),
        default=-1,
    )
    if tb >= 0:
        for ln in lines[tb + 1 :]:
            s = ln.strip()
            if s and not ln[:1].isspace() and not s.startswith(("File ", "^", "~")):
                return s
    for ln in lines:
        s = ln.strip()
        if s and (_EXC_LINE.match(s) or _ERR_LINE.match(s)):
            return s
    if weak:
        return next((ln.strip() for ln in lines if _WEAK_ERR_LINE.match(ln.strip())), None)
    return None


# ---- test runs --------------------------------------------------------------------------------

_TEST_CMD = re.compile(
    r"\b(?:pytest|py\.test|runtests(?:\.py)?|unittest|tox|nox|nosetests|manage\.py\s+test|bin/test|"
    r"go\s+test|cargo\s+test|npm\s+(?:run\s+)?test|yarn\s+test|sympy\.testing|setup\.py\s+test)\b"
)
_PYTEST_TOTAL = re.compile(
    r"^=*\s*((?:\d+ (?:passed|failed|errors?|skipped|xfailed|xpassed|deselected|warnings?|rerun)(?:, )?)+)"
    r"\s+in\s+[\d.]+\s*(?:s|seconds)\b.*$|^=+ no tests ran in .*$",
    re.MULTILINE,
)
_COUNT = re.compile(r"(\d+) (passed|failed|errors?|skipped|xfailed|xpassed)")
_RAN = re.compile(r"^Ran (\d+) tests? in ")
_UNITTEST_END = re.compile(r"^(OK|FAILED)\b\s*(\(.*\))?\s*$")
_UNITTEST_FAIL = re.compile(r"^(FAIL|ERROR): (\S+)(?: \(([\w.]+)\))?")
_PYTEST_FAIL = re.compile(r"^(?:FAILED|ERROR) ([^\s(]\S*)|^(\S+::\S+) (?:FAILED|ERROR)\b")
_PYTEST_HEADER = re.compile(r"^_{3,} (?:ERROR collecting )?(\S.*?) _{3,}$")
_DOTS = re.compile(r"^[.FEsxX]+\s*(?:\[\s*\d+%\])?$")


def _test_summary(body: str, lines: list[str]) -> str | None:
    total = next((m for ln in reversed(lines) if (m := _PYTEST_TOTAL.match(ln.strip()))), None)
    first_fail = None
    for ln in lines:
        s = ln.strip()
        m = _PYTEST_FAIL.match(s)
        if m:
            first_fail = m.group(1) or m.group(2)
            break
    if first_fail is None:
        for ln in lines:
            m = _UNITTEST_FAIL.match(ln.strip())
            if m:
                first_fail = f"{m.group(2)} ({m.group(3)})" if m.group(3) else m.group(2)
                break
    if first_fail is None:
        first_fail = next((m.group(1) for ln in lines if (m := _PYTEST_HEADER.match(ln.strip()))), None)
    fail = f"; first failure: {first_fail}" if first_fail else ""
    if total is not None:
        counts = ", ".join(f"{n} {w}" for n, w in _COUNT.findall(total.group(0)))
        return f"tests: {counts or 'no tests ran'}{fail}"
    ran = next((i for i in range(len(lines) - 1, -1, -1) if _RAN.match(lines[i].strip())), None)
    if ran is not None:
        ran_n = lines[ran].strip().split()[1]
        end = next((m for ln in lines[ran + 1 : ran + 6] if (m := _UNITTEST_END.match(ln.strip()))), None)
        verdict = ""
        if end is not None:
            verdict = f", {end.group(1)}" + (f" {end.group(2)}" if end.group(2) else "")
        return f"tests: {ran_n} ran{verdict}{fail}"
    dots = [ln.strip() for ln in lines if _DOTS.match(ln.strip()) and len(ln.strip()) > 3]
    if dots:
        marks = "".join(d.split("[")[0] for d in dots)
        tally = [(marks.count("."), "passed"), (marks.count("F"), "failed"), (marks.count("E"), "errors")]
        shown = ", ".join(f"{k} {w}" for k, w in tally if k) or "0 passed"
        return f"tests (no final line): {shown} so far{fail}"
    return None


# ---- reads ------------------------------------------------------------------------------------

_FILE_HEADER = re.compile(r"^\[File: (.+?) \((\d+) lines? total\)\]$", re.MULTILINE)
_ABOVE = re.compile(r"^\((\d+) more lines? above\)$", re.MULTILINE)
_CAT_N_ON = re.compile(r"result of running `cat -n` on (?:a snippet of )?(\S+?):?\s*$", re.MULTILINE)
_SED_RANGE = re.compile(r"\bsed\s+-n\s+['\"]?(\d+)\s*,\s*(\d+)\s*p")
_HEAD_N = re.compile(r"\bhead\s+(?:-n\s*|-)(\d+)")
_VIEW_RANGE = re.compile(r'"view_range"\s*:\s*\[\s*(\d+)\s*,\s*(-?\d+)')
_DEF_NAME = re.compile(
    r"\b(class|def|function|func|fn|interface|struct|enum|trait|impl|module|object)\s+([\w$.]+)"
)
_SWE_READERS = ("open", "goto", "scroll_up", "scroll_down", "view", "read_file")


def _outline_names(code: str, path: str | None, offset: int | None) -> list[str]:
    """``kind name Lnn`` of the top-level definitions; ``offset=None``: file lines unknown, no numbers."""
    try:
        from .. import outline as ol  # lazy: tree-sitter loads only when a read is summarized

        entries = ol.outline(code, path=path, max_entries=40)
    except Exception:  # an outline is a nicety; a failing grammar must not break a note
        return []
    names: list[str] = []
    tops = [e for e in entries if e.depth == 0] or entries
    for e in tops:
        m = _DEF_NAME.search(e.signature)
        if m:
            kind = "def" if m.group(1) in ("def", "function", "func", "fn") else m.group(1)
            names.append(f"{kind} {m.group(2)}" + (f" L{e.line + offset}" if offset is not None else ""))
    return names


def _read_summary(
    command: str,
    tool: str,
    body: str,
    path: str | None,
    elided: int | None,
    limit: int,
    head_chars: int | None = None,
) -> str | None:
    from ..outline import strip_line_numbers

    if elided is not None and head_chars is not None:
        shown = _elided_numbered(body, head_chars)
        if shown:
            (a, b, head_text), (c, d, tail_text) = shown
            names = _outline_names(head_text, path, 0) + _outline_names(tail_text, path, 0)
            text = f"{path or 'file'} lines {a}-{b} and {c}-{d} ({elided:,} chars elided)"
            return _with_names(text, names, limit)

    header = _FILE_HEADER.search(body[:2000])
    total = int(header.group(2)) if header else None
    if header:
        path = header.group(1)
    cat_on = _CAT_N_ON.search(body[:2000])
    if cat_on:
        path = cat_on.group(1)
        body = body[cat_on.end() :]
    code, numbers = strip_line_numbers(body)
    n = len(code.split("\n")) if code else 0
    start: int | None = None
    if numbers:
        start, end = numbers[0], numbers[-1]
    else:
        above = _ABOVE.search(body[:2000])
        sed = _SED_RANGE.search(command) or _VIEW_RANGE.search(command)
        head_n = _HEAD_N.search(command)
        if above:
            start = int(above.group(1)) + 1
        elif sed:
            start = int(sed.group(1))
        elif (
            (head_n or re.match(r"^\s*(?:cat|nl|bat)\b", command))
            and "|" not in command
            and "tail" not in command
        ):
            start = 1
        end = (start + n - 1) if start is not None else 0
        if header and start is None and n:
            start, end = 1, n
    if not n and not header:
        return None
    where = path or "file"
    if start is not None and elided is None:
        rng = f" lines {start}-{end}"
    elif elided is not None:
        rng = f" head and tail ({elided:,} chars elided)"
        if head_chars is not None and start == 1:
            # only the head's rows are file lines; the tail's position in the file is unknown
            code = "\n".join(body[:head_chars].removesuffix("\n").split("\n")[:-1])
            n = code.count("\n") + 1
            rng = f" lines 1-{n}, then its tail ({elided:,} chars elided)"
        else:
            n = 0  # no outline: its line numbers would be guesses
    else:
        rng = f" ({n} lines)"
    of = f" of {total}" if total is not None and elided is None else ""
    # numbered text: outline maps its own line numbers to the file's; plain text is offset by hand
    source, offset = (body, 0) if numbers else (code, (start - 1) if start else None)
    names = _outline_names(source, path, offset) if n >= 3 else []
    return _with_names(f"{where}{rng}{of}", names, limit)


def _with_names(text: str, names: list[str], limit: int) -> str:
    if not names:
        return text
    text += ": "
    room = limit - len(text)
    shown: list[str] = []
    for i, name in enumerate(names):
        if len(", ".join([*shown, name])) + 10 > room:  # room for ", +N more"
            return text + ", ".join([*shown, f"+{len(names) - i} more"])
        shown.append(name)
    return text + ", ".join(shown)


def _elided_numbered(body: str, head_chars: int) -> tuple[tuple[int, int, str], tuple[int, int, str]] | None:
    """File line ranges of a numbered read whose middle mini elided (the cut lines are partial)."""
    from ..outline import strip_line_numbers

    parts = []
    for part, drop in ((body[:head_chars].removesuffix("\n"), -1), (body[head_chars + 1 :], 0)):
        lines = part.split("\n")
        lines = lines[:-1] if drop < 0 else lines[1:]
        text = "\n".join(lines)
        _, numbers = strip_line_numbers(text)
        if not numbers:
            return None
        parts.append((numbers[0], numbers[-1], text))
    return parts[0], parts[1]


# ---- searches ---------------------------------------------------------------------------------

_SWE_FOUND = re.compile(
    r'^Found (\d+) (matches|snippets|classes|methods|functions)? ?(?:for|containing|with name) ["`]?(.*?)["`]? in (.+?):?\s*\.?$',
    re.MULTILINE,
)
_SWE_NONE = re.compile(r'^(?:No matches found for ["`](.*?)["`] in (\S+)|Could not find .*)$', re.MULTILINE)
_SWE_MANY = re.compile(r'^More than (\d+) files matched for "(.*?)" in (\S+)', re.MULTILINE)
_DIR_LINE = re.compile(r"^(\S.*?) \((\d+) matches\)$")
_GREP_HIT = re.compile(r"^(?:\./)?([^\s:][^:]*?):(\d+):")
_GREP_FILE = re.compile(r"^(?:\./)?([\w./@+-]+\.[\w]+|[\w./@+-]*/[\w.@+-]+):(?!\d+-)")
_GREP_CTX = re.compile(r"^(?:\./)?[^\s:][^:]*?-\d+-|^--$")
_BINARY = re.compile(r"^(?:Binary file (.+) matches|grep: (.+): binary file matches)$")


def _files(names: list[str]) -> str:
    uniq = list(dict.fromkeys(names))
    if not uniq:
        return ""
    if len(uniq) <= 2:
        return " (" + ", ".join(normalize_path(u) for u in uniq) + ")"
    return ""


_PLURALS = {"match": "matches", "entry": "entries"}


def _plural(n: int, word: str) -> str:
    return f"{n} {word if n == 1 else _PLURALS.get(word, word + 's')}"


def _swe_search(body: str) -> str | None:
    many = _SWE_MANY.search(body)
    if many:
        return f'"{_q(many.group(2), 40)}": more than {many.group(1)} files match in {many.group(3)} (not listed)'
    found = _SWE_FOUND.search(body)
    if found:
        n, what, term, where = (
            int(found.group(1)),
            found.group(2) or "matches",
            found.group(3),
            found.group(4),
        )
        files = [m.group(1) for ln in body.split("\n") if (m := _DIR_LINE.match(ln.strip()))]
        if files:
            return f'"{_q(term, 40)}": {_plural(n, "hit")} in {_plural(len(files), "file")}{_files(files)}'
        if what in ("snippets", "methods", "classes", "functions"):
            return f'"{_q(term, 40)}": {n} {what[:-1] if n == 1 and what != "classes" else what if n != 1 else "class"} in {where}'
        if body[found.end() : found.end() + 200].lstrip().startswith("Line "):
            return f'"{_q(term, 40)}": {_plural(n, "hit")} in {normalize_path(where)}'
        paths = [ln.strip() for ln in body[found.end() :].split("\n") if ln.strip().startswith(("/", "."))]
        return f'"{_q(term, 40)}": {_plural(n, "file")} found{_files(paths)}'
    none = _SWE_NONE.search(body)
    if none:
        return (
            f'"{_q(none.group(1), 40)}": no hits in {none.group(2)}'
            if none.group(1) is not None
            else _one_line(none.group(0), 100)
        )
    return None


def _grep_summary(command: str, lines: list[str], head: str, reads: tuple[str, ...]) -> str:
    files: list[str] = []
    hits = 0
    binary = 0
    words = command.split()
    if head in ("find", "fd", "locate") or (head == "git" and "ls-files" in words):
        paths = [ln.strip() for ln in lines if not ln.startswith(("find:", "fd:"))]
        return f"{_plural(len(paths), 'path')} found{_files(paths)}"
    if any(w in ("-l", "--files-with-matches", "-rl", "-lr", "-Rl", "-lR", "-rli", "-ril") for w in words):
        return f"{_plural(len(lines), 'file')} match{_files(lines)}"
    grep_at = next(
        (i for i, w in enumerate(words) if w.rsplit("/", 1)[-1] in ("grep", "rg", "ag", "egrep")), len(words)
    )
    context = any(
        re.match(r"^-(?:[ABC]\d*|\w*[ABC])$|^--(?:after|before)?-?context", w) for w in words[grep_at:]
    )
    for ln in lines:
        if _BINARY.match(ln.strip()):
            binary += 1
            continue
        if _GREP_CTX.match(ln):
            continue
        m = _GREP_HIT.match(ln) or _GREP_FILE.match(ln)
        if m:
            files.append(m.group(1))
        hits += 1
    if not files and hits and reads and reads != (".",):
        files = list(reads[:1]) if len(reads) == 1 else []
    if context and not any(_GREP_HIT.match(ln) for ln in lines):
        return f"{_plural(hits, 'line')} with context" + (
            f" in {normalize_path(reads[0])}" if len(reads) == 1 and reads != (".",) else ""
        )
    nfiles = len(set(files))
    where = f" in {_plural(nfiles, 'file')}{_files(files)}" if nfiles else ""
    extra = f" (+{binary} binary)" if binary else ""
    return f"{_plural(hits, 'hit')}{where}{extra}"


def _numbered(body: str) -> bool:
    from ..outline import strip_line_numbers

    return len(body) < 200_000 and body.count("\n") >= 2 and strip_line_numbers(body)[1] is not None


# ---- the summarizer ---------------------------------------------------------------------------

_FORMAT_ERRORS = (
    "No tool calls found in the response",
    "Please always provide EXACTLY ONE action",
    "Your output was not formatted correctly",
    "Your last output did not use any tool calls",
    "The command you submitted was not in the expected format",
)
_CONTROL = {"plan", "succeed", "fail", "submit", "exit", "exit_cost", "exit_context", "exit_format"}
_EDIT_OK = re.compile(
    r"^(?:File updated\.|Replaced \d+ occurrences?|Text replaced\.|File created successfully at: (\S+)"
    r"|The file (\S+) has been edited\.|New file created|Edit successful)",
    re.MULTILINE,
)
_EDIT_FAIL = re.compile(
    r"^(?:Your proposed edit has introduced new syntax error|Your changes have NOT been applied|No replacement was performed|Error: )",
    re.MULTILINE,
)
_COMMIT = re.compile(r"^\[([\w./-]+)(?: \(root-commit\))? ([0-9a-f]{7,40})\] (.*)$")
_STAT = re.compile(r"^\d+ files? changed")
_HANDOFF = (
    "We're currently solving the following issue",
    "Here is a demonstration of how to correctly",
)  # CodeR role switch
_LS = re.compile(r"^\s*(?:ls|ll|tree|dir)\b")
_DIFF = re.compile(r"^diff --git a/(\S+)", re.MULTILINE)


def summarize(command: str, text: str, tool: str = "bash", *, limit: int = MAX_CHARS) -> Summary:
    """What one tool output showed, in one line of at most ``limit`` characters. Never raises."""
    try:
        s = _summarize(command or "", text or "", tool or "bash", max(16, limit))
    except Exception as e:  # a note must always be written; say that we could not read the output
        s = Summary("output", f"(no summary: {type(e).__name__})", None, False)
    return Summary(s.kind, _one_line(s.text, max(16, limit)), s.status, s.informative)


@lru_cache(maxsize=2048)
def _summarize(command: str, text: str, tool: str, limit: int) -> Summary:
    u = unwrap(text[:_SCAN])
    body, status = u.body, u.status
    lines = _nonblank(body)
    cmd = command.strip()
    cmd_head = cmd.split(None, 1)[0].rsplit("/", 1)[-1] if cmd else ""
    verb = tool if tool not in ("bash", "shell", "execute_bash", "run") else cmd_head

    def out(kind: str, line: str, informative: bool = True) -> Summary:
        if u.exception and kind != "test":
            line = f"{_one_line(u.exception, 70)}; {line}"
        return Summary(kind, line, status, informative)

    if any(body.lstrip().startswith(p) for p in _FORMAT_ERRORS):
        return out("format", "format error: the reply's command was not run")
    from ..protocol import command_of

    if command_of(tool, cmd) is not None:
        return out("context", f"answer of context command `{command_line(tool, cmd, 60)}`")
    if verb in _CONTROL:
        return out(
            "control",
            f'control action `{verb}`: "{_one_line(lines[0], 90)}"'
            if lines
            else f"control action `{verb}`; no output",
        )
    info = analyze(cmd, tool)

    if (
        _TEST_CMD.search(cmd)
        or info.kind == "test"
        or _PYTEST_TOTAL.search(body)
        or re.search(r"^Ran \d+ tests? in ", body, re.M)
    ):
        t = _test_summary(body, body.split("\n"))
        if t:
            return out("test", t)
        err = first_error(body)
        if (_TEST_CMD.search(cmd) or info.kind == "test") and err:
            return out("error", f"tests did not run: {err}")
    if not lines:
        if info.kind == "search" and cmd_head in ("find", "fd", "locate"):
            return out("search", "0 paths found")
        if info.kind == "search" and cmd_head in ("grep", "rg", "ag", "egrep", "fgrep"):
            return out("search", "0 hits")
        if info.kind == "edit":
            verb_ = "removed" if cmd_head == "rm" else "edit of"
            return out("edit", f"{verb_} {', '.join(info.writes[:3]) or 'files'}; no output")
        return out("empty", "no output")
    if lines[0].strip() == "Your command ran successfully and did not produce any output.":
        return out("empty", "no output")

    edit_fail = _EDIT_FAIL.search(body)
    edit_ok = _EDIT_OK.search(body)
    header = _FILE_HEADER.search(body[:4000])
    if edit_fail and (
        verb in ("edit", "str_replace_editor", "str_replace_based_edit_tool", "insert", "str_replace")
        or header
        or "end_of_edit" in cmd
    ):
        err = first_error(body[edit_fail.start() :]) or lines[0]
        where = f" to {header.group(1)}" if header else ""
        return out("error", f"edit{where} NOT applied: {err.lstrip('- ')}")
    if edit_ok or (header and verb in ("edit", "insert", "create", "append", "str_replace")):
        path = (header.group(1) if header else None) or (
            edit_ok.group(1) or edit_ok.group(2) if edit_ok else None
        )
        path = path or (info.writes[0] if info.writes else None)
        size = f" (now {_plural(int(header.group(2)), 'line')})" if header else ""
        what = "created" if verb == "create" else "edited"
        return out("edit", f"{what} {path or 'a file'}{size}")

    err = first_error(body, weak=status != 0)
    failed = status not in (None, 0) and not (
        status == 1 and cmd_head in ("grep", "rg", "ag", "git") and not err
    )
    looks_read = bool(
        header
        or verb in _SWE_READERS
        or info.kind == "read"
        or _CAT_N_ON.search(body[:2000])
        or _numbered(body)
        or (u.head_chars is not None and _elided_numbered(body, u.head_chars))
    )
    short = len(lines) <= 2 and not header
    # a traceback printed by a run; in a file read or a search hit it is just text
    crashed = "Traceback (most recent call last)" in body and not looks_read and info.kind != "search"
    if err and (failed or short or crashed):
        return out("error", f"error: {err}")

    if looks_read:
        path = info.reads[0] if info.reads else None
        if path is None and tool not in ("bash",):
            m = re.search(r'"(?:path|file|filename|file_path)"\s*:\s*"([^"]+)"', cmd)
            path = m.group(1) if m else None
        r = _read_summary(cmd, tool, body, path, u.elided, limit, u.head_chars)
        if r:
            return out("read", r)

    swe = (
        _swe_search(body)
        if verb in ("search_file", "search_dir", "find_file")
        or verb.startswith("rover_search")
        or body.startswith(("Found ", "No matches found", "More than "))
        else None
    )
    if swe:
        return out("search", swe)
    if _DIFF.search(body) and "git" in cmd:
        files = _DIFF.findall(body)
        plus = sum(1 for ln in body.split("\n") if ln.startswith("+") and not ln.startswith("+++"))
        minus = sum(1 for ln in body.split("\n") if ln.startswith("-") and not ln.startswith("---"))
        return out("diff", f"diff of {_plural(len(files), 'file')}{_files(files)}: +{plus} -{minus} lines")
    commit = _COMMIT.match(lines[0].strip())
    if commit and "git" in cmd:
        stat = next((ln.strip() for ln in lines[1:6] if _STAT.match(ln.strip())), "")
        return out(
            "vcs",
            f'committed {commit.group(2)} on {commit.group(1)}: "{_q(commit.group(3), 60)}"'
            + (f"; {stat}" if stat else ""),
        )
    if re.search(r"\bpip\d?(?:\.\d+)? install\b|\bpython\S* -m pip install\b", cmd):
        done = next(
            (ln.strip() for ln in reversed(lines) if ln.startswith(("Successfully installed", "ERROR:"))),
            None,
        )
        if done is None and all(
            "already satisfied" in ln or ln.startswith(("Looking in", "WARNING", "Requirement"))
            for ln in lines
        ):
            done = "requirements already satisfied"
        if done:
            return out("install", f"pip: {_q(done, 120)}")
    if body.startswith(_HANDOFF):
        return out("control", f'instructions for the next agent: "{_q(lines[0], 80)}"')
    if _LS.match(cmd) and all(re.match(r"\s*(?:sed|head|tail|sort)\b", seg) for seg in cmd.split("|")[1:]):
        entries = [
            ln for ln in lines if not ln.startswith("total ") and not ln.rstrip().endswith(":")
        ]  # ls -R headings
        names = ", ".join(e.split()[-1] for e in entries[:4])
        return out("listing", f"{_plural(len(entries), 'entry')}: {names}{', …' if len(entries) > 4 else ''}")
    if info.kind == "search" and cmd_head not in ("git", "ls", "tree"):
        return out("search", _grep_summary(cmd, lines, cmd_head, info.reads))
    if info.kind == "edit":
        what = f"edit of {', '.join(info.writes[:2])}" if info.writes else "a script that writes files"
        return out(
            "edit",
            f'{what}; printed "{_q(lines[0], 80)}"'
            + (f" (+{len(lines) - 1} lines)" if len(lines) > 1 else ""),
        )
    if err and failed:
        return out("error", f"error: {err}")
    # Python warnings lead many script outputs; the first line of the output proper says more
    plain = [
        ln
        for i, ln in enumerate(lines)
        if "Warning: " not in ln and not (i and "Warning: " in lines[i - 1] and ln[:1].isspace())
    ]
    lines = plain or lines
    first = _q(lines[0].strip(), 90)
    if len(lines) == 1:
        return out("output", f'"{first}"', False)
    return out("output", f'"{first}" … "{_q(lines[-1].strip(), 50)}"', False)

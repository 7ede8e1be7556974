"""One-line summaries of tool outputs, made without a model call (the notes of hidden outputs).

``summarize(command, text, tool)`` reads the command that produced an output and the output
itself, in every shape refold loads (mini 1.x/2.x ``<returncode>`` wrappers with head/tail
elision, SWE-agent windows and search results, editor tools), and says in one line what the
output showed: a file read's path, line range and outline; a search's hits and files; a test
run's counts and first failure; an error's first error line. Deterministic, bounded, never raises.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from functools import lru_cache

from ..outline_lines import SCAN
from ..shell import analyze
from ..shell_lex import lex
from .summary_edits import edit_result, plan_state, rejected, tool_error
from .summary_parts import (  # the per-kind readers (one package: private names shared on purpose)
    _CAT_N_ON,
    _FILE_HEADER,
    _SWE_READERS,
    Numbered,
    _elided_numbered,
    _grep_summary,
    _named_search,
    _numbered,
    _read_summary,
    _swe_search,
)
from .summary_text import _files, _left_cut, _named_paths, _nonblank, _one_line, _plural
from .summary_verdicts import (
    _PYTEST_TOTAL,
    _TEST_CMD,
    SUBAGENT_TOOLS,
    _test_summary,
    first_error,
    report_summary,
)
from .summary_wrap import unwrap

__all__ = ["MAX_CHARS", "Summary", "summarize"]

MAX_CHARS = 160


@dataclass(frozen=True, slots=True)
class Summary:
    kind: str  # read | reads | search | test | error | edit | listing | diff | vcs | install | empty | format | control | context | report | output
    text: str  # one line, at most the limit
    status: int | None  # the recorded exit status (mini's <returncode>); None when none was recorded
    informative: bool  # False: only the generic first/last-line fallback


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


def _echoed(body: str, template: str | None) -> tuple[str, int | None] | None:
    """(the output before it, the status it printed) when the output ends with the line a closing
    ``echo "rc=$?"`` or ``echo ok`` printed."""
    if not template:
        return None
    head, _, last = body.rstrip("\n").rpartition("\n")
    pattern = re.escape(template).replace(re.escape("$?"), r"(-?\d{1,9})", 1)
    m = re.fullmatch(pattern, last.strip())
    if m is None:
        return None
    return head, int(m.group(1)) if m.groups() else None


@lru_cache(maxsize=2048)
def _summarize(command: str, text: str, tool: str, limit: int) -> Summary:
    u = unwrap(text[:SCAN])  # of a huge output, its head: summaries stay linear and cheap
    body, status = u.body, u.status
    cmd = command.strip()
    echoed = _echoed(body, analyze(cmd, tool).echo_after) if "echo" in cmd else None
    if echoed is not None and (echoed[1] is not None or analyze(cmd, tool).kind in ("read", "search")):
        # 'cmd; echo $?': that line is the status, no output; 'cat f && echo ok': no line of f. A
        # command's closing echo may be its verdict ('... || echo "Passed (errored as expected)"')
        body, echoed_status = echoed
        u = replace(u, blank_tail=0)  # blank lines before the echoed line are in ``body``
        status = status if echoed_status is None else echoed_status
    lines = _nonblank(body)
    cmd_head = cmd.split(None, 1)[0].rsplit("/", 1)[-1] if cmd else ""
    verb = tool if tool not in ("bash", "shell", "execute_bash", "run") else cmd_head

    def out(kind: str, line: str, informative: bool = True) -> Summary:
        if u.exception and (kind != "test" or "timed out" in u.exception):
            line = f"{_one_line(u.exception, 70)}; {line}"
        return Summary(kind, line, status, informative)

    # what a line may hold after the exception ``out`` puts first (quotes are shrunk to fit it)
    room = limit - (len(_one_line(u.exception, 70)) + 2 if u.exception else 0)

    if any(body.lstrip().startswith(p) for p in _FORMAT_ERRORS):
        return out("format", "format error: the reply's command was not run")
    from ..context.recognize import ANY  # lazy: refold.context reads the mechanisms

    if ANY.command(tool, cmd) is not None:
        # the note names the command already: say what it was, not the command again
        return out("context", "answered from the history by the context manager, nothing run")
    if verb in _CONTROL:
        return out(
            "control",
            f'control action `{verb}`: "{_one_line(lines[0], 90)}"'
            if lines
            else f"control action `{verb}`; no output",
        )
    if tool in SUBAGENT_TOOLS:
        report = report_summary(body, _files(_named_paths(body), room=45), limit)
        if report:
            return out("report", report)
    info = analyze(cmd, tool)
    edited = edit_result(tool, body, info.writes, limit)
    if edited is not None:
        return out(*edited)
    if rejected(body):
        return out("error", "not run: the user rejected this tool use")
    tool_err = tool_error(body)
    if tool_err is not None:
        return out("error", f"error: {tool_err}")
    plan = plan_state(tool, cmd)
    if plan is not None:
        return out("control", plan)

    if (
        _TEST_CMD.search(cmd)
        or info.kind == "test"
        or _PYTEST_TOTAL.search(body)
        or re.search(r"^Ran \d+ tests? in ", body, re.M)
    ):
        t = _test_summary(body.split("\n"))
        if t:
            return out("test", t)
        err = first_error(body)
        if (_TEST_CMD.search(cmd) or info.kind == "test") and err:
            return out("error", f"tests did not run: {err}")
    if not lines:
        if u.exception and u.exception.startswith("still running"):
            return out("empty", "no output yet")  # not '0 hits': its output comes with a later call
        whole = info.kind == "search" and _prints_matches(cmd)  # 'find | xargs cat | jq': no records, not no paths
        if whole and cmd_head in ("find", "fd", "locate"):
            return out("search", "0 paths found")
        if whole and cmd_head in ("grep", "rg", "ag", "egrep", "fgrep"):
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

    # 'make 2>&1 | tail -40' records tail's exit status 0: whether make failed is only in its output
    ran = None if status == 0 and info.filtered and info.kind in ("command", "test") else status
    err = first_error(body, weak=ran != 0)
    numbered = Numbered(body)
    failed = ran not in (None, 0) and not (ran == 1 and cmd_head in ("grep", "rg", "ag", "git") and not err)
    failed = failed or (ran is None and status == 0 and err is not None)  # 'make | tail' printed its error
    looks_read = bool(
        header
        or verb in _SWE_READERS
        or info.kind == "read"
        or _CAT_N_ON.search(body[:2000])
        or _numbered(numbered)
        or (u.head_chars is not None and _elided_numbered(body, u.head_chars))
    ) and tool not in ("Grep", "Glob")  # Grep of one file prints 'N:line': hits, not a read of lines
    short = len(lines) <= 2 and not header
    # a traceback printed by a run; in a file read or a search hit it is just text
    crashed = "Traceback (most recent call last)" in body and not looks_read and info.kind != "search"
    if err and (failed or short or crashed):
        return out("error", f"error: {err}")

    # a sed address ('/def f/,/return/p') the shell analysis took for a path is not a file
    files = [r for r in dict.fromkeys(info.reads) if not re.search(r"/,|^/.*/[pd]?$", r)]
    if looks_read and len(files) > 1 and not header and numbered.lines[1] is None and cmd_head not in ("diff", "cmp"):
        # 'sed -n 1,80p a && sed -n 1,40p b', 'cat a b': where one file ends is not printed, so no
        # line range or outline line is known (the first file's would run into the second's)
        return out("reads", f"contents of {_plural(len(files), 'file')}{_files(files)}")
    if looks_read:
        path = info.reads[0] if info.reads else None
        if path is None and tool not in ("bash",):
            m = re.search(r'"(?:path|file|filename|file_path)"\s*:\s*"([^"]+)"', cmd)
            path = m.group(1) if m else None
        r = _read_summary(cmd, body, path, u.elided, limit, u.head_chars, numbered, info.first_line, u.blank_tail)
        bare = re.fullmatch(r"(\S+) \([\d,]+ lines?\)", r) if r and len(lines) > 0 else None
        if bare:  # no line range, no outline ('tail -30 f', 'cat f | jq'): what it printed says more
            where = "" if bare.group(1) == "file" else f"{_left_cut(bare.group(1), 60)}: "
            printed = _first_last(lines, 70, 50, room=room - len(where))
            return out("output", f"{where}{printed}" if printed else bare.group(0))
        if r:
            return out("read", _whole_range(r, text) if len(text) > SCAN else r)

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
            f'committed {commit.group(2)} on {commit.group(1)}: "{_one_line(commit.group(3), 60)}"'
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
            return out("install", f"pip: {_one_line(done, 120)}")
    if body.startswith(_HANDOFF):
        return out("control", f'instructions for the next agent: "{_one_line(lines[0], 80)}"')
    if _LS.match(cmd) and all(re.match(r"\s*(?:sed|head|tail|sort)\b", seg) for seg in cmd.split("|")[1:]):
        entries = [  # not ls -R headings, nor ls -a's '.' and '..' (two of the four names shown)
            ln for ln in lines
            if not ln.startswith("total ") and not ln.rstrip().endswith(":") and ln.split()[-1:] not in (["."], [".."])
        ]
        # the project's own files before its dotfiles: '.editorconfig, .eslintignore' says little
        shown = sorted((e.split()[-1] for e in entries), key=lambda n: n.startswith("."))[:4]
        if not entries:  # ``ls -a`` of an empty folder: only '.' and '..'
            return out("listing", "no entries")
        names = ", ".join(shown)
        return out("listing", f"{_plural(len(entries), 'entry')}: {names}{', …' if len(entries) > 4 else ''}")
    named = _named_search(tool, cmd, lines) if info.kind == "search" else None
    if named is not None:
        return out("search", named)
    if info.kind == "search" and cmd_head not in ("git", "ls", "tree") and _prints_matches(cmd):
        return out("search", _grep_summary(cmd, lines, cmd_head, info.reads))
    if info.kind == "edit":  # what it then printed reads like any output: its first and last lines
        what = f"edit of {', '.join(info.writes[:2])}" if info.writes else "a script that writes files"
        # long paths leave less room: the quotes shrink to fit, never cut open by the line's limit
        printed = _first_last(lines, 70, 40, room=room - len(what) - len("; printed "))
        return out("edit", f"{what}; printed {printed}" if printed else what)
    if err and failed:
        return out("error", f"error: {err}")
    return out("output", _first_last(lines, 90, 50, room=room) or _one_line(lines[0].strip(), room), False)


_SEARCHERS = frozenset({"grep", "egrep", "fgrep", "rg", "ag", "find", "fd", "locate"})
_KEEPS = frozenset({"head", "tail", "sed", "sort", "uniq", "grep", "egrep", "fgrep", "rg", "less", "more", "cat"})


def _prints_matches(command: str) -> bool:
    """Whether a search's output is its matches or paths: not when a later command of its pipeline
    (or ``find -exec``) makes something else of them (``find | xargs cat | jq``, ``grep | wc -l``)."""
    # find's '-exec ... \;' ends a simple command for the lexer: its end and the options after it
    cmds = [c for c in lex(command) if c.words and c.words[0] not in (";", "+") and not c.words[0].startswith("-")]
    i = next((k for k, c in enumerate(cmds) if c.words[0].rsplit("/", 1)[-1] in _SEARCHERS), None)
    if i is None:
        return True
    words = cmds[i].words
    if words[0].rsplit("/", 1)[-1] != "find" and any(re.match(r"-[A-Za-z]*c[A-Za-z]*$|--count", w) for w in words):
        return False  # grep -c: a count per file
    if "-exec" in words:
        run = words[words.index("-exec") + 1 :]
        if run[:1] not in (["grep"], ["ls"]) or (run[0] == "grep" and not any(re.match(r"-\w*l", w) for w in run)):
            return False
    for c in cmds[i + 1 :]:
        if not c.piped:
            break
        head, args = c.words[0].rsplit("/", 1)[-1], c.words[1:]
        if head == "xargs" and args[:1] in (["grep"], ["rg"], ["egrep"]) and any(re.match(r"-\w*l", w) for w in args):
            continue  # 'find | xargs grep -l x': the paths that match
        if head not in _KEEPS or any(re.match(r"-\w*[coz]", w) for w in args) or (head == "cat" and args):
            return False  # uniq -c, grep -c / -o, cat FILE: counts or other text
    return True


def _first_last(lines: list[str], first: int, last: int, room: int | None = None) -> str:
    """``"first" … "last"`` of what a command printed; Python warnings lead many script outputs,
    and the first line of the output proper says more. ``room``: at most that many characters,
    the quotes shortened to fit (a cut would leave a quote open); "" when not even short ones fit."""
    plain = [
        ln
        for i, ln in enumerate(lines)
        if "Warning: " not in ln and not (i and "Warning: " in lines[i - 1] and ln[:1].isspace())
    ]
    lines = plain or lines
    a = lines[0].strip()
    b = lines[-1].strip() if len(lines) > 1 else None
    if room is not None:  # the quotes' text shares what is left after the quote marks and " … "
        free = room - (2 if b is None else 7)
        if b is None:
            first = min(first, free)
        elif len(a) + len(b) > free:
            first = min(first, max(free - min(len(b), last), free * first // (first + last)))
            last = min(last, free - min(len(a), first))
        if first < 12:
            return ""
    head = f'"{_one_line(a, first)}"'
    return head if b is None else f'{head} … "{_one_line(b, last)}"'


_RANGE = re.compile(r" lines (\d+)-(\d+)")
_NUMBER = re.compile(r"^ *(\d+)(?:\t|:|\u2192)", re.MULTILINE)  # cat -n / nl, SWE-agent windows, Read tools


def _whole_range(summary: str, text: str) -> str:
    """A read's summary made from the head of a huge output (``SCAN``), its range ending where the
    whole output ends: the last printed line number, else the range's start plus every line
    printed (the outline still names only the head's definitions)."""
    m = _RANGE.search(summary)
    if m is None:
        return summary
    start = int(m.group(1))
    numbers = _NUMBER.findall(text[-4000:]) if _NUMBER.search(text[:4000]) else []
    end = int(numbers[-1]) if numbers and int(numbers[-1]) >= int(m.group(2)) else start + unwrap(text).lines - 1
    return f"{summary[: m.start()]} lines {start}-{end}{summary[m.end() :]}"

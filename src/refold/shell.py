"""What an agent's command reads and writes, judged from its text (no execution).

Dedup must not point a new file read at an old one when the file was edited in between,
so we need a cheap, conservative guess of the paths each command reads and writes.

The command line is lexed the way a shell reads it (quotes, escapes, operators, redirections,
heredocs) in one linear pass, so ``a > b`` inside ``python -c "..."``, a heredoc body or an
edit body is data, never a redirect. SWE-agent's windowed tools (``edit N:M``, ``goto``,
``scroll_down``, function tools ``edit``/``insert`` without a path) act on the file opened
last: ``analyze`` marks those ``open_reads``/``open_writes`` and names what a command opens
(``opens``); ``OpenFile`` threaded through a run's commands in order resolves them to paths.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

from .named_tools import analyze_tool
from .shell_info import CommandInfo
from .shell_lex import Simple, lex
from .shell_lines import first_line
from .shell_paths import is_path, normalize_path, patch_paths, path_words
from .shell_tools import is_code_mode

__all__ = ["SHELL_TOOLS", "analyze"]

_READERS = {"cat", "nl", "head", "tail", "less", "more", "sed", "awk", "bat", "view", "wc", "diff", "xxd", "od"}
_SEARCHERS = {"grep", "egrep", "fgrep", "rg", "ag", "ack", "find", "ls", "tree", "git", "fd"}
_PATTERN_FIRST = {"grep", "egrep", "fgrep", "rg", "ag", "ack"}  # first operand is a pattern
_GIT_PROSE = re.compile(r"-[a-zA-Z]*m|--message|--grep|--author|--committer|-[SG]")  # commit -m MSG, log --grep TEXT, -S TEXT
_PATTERN_OPTS = re.compile(r"-e|--regexp")  # grep -e PATTERN
_WRITERS = {"tee", "touch", "rm", "mkdir", "rmdir", "truncate", "unlink", "ln"}
_GIT_WRITES = {"apply", "checkout", "stash", "reset", "restore", "am", "merge", "rebase", "pull", "switch",
               "revert", "cherry-pick", "clean", "mv", "rm"}  # fmt: skip
_PREFIXES = {"sudo", "time", "env", "nohup", "command", "exec", "timeout", "nice", "xargs"}
_TESTS = ("pytest", "tox", "unittest", "runtests", "manage.py test", "npm test", "go test", "cargo test",
          "nosetests", "make test", "bin/test")  # fmt: skip
_INTERPRETERS = {"python", "python2", "python3", "perl", "ruby", "node", "php"}
_SHELLS = {"bash", "sh", "zsh", "dash"}
_SCRIPT_WRITE_RE = re.compile(
    r"open\([^)\n]*['\"][wax]b?\+?['\"]|write_text|write_bytes|os\.(?:replace|rename|remove|unlink)|shutil\."
    r"|\.unlink\(|writeFileSync|File\.write|open\(\s*my\s*\$\w+\s*,\s*['\"]>"
)
# SWE-agent 0.x tools that take a body up to an end line, and the windowed tools
_BODY_TOOLS = {"edit": "end_of_edit", "insert": "end_of_insert", "append": "end_of_append"}
_OPEN_READERS = {"goto", "scroll_up", "scroll_down"}
SHELL_TOOLS = frozenset({"bash", "shell", "sh", "terminal", "execute_bash", "run_command", "run_shell", "exec"})
"""Function tools whose ``command`` argument is a shell command (the context commands' recognizer
reads these exactly as named)."""
_ANALYZED_AS_SHELL = SHELL_TOOLS | {"run"}  # a tool named "run" may be a shell: reading it so only widens what it touches


# ---- analysis ---------------------------------------------------------------------------------


@dataclass(slots=True)
class _Facts:
    reads: list[str] = field(default_factory=list)
    writes: list[str] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)
    anything: bool = False
    open_reads: bool = False
    open_writes: bool = False
    opens: str | None = None
    first_line: int | None = None
    side_writes: list[str] = field(default_factory=list)  # written on the side (``make | tee log``)
    producer: str = ""  # the first command of the pipeline being read
    filtered: bool = False
    last_filter: str | None = None  # the last simple command read was this filter
    echo_after: str | None = None

    def info(self) -> CommandInfo:
        if self.writes or self.anything or self.open_writes:
            kind = "edit"
        elif "test" in self.kinds:
            kind = "test"
        elif self.kinds and all(k == "read" for k in self.kinds):
            kind = "read"
        elif "search" in self.kinds:
            kind = "search"
        elif "read" in self.kinds:
            kind = "read"
        else:
            kind = "command"
        reads = tuple(dict.fromkeys(self.reads))
        writes = tuple(dict.fromkeys(self.writes + self.side_writes))
        return CommandInfo(
            kind, reads, writes, self.anything, self.open_reads, self.open_writes, self.opens, self.first_line,
            self.filtered, self.last_filter, self.echo_after,
        )


def analyze(command: str, tool: str = "bash") -> CommandInfo:
    """Classify a command and name the paths it reads and writes (best effort, conservative)."""
    return _analyze(command, tool)


@lru_cache(maxsize=4096)  # a store's step is read twice (its facts, then History.append checks them)
def _analyze(command: str, tool: str) -> CommandInfo:
    if tool == "exec" and is_code_mode(command):
        # a Codex code-mode program not read as its commands (a loop, computed arguments): what it
        # reads is unknown and it may change any file, as a git checkout may
        return CommandInfo("command", (), (), True)
    if tool.lower() not in _ANALYZED_AS_SHELL:
        # A named tool (SWE-agent's editor functions, str_replace_editor, apply_patch, ...).
        return analyze_tool(tool, command)
    facts = _Facts()
    _shell(command.strip(), facts, 0)
    return facts.info()


def _shell(text: str, facts: _Facts, depth: int) -> None:
    first, nl, rest = text.partition("\n")
    head = first.split(None, 1)[0] if first.strip() else ""
    if head in _BODY_TOOLS and nl:
        # SWE-agent 'edit 5:7' + body + 'end_of_edit': the body is file content, not commands
        facts.open_writes = True
        facts.kinds.append("edit")
        end = re.search(r"^" + _BODY_TOOLS[head] + r"[ \t\r]*$", rest, re.MULTILINE)
        if end is not None and rest[end.end() :].strip() and depth < 3:
            _shell(rest[end.end() :].strip(), facts, depth + 1)
        return
    simples = lex(text)
    before = None  # the filter that ended the pipeline before the last command
    for simple in simples:
        before = facts.last_filter
        _simple(simple, facts, depth)
    if depth == 0:
        facts.first_line = first_line(simples)
        last = simples[-1] if len(simples) > 1 else None
        if last is not None and not last.piped and last.words[:1] == ["echo"] and not last.out:
            printed = " ".join(w for w in last.words[1:] if w not in ("-n", "-e"))
            if "$" not in printed.replace("$?", ""):  # a marker or the status, not data
                facts.echo_after = printed
                facts.last_filter = before  # '$?' is the status of what ran before the echo


def _simple(cmd: Simple, facts: _Facts, depth: int) -> None:
    for sub in cmd.subs if depth < 3 else ():
        _shell(sub, facts, depth + 1)
    for target in cmd.out:
        if not target.startswith("/dev/") and target:
            facts.writes.append(normalize_path(target))
    for source in cmd.inp:
        if is_path(source):
            facts.reads.append(normalize_path(source))
    words = cmd.words
    k = 0
    while k < len(words) and (("=" in words[k] and not words[k].startswith("=")) or words[k] in _PREFIXES):
        k += 1  # FOO=1 cmd, sudo cmd, timeout 10 cmd
        while k < len(words) and words[k - 1] in ("timeout", "nice") and words[k][:1].isdigit():
            k += 1
    xargs = "xargs" in words[:k]  # '| xargs grep x' runs grep on files named by its input
    words = words[k:]
    facts.last_filter = None
    if not words:
        if cmd.out:
            facts.kinds.append("edit")
        return
    head = words[0].rsplit("/", 1)[-1]
    rest = words[1:]
    if cmd.piped and not xargs and _is_filter(head, rest):
        _filter(head, rest, cmd, facts)
        return
    if not cmd.piped:  # 'cat <<EOF | tee f' writes text into f; 'cat a.py | tee log' shows a.py
        facts.producer = head if head != "cat" or not path_words(rest) else "cat FILE"
    segment = " ".join(words)
    body = "\n".join(cmd.bodies)
    if head in ("sed", "perl") and any(w.startswith("-i") or w in ("-pi", "-pie") for w in rest):
        operands = [w for w in rest if not w.startswith("-")]
        facts.writes.extend(path_words(operands[1:]) if head == "sed" or "-e" not in rest else path_words(operands))
        facts.kinds.append("edit")
    elif head in _WRITERS:
        facts.writes.extend(path_words(rest))
        facts.kinds.append("edit")
    elif head in ("mv", "cp", "install", "rsync") and rest:
        operands = [w for w in rest if not w.startswith("-")]
        moved = operands if head == "mv" else operands[-1:]  # mv removes its sources too
        facts.writes.extend(path_words(moved))
        facts.reads.extend(path_words(operands[:-1]) if head != "mv" else [])
        facts.kinds.append("edit")
    elif head == "apply_patch" or (head in ("patch", "git") and patch_paths(body)):
        named = patch_paths(body) or patch_paths(" ".join(rest))
        if named:
            facts.writes.extend(named)
        else:
            facts.anything = True
        facts.kinds.append("edit")
    elif head == "patch" or (head == "git" and rest[:1] and rest[0] in _GIT_WRITES):
        facts.anything = True
        facts.kinds.append("edit")
    elif head == "str_replace_editor" and len(rest) >= 2:
        path = normalize_path(rest[1])
        if rest[0] == "view":
            facts.reads.append(path)
            facts.kinds.append("read")
        else:
            facts.writes.append(path)
            facts.kinds.append("edit")
    elif head in ("open", "create") and rest:
        path = normalize_path(rest[0])
        facts.opens = path
        if head == "create":
            facts.writes.append(path)
            facts.kinds.append("edit")
        else:
            facts.reads.append(path)
            facts.kinds.append("read")
    elif head in _BODY_TOOLS:  # a one-line 'edit 5:7' (body missing) still targets the open file
        facts.open_writes = True
        facts.kinds.append("edit")
    elif head in _OPEN_READERS:
        facts.open_reads = True
        facts.kinds.append("read")
    elif head == "search_file":
        named = path_words(rest[1:2])
        facts.reads.extend(named)
        facts.open_reads = facts.open_reads or not named
        facts.kinds.append("search")
    elif head in ("search_dir", "find_file"):
        facts.reads.extend(path_words(rest[1:2]) or ["."])
        facts.kinds.append("search")
    elif head in _INTERPRETERS and _inline_code(rest, body) is not None:
        code = _inline_code(rest, body) or ""
        if _SCRIPT_WRITE_RE.search(code):
            facts.anything = True
            facts.kinds.append("edit")
        elif any(t in segment for t in _TESTS):
            facts.kinds.append("test")
        else:
            facts.kinds.append("command")
    elif head in _SHELLS and len(rest) >= 2 and re.fullmatch(r"-[a-z]*c[a-z]*", rest[0]) and depth < 3:
        _shell(rest[1], facts, depth + 1)  # bash -c / bash -lc 'cmd': analyze the inner command
    elif head in _READERS:
        facts.reads.extend(path_words(rest))
        facts.kinds.append("read")
    elif head in _SEARCHERS:
        # a commit message or a -e pattern is prose, which a quoted file name's space now admits as a path
        prose = _GIT_PROSE if head == "git" else _PATTERN_OPTS if head in _PATTERN_FIRST else None
        operands = [w for i, w in enumerate(rest) if not w.startswith("-") and not (prose and i and prose.fullmatch(rest[i - 1]))]
        if head in _PATTERN_FIRST and not any(w in ("-e", "-f") or w.startswith("--regexp") for w in rest):
            operands = operands[1:]
        elif head == "git" and operands[:1] == ["grep"] and "-e" not in rest:
            operands = operands[2:]  # git grep PATTERN [PATH...]
        facts.reads.extend(path_words(operands) or ["."])
        facts.kinds.append("search")
    elif any(t in segment for t in _TESTS):
        facts.kinds.append("test")
    else:
        facts.kinds.append("command")


# ---- pipelines --------------------------------------------------------------------------------
# A pipeline's output is what its first command printed, passed through filters: ``make 2>&1 |
# tail -40`` shows make's output, ``cat f | head`` a read of f, ``grep -rn x . | head`` a search.
# A filter is a command reading only its stdin (no file operand); it shapes the kind it is fed
# only where it changes what the lines are: grep over a read makes it a search, wc makes counts.

_FILTERS = {"head", "tail", "grep", "egrep", "fgrep", "rg", "ag", "ack", "sort", "uniq", "wc", "cut", "sed",
            "awk", "gawk", "mawk", "tee", "less", "more", "cat", "nl", "tr", "column", "jq", "rev", "fmt",
            "paste", "fold", "expand", "unexpand", "tac", "batcat", "bat", "strings"}  # fmt: skip
_SCRIPT_FIRST = {"sed", "awk", "gawk", "mawk", "jq"} | _PATTERN_FIRST  # first operand: a script or a pattern
_VALUE_OPTIONS: dict[str, frozenset[str]] = {
    "head": frozenset({"-n", "-c", "--lines", "--bytes"}),
    "tail": frozenset({"-n", "-c", "--lines", "--bytes"}),
    "sort": frozenset({"-k", "-t", "-o", "-S", "-T", "--key", "--field-separator"}),
    "uniq": frozenset({"-f", "-s", "-w"}),
    "cut": frozenset({"-d", "-f", "-c", "-b", "--delimiter", "--fields"}),
    "sed": frozenset({"-e", "-f", "--expression"}),
    "awk": frozenset({"-F", "-v", "-f"}),
    "jq": frozenset({"--arg", "--argjson", "--indent"}),
    "fold": frozenset({"-w"}),
    "column": frozenset({"-s", "-t", "-c"}),
    "nl": frozenset({"-b", "-w", "-s", "-v", "-i", "-n"}),
    **dict.fromkeys(
        ("grep", "egrep", "fgrep", "rg", "ag", "ack"),
        frozenset({"-e", "-f", "-A", "-B", "-C", "-m", "--max-count", "-g", "--glob", "-t", "--type", "--include",
                   "--exclude", "--regexp", "--file", "--context"}),  # fmt: skip
    ),
}
_VALUE_OPTIONS |= {"gawk": _VALUE_OPTIONS["awk"], "mawk": _VALUE_OPTIONS["awk"]}
_TEXT_WRITERS = {"echo", "printf", "cat", "yes"}  # 'echo x | tee f' writes f on purpose: an edit


def _operands(head: str, rest: list[str]) -> list[str]:
    """The file operands of a filter command (its options, their values and its script left out)."""
    values = _VALUE_OPTIONS.get(head, frozenset())
    operands: list[str] = []
    script_given = False
    skip = False
    for w in rest:
        if skip:
            skip = False
            continue
        if w.startswith("-") and w != "-":
            if w in values:
                skip = True
                script_given = script_given or w in ("-e", "-f", "--expression", "--regexp", "--file")
            continue
        operands.append(w)
    if head in _SCRIPT_FIRST and not script_given:
        operands = operands[1:]
    return [w for w in operands if w != "-"]


def _is_filter(head: str, rest: list[str]) -> bool:
    """Whether a piped command only reads its stdin (``tail -40``, ``grep x``, ``tee log``)."""
    if head not in _FILTERS:
        return False
    if head in ("tee", "tr"):  # tee's operands are outputs, tr's are character sets
        return True
    if head == "sed" and any(w.startswith("-i") for w in rest):
        return False
    return not _operands(head, rest)


def _filter(head: str, rest: list[str], cmd: Simple, facts: _Facts) -> None:
    facts.filtered = True
    facts.last_filter = head
    for target in cmd.out:
        if not target.startswith("/dev/") and target:
            facts.writes.append(normalize_path(target))
    if head == "tee":
        named = path_words([w for w in rest if not w.startswith("-")])
        if facts.producer in _TEXT_WRITERS:
            facts.writes.extend(named)
            facts.kinds.append("edit")
        else:
            facts.side_writes.extend(named)  # 'make | tee build.log': the output is still make's
        return
    if not facts.kinds:
        return
    if head in _PATTERN_FIRST and facts.kinds[-1] == "read":
        facts.kinds[-1] = "search"  # 'cat f | grep x', 'nl -ba f | grep -n def': the hits of a search
    elif head == "wc" and facts.kinds[-1] in ("read", "search"):
        facts.kinds[-1] = "command"  # counts, not the lines read


def _inline_code(rest: list[str], body: str) -> str | None:
    """The program text of ``python -c CODE`` / ``python - <<EOF`` / ``perl -e CODE``, else None."""
    for flag in ("-c", "-e", "-E", "-r"):
        if flag in rest:
            at = rest.index(flag)
            return rest[at + 1] if at + 1 < len(rest) else ""
    if body and (not rest or rest[0] == "-" or rest[0].startswith("-")):
        return body
    return None

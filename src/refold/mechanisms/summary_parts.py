"""The per-kind readers behind ``refold.mechanisms.summary``: file reads and searches (a run's verdict:
``summary_verdicts``).

Each takes an output already unwrapped from its agent's wrapper and returns a one-line phrase, or
None when the output is not of its kind. Pure, no model call.
"""

from __future__ import annotations

import json
import re

from ..shell_paths import normalize_path
from .summary_text import _files, _left_cut, _one_line, _plural

# ---- error lines ------------------------------------------------------------------------------

_FILE_HEADER = re.compile(r"^\[File: (.+?) \((\d+) lines? total\)\]$", re.MULTILINE)
_ABOVE = re.compile(r"^\((\d+) more lines? above\)$", re.MULTILINE)
_CAT_N_ON = re.compile(r"result of running `cat -n` on (?:a snippet of )?(\S+?):?\s*$", re.MULTILINE)
# one range only: 'a,bp;c,dp' prints two ranges, so its lines are not a..a+n-1
_SED_RANGE = re.compile(r"\bsed\s+-n\s+['\"]?(\d+)\s*,\s*(\d+)\s*p(?=['\"]?(?:\s|$))")
_HEAD_N = re.compile(r"\bhead\s+(?:-n\s*|-)(\d+)")
_VIEW_RANGE = re.compile(r'"view_range"\s*:\s*\[\s*(\d+)\s*,\s*(-?\d+)')
_DEF_NAME = re.compile(
    r"\b(class|def|function|func|fn|interface|struct|enum|trait|impl|module|object)\s+([\w$.]+)"
)
_SWE_READERS = ("open", "goto", "scroll_up", "scroll_down", "view", "read_file")


def _outline_names(
    code: str, path: str | None, offset: int | None, numbers: list[int] | None = None
) -> list[str]:
    """``kind name Lnn`` of the top-level definitions; ``offset=None``: file lines unknown, no numbers.

    ``numbers``: the file line of each line of ``code`` when the caller has already read them off
    a numbered span (``code`` is then without them), so the outline does not read them again."""
    try:
        from .. import outline as ol  # lazy: tree-sitter loads only when a read is summarized

        entries = ol.outline(code, path=path, max_entries=40, numbers=numbers)
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
    body: str,
    path: str | None,
    elided: int | None,
    limit: int,
    head_chars: int | None = None,
    numbered: Numbered | None = None,
    first_line: int | None = None,
    blank_tail: int = 0,
) -> str | None:
    """``first_line``: the file line the command's output starts at, when the shell analysis knows it
    (``cat f | head``, ``nl -ba f | sed -n '40,80p'``); ``blank_tail``: blank lines printed after
    ``body`` (``Unwrapped.blank_tail``), file lines of an unnumbered read like any other."""
    if elided is not None and head_chars is not None:
        shown = _elided_numbered(body, head_chars)
        if shown:
            (a, b, head_code, head_numbers), (c, d, tail_code, tail_numbers) = shown
            names = _outline_names(head_code, path, 0, head_numbers) + _outline_names(tail_code, path, 0, tail_numbers)
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
    if numbered is None or numbered.text is not body:
        numbered = Numbered(body)
    code, numbers = numbered.lines
    n = len(code.split("\n")) if code else 0
    start: int | None = None
    if not numbers and n:
        n += blank_tail  # a numbered read numbers its blank lines: its rows end at its last number
    if numbers:
        start, end = numbers[0], numbers[-1]
    else:
        above = _ABOVE.search(body[:2000])
        sed = _SED_RANGE.search(command) or _VIEW_RANGE.search(command)
        head_n = _HEAD_N.search(command)
        if above:
            start = int(above.group(1)) + 1
        elif first_line is not None and not header:
            start = first_line
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
    # numbered text: its own line numbers are the file's; plain text is offset by hand
    if n < 3:
        names = []
    elif numbers:
        names = _outline_names(numbered.lines[0], path, 0, numbers)
    else:
        names = _outline_names(code, path, (start - 1) if start else None)
    if len(where) + len(rng) + len(of) > limit - 30:  # a long path leaves its range and some outline room
        where = _left_cut(where, max(40, limit - 30 - len(rng) - len(of)))
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


_Part = tuple[int, int, str, list[int]]  # first and last file line, the code, each code line's number


def _elided_numbered(body: str, head_chars: int) -> tuple[_Part, _Part] | None:
    """File line ranges of a numbered read whose middle mini elided (the cut lines are partial)."""
    from ..outline import strip_line_numbers

    parts = []
    for part, drop in ((body[:head_chars].removesuffix("\n"), -1), (body[head_chars + 1 :], 0)):
        lines = part.split("\n")
        lines = lines[:-1] if drop < 0 else lines[1:]
        code, numbers = strip_line_numbers("\n".join(lines))
        if not numbers:
            return None
        parts.append((numbers[0], numbers[-1], code, numbers))
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


def _swe_search(body: str) -> str | None:
    many = _SWE_MANY.search(body)
    if many:
        return f'"{_one_line(many.group(2), 40)}": more than {many.group(1)} files match in {many.group(3)} (not listed)'
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
            return f'"{_one_line(term, 40)}": {_plural(n, "hit")} in {_plural(len(files), "file")}{_files(files)}'
        if what in ("snippets", "methods", "classes", "functions"):
            return f'"{_one_line(term, 40)}": {n} {what[:-1] if n == 1 and what != "classes" else what if n != 1 else "class"} in {where}'
        if body[found.end() : found.end() + 200].lstrip().startswith("Line "):
            return f'"{_one_line(term, 40)}": {_plural(n, "hit")} in {normalize_path(where)}'
        paths = [ln.strip() for ln in body[found.end() :].split("\n") if ln.strip().startswith(("/", "."))]
        return f'"{_one_line(term, 40)}": {_plural(n, "file")} found{_files(paths)}'
    none = _SWE_NONE.search(body)
    if none:
        return (
            f'"{_one_line(none.group(1), 40)}": no hits in {none.group(2)}'
            if none.group(1) is not None
            else _one_line(none.group(0), 100)
        )
    return None


_FOUND_FILES = re.compile(r"^Found (\d+) files?\b")
_NO_FILES = re.compile(r"^No (?:files|matches) found\b")
_GLOB_CUT = re.compile(r"^\(Results are truncated\b")
_COUNT_ROW = re.compile(r"^(?:(.+):)?(\d+)$")


def _named_search(tool: str, arguments: str, lines: list[str]) -> str | None:
    """Claude Code's ``Glob`` (paths) and ``Grep`` in its default ``files_with_matches`` mode
    (``Found N files`` and the paths), which the shell readers would count as hits; None otherwise
    (``Grep`` with ``content`` prints ``path:line:text``, read as grep's)."""
    name = tool.lower()
    if name not in ("glob", "grep"):
        return None
    try:
        args = json.loads(arguments)
    except ValueError:
        return None
    if not isinstance(args, dict):
        return None
    body = [ln.strip() for ln in lines if ln.strip()]
    mode = args.get("output_mode", "files_with_matches") if name == "grep" else None
    if mode in ("content", "count") and body and _NO_FILES.match(body[0]):
        return "0 hits"
    if mode == "count":  # 'path:N' per file ('N' alone for one file), then Claude Code's own total line
        rows = [m.groups() for ln in body if (m := _COUNT_ROW.match(ln))]
        where = str(args.get("path") or "")
        counted = [f or where for f, _ in rows]
        total = sum(int(n) for _, n in rows)
        return f"{_plural(total, 'matching line')} in {_plural(len(counted), 'file')}{_files(counted)}"
    if mode != "files_with_matches" and name == "grep":
        return None
    if body and _NO_FILES.match(body[0]):
        return f"0 {'paths' if name == 'glob' else 'files'} found"
    cut = bool(body) and _GLOB_CUT.match(body[-1]) is not None  # Glob's notice: no path, and more exist
    paths = [ln for ln in (body[:-1] if cut else body) if not _FOUND_FILES.match(ln)]
    if name == "glob":
        files = _files(paths)
        if cut:
            return f"more than {_plural(len(paths), 'path')} found{files[:-1] + ', list cut)' if files else ''}"
        return f"{_plural(len(paths), 'path')} found{files}"
    header = _FOUND_FILES.match(body[0]) if body else None  # counts every file; the list may be limited
    n = max(len(paths), int(header.group(1)) if header else 0)
    return f"{_plural(n, 'file')} match{_files(paths, unlisted=n - len(paths))}"


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
    other = hits - len(files)
    if files and other and not context and re.search(r"&&|;", command):
        # 'sed -n 1,80p f && rg -n x src': the unprefixed lines are another command's, not hits
        hits, chained_note = len(files), f"; {_plural(other, 'other line')}"
    else:
        chained_note = ""
    if not files and hits and reads and reads != (".",):
        files = list(reads[:1]) if len(reads) == 1 else []
    if context and not any(_GREP_HIT.match(ln) for ln in lines):
        return f"{_plural(hits, 'line')} with context" + (
            f" in {normalize_path(reads[0])}" if len(reads) == 1 and reads != (".",) else ""
        )
    nfiles = len(set(files))
    where = f" in {_plural(nfiles, 'file')}{_files(files)}" if nfiles else ""
    extra = (f" (+{binary} binary)" if binary else "") + chained_note
    return f"{_plural(hits, 'hit')}{where}{extra}"


class Numbered:
    """``strip_line_numbers(text)``, read off once when first asked (the summary and the read's
    outline both need it)."""

    __slots__ = ("_lines", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self._lines: tuple[str, list[int] | None] | None = None

    @property
    def lines(self) -> tuple[str, list[int] | None]:
        if self._lines is None:
            from ..outline import strip_line_numbers

            self._lines = strip_line_numbers(self.text)
        return self._lines


def _numbered(numbered: Numbered) -> bool:
    body = numbered.text
    return len(body) < 200_000 and body.count("\n") >= 2 and numbered.lines[1] is not None

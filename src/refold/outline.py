"""Signature outlines for stubs of long code spans.

``outline`` lists top-level classes/functions and the methods one level inside classes, each
with its header line and its line number in the ORIGINAL file when the tool output carried
line numbers (``cat -n``/``nl -ba``, SWE-agent windows; ``refold.outline_lines``). Parsing uses
tree-sitter grammars (``refold.outline_grammars``: error tolerant, so spans starting mid-file
still parse); a regex pass fills gaps and is the whole fallback when no grammar is installed.
Never raises.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from .outline_grammars import class_body, definitions, has_grammar, language_for, parse, short, signature
from .outline_lines import SCAN, file_lines, is_frame, rows_matching, strip_line_numbers

__all__ = [
    "OutlineEntry",
    "file_lines",
    "format_outline",
    "has_grammar",
    "is_frame",
    "language_for",
    "outline",
    "strip_line_numbers",
]


@dataclass(frozen=True)
class OutlineEntry:
    line: int
    kind: str
    signature: str
    depth: int = 0  # 0 = top level, 1 = inside a class


# ---- regex fallback -------------------------------------------------------------------------

_RX_CLASS = re.compile(
    r"^(\s*)(?:(?:export|default|public|private|protected|internal|static|final|abstract|sealed|data|open|pub(?:\([\w:]+\))?)\s+)*"
    r"(class|struct|enum|trait|impl|interface|module|object|protocol|record)\b[\s<]*[\w:<>]*"
)
_RX_FUNC = re.compile(
    r"^(\s*)(?:(?:export|default|public|private|protected|internal|static|final|abstract|override|async|unsafe|const|extern|inline|virtual|local|pub(?:\([\w:]+\))?)\s+)*"
    r"(?:def|fn|func|function\*?|fun|sub)\s+[\w$.:]+\s*[(<\[]"
)
_RX_METHOD = re.compile(
    r"^(\s+)(?:(?:static|async|get|set|public|private|protected)\s+)*#?[\w$]+\s*\([^()]*\)\s*(?::\s*[\w<>\[\]|, .]+)?\s*\{"
)
_NOT_METHOD = {
    "if",
    "for",
    "foreach",
    "while",
    "switch",
    "catch",
    "with",
    "return",
    "function",
    "synchronized",
}
_NOT_METHOD |= {"using", "lock", "fixed", "when", "else"}


# What a line matching any of the three contains: a keyword after whitespace or at the line's
# start, or a brace (a superset: the regexes then run only on the lines it finds).
_RX_ANY = re.compile(
    r"(?<!\S)(?:(?:class|struct|enum|trait|impl|interface|module|object|protocol|record)\b"
    r"|(?:def|fn|func|function\*?|fun|sub)\s)|\{"
)


def _regex_hit(line: str) -> tuple[int, str] | None:
    m = _RX_CLASS.match(line)
    if m:
        return len(m.group(1).expandtabs()), "class" if m.group(2) == "object" else m.group(2)
    m = _RX_FUNC.match(line)
    if m:
        return len(m.group(1).expandtabs()), "function"
    m = _RX_METHOD.match(line)
    if m and line.split("(", 1)[0].split()[-1].lstrip("#") not in _NOT_METHOD:
        return len(m.group(1).expandtabs()), "method"
    return None


# ---- public API -----------------------------------------------------------------------------


def _indent(line: str) -> int:
    return len(line.expandtabs()) - len(line.expandtabs().lstrip())


def _collect(code: str, language: str | None, lines: list[str]) -> list[tuple[int, int, str, int, str]]:
    """(row, indent, kind, depth, signature); tree-sitter first, regex for the gaps (depth -1)."""
    found: list[tuple[int, int, str, int, str]] = []
    # row -> indent of the top-level definition covering it
    covered: dict[int, int] = {}
    tree = parse(language, code.encode("utf-8", "surrogatepass")) if language else None
    if tree is not None:
        for node, kind, is_class in definitions(tree.root_node, False):
            row, sig = signature(node, lines)
            col = _indent(lines[row])
            found.append((row, col, kind, 0, sig))
            for r in range(node.start_point[0], node.end_point[0] + 1):
                covered[r] = col
            body = class_body(node) if is_class else None
            if body is not None:
                for sub, sub_kind, _ in definitions(body, True):
                    sub_row, sub_sig = signature(sub, lines)
                    found.append((sub_row, _indent(lines[sub_row]), sub_kind, 1, sub_sig))
    for row in rows_matching(code, _RX_ANY):
        line = lines[row]
        hit = _regex_hit(line)
        # Inside a found definition only a hit at <= its indent counts (a sibling that error
        # recovery swallowed, e.g. after an unbalanced bracket); deeper hits are nested code.
        if hit is not None and (row not in covered or hit[0] <= covered[row]):
            sig = line
            if not line.rstrip().endswith(":") and "{" in line:
                cut = line.find("{", max(line.rfind(")"), 0))
                sig = line[:cut] if cut > 0 else line
            found.append((row, hit[0], hit[1], -1, short(sig)))
    return found


def outline(
    text: str,
    path: str | None = None,
    language: str | None = None,
    max_entries: int = 40,
    numbers: Sequence[int] | None = None,
) -> list[OutlineEntry]:
    """Top-level definitions plus methods one level inside classes, with original line numbers.

    ``numbers``, one per line of ``text``, gives the line numbers to report when the caller knows
    them (``text`` is then code without printed numbers); otherwise they are read from ``text``.
    Only the whole lines in the first ``SCAN`` characters of ``text`` are read.
    """
    given: list[int] | None
    if len(text) > SCAN:
        full = numbers is not None and len(numbers) == text.count("\n") + 1
        text = text[: max(0, text.rfind("\n", 0, SCAN + 1))]
        numbers = numbers[: text.count("\n") + 1] if full and numbers is not None else None
    if numbers is not None and len(numbers) == text.count("\n") + 1:
        code, given = text, list(numbers)
    else:
        code, given = strip_line_numbers(text)
    lines = code.split("\n")
    try:
        found = _collect(code, language or language_for(path, code), lines)
    except Exception:  # defensive: a grammar/walk failure degrades to regex only
        found = _collect(code, None, lines)
    # Root-level entries indented past the shallowest one (span started inside a class) are
    # members; regex hits nested deeper than the first member level are dropped.
    base = min((col for _, col, _, depth, _ in found if depth <= 0), default=0)
    member_col = min((col for _, col, _, depth, _ in found if depth < 0 and col > base), default=0)
    entries: list[OutlineEntry] = []
    seen: set[int] = set()
    top_kind = "class"  # a span may start inside a class body
    for row, col, kind, depth, sig in sorted(found, key=lambda f: (f[0], f[3] < 0)):
        regex = depth < 0
        if row in seen or (regex and col > member_col > 0):
            continue
        if depth <= 0:
            depth = 0 if col <= base else 1
        if depth == 0:
            top_kind = kind
        elif regex and top_kind in ("function", "method"):
            continue  # nested in a function, not a member
        seen.add(row)
        if depth == 1 and kind == "function":
            kind = "method"
        line_no = given[row] if given is not None and row < len(given) else row + 1
        entries.append(OutlineEntry(line_no, kind, sig, depth))
    if len(entries) > max_entries:  # keep top-level entries first, then members in order
        budget = max(0, max_entries - sum(1 for e in entries if e.depth == 0))
        kept: list[OutlineEntry] = []
        for e in entries:
            if e.depth == 0 or budget > 0:
                budget -= e.depth != 0
                kept.append(e)
        entries = kept[:max_entries]
    return entries


def format_outline(entries: Sequence[OutlineEntry]) -> str:
    """One line per entry: ``  L40 class Foo(Base):`` / ``  L52   def bar(self, x):``."""
    return "\n".join(f"  L{e.line} {'  ' * e.depth}{e.signature}" for e in entries)

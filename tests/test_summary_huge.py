"""A huge output is summarized from its head (``SCAN`` characters, so summaries stay linear), but a
read's note must not say the read ended where that head did."""

from __future__ import annotations

from refold.mechanisms.summary import summarize
from refold.outline_lines import SCAN


def _wrapped(body: str) -> str:
    return f"<returncode>0</returncode>\n<output>\n{body}\n</output>"


def test_a_huge_numbered_read_names_its_last_line() -> None:
    body = "\n".join(f"{i:6d}\tdef f_{i}(): pass" for i in range(1, 200_001))
    assert len(body) > SCAN
    s = summarize("nl -ba big.py", _wrapped(body))
    assert s.kind == "read" and s.text.startswith("big.py lines 1-200000: def f_1 L1")  # not 'lines 1-9141'


def test_a_huge_plain_read_counts_every_line_it_printed() -> None:
    body = "\n".join(f"x_{i} = {i}" for i in range(100, 200_001))
    assert summarize("sed -n '100,300000p' big.py", _wrapped(body)).text == "big.py lines 100-200000"
    assert summarize("cat big.py", body).text == "big.py lines 1-199901"  # no wrapper: a shell tool's output


def test_a_read_under_the_limit_is_unchanged() -> None:
    body = "\n".join(f"{i:6d}\tx = {i}" for i in range(40, 61))
    assert summarize("nl -ba f.py | sed -n '40,60p'", _wrapped(body)).text == "f.py lines 40-60"

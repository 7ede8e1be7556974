"""Outline time of a Python text holding one long run of comment lines (tree-sitter-python reads
such a run in time quadratic in its length; refold drops comment text before parsing).

    python benchmarks/bench_outline_comments.py [--lines 1000,2000,4000] [--out FILE]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import refold
from refold.outline import outline


def text(lines: int) -> str:
    head = ["class Early:", "    def first(self, value):", "        return value", ""]
    return "\n".join([*head, *(["# " + "x" * 98] * lines), "", "def late():", "    pass"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", default="1000,2000,4000")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args(argv)
    rows = [f"outline() of a Python text with a run of N 100-character comment lines; CPU s (time.thread_time); refold from {Path(refold.__file__).parent}"]
    for n in (int(x) for x in a.lines.split(",")):
        t = text(n)
        start = time.thread_time()
        got = outline(t, path="m.py")
        rows.append(f"N={n:6d}  {len(t):9,d} chars  {time.thread_time() - start:7.3f} s  {len(got)} entries")
    report = "\n".join(rows)
    print(report)
    if a.out:
        a.out.write_text(report + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""CPU of the streamed compound hold (``proxy.compound.CompoundHold``) on commands that never
become whole: ``\\``-continued lines, nested parentheses, a heredoc body; each followed by
``; restore 3`` and fed as its JSON arguments grow by 7 characters (a streamed call's pieces).

    PYTHONPATH=src python benchmarks/bench_compound_cpu.py [--src DIR] [--label NAME]
"""

from __future__ import annotations

import argparse
import json
import sys
import time


def cases() -> dict[str, str]:
    return {
        "continued 35 KB (3,500 '\\' lines)": "echo a \\\n" * 3500 + "; restore 3",
        "3,000 nested parentheses": "(" * 3000 + "ls" + ")" * 3000 + "; restore 3",
        "heredoc body 60 KB": "cat <<EOF\n" + "x = 1\n" * 10000 + "EOF\nls; restore 3",
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", help="import refold from this src directory (e.g. an older checkout)")
    ap.add_argument("--label", default="this tree")
    a = ap.parse_args()
    if a.src:
        sys.path.insert(0, a.src)
    from refold.proxy.compound import CompoundHold

    for name, command in cases().items():
        args = json.dumps({"command": command})
        hold = CompoundHold(len('{"command": "'))
        t = time.process_time()
        for pos in range(7, len(args) + 7, 7):
            hold.allowed(args[:pos])
        cpu = time.process_time() - t
        held = "held to the call's end past the budget" if getattr(hold, "frozen", False) else "streamed"
        print(f"{a.label}\t{name}\t{len(command)} chars\t{cpu:.3f} s CPU\t{held}")


if __name__ == "__main__":
    main()

"""Parse time of replies and commands: linear, and <= 50 ms for a 1 MB reply.

Times everything refold parses from one reply or command (the PROGRESS/STALE head, the command
block of a text reply, context commands and their ``restore`` arguments, a tool call's
arguments, the shell analysis of a command) on hostile and ordinary 1 MB inputs, and at 1/16,
1/4 and 1 MB so the growth shows (a ratio near 4 per x4 is linear; the regexes this replaced
were quadratic: 5 s for a 4,000-digit STALE line). With trajectory paths, also the slowest real
reply and command among them.

    python benchmarks/bench_parse.py [PATH ...] [--repeat 5]
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path

from refold.context.recognize import from_shell, from_tool_call
from refold.protocol import parse_command, parse_head, parse_restore_args
from refold.reply_command import bash_block
from refold.shell import analyze

MB = 1_000_000
TARGET_MS = 50.0

SHAPES: dict[str, Callable[[int], str]] = {
    "stale digits": lambda n: "PROGRESS: x\nSTALE: " + "1" * n,
    "stale digits+dash": lambda n: "PROGRESS: x\nSTALE: " + "1" * n + "-",
    "stale list": lambda n: "PROGRESS: x\nSTALE: " + "1, " * (n // 3),
    "stale asides": lambda n: "PROGRESS: x\nSTALE: " + "(" * n,
    "head spaces": lambda n: "PROGRESS" + " " * n + "x",
    "think unclosed": lambda n: "<think>" + "x" * n,
    "fences unclosed": lambda n: "```bash\nx" * (n // 9),
    "xml unclosed": lambda n: "<mswea_bash_command>" * (n // 20),
    "fence blank lines": lambda n: "```bash" + " \n" * (n // 2),
    "prose + block": lambda n: (
        "PROGRESS: read the parser\nSTALE: 3-5, 7\n"
        + "The loop at lines 12-40 re-reads the buffer, so 2.1 of the plan fails. " * (n // 72)
        + "\n```bash\nsed -n '1,80p' src/parser.py\n```"
    ),
    "restore words": lambda n: "restore " + "1 " * (n // 2),
    "heredoc file": lambda n: "cat <<'EOF' > big.py\n" + "x = a > b  # c << d\n" * (n // 20) + "EOF",
    "python -c": lambda n: 'python -c "' + "print(a > b); " * (n // 14) + '"',
    "edit body": lambda n: "edit 1:2\n" + "    if a > b: return c >> 2\n" * (n // 29) + "end_of_edit",
}


def parse_reply(text: str) -> None:
    """What refold reads from a reply (and from its command, when it is a context command)."""
    parse_head(text)
    bash_block(text)
    cmd = parse_command(text)
    if cmd is not None and cmd.name == "restore":
        parse_restore_args(cmd.argument, 10)
    from_tool_call("fold_span", text)
    from_shell(text)


def analyze_only(text: str) -> None:
    analyze(text)  # the shell analysis: commands can be megabytes too (a heredoc writing a file)


def best_ms(fn: Callable[[str], None], text: str, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn(text)
        best = min(best, time.perf_counter() - t0)
    return best * 1000


def real_texts(paths: list[str]) -> list[tuple[str, Callable[[str], None], str]]:
    from refold.loaders import load
    from refold.types import content_text

    out: list[tuple[str, Callable[[str], None], str]] = []
    for p in map(Path, paths):
        for f in sorted(q for q in p.rglob("*") if ".traj" in q.name) if p.is_dir() else [p]:
            try:
                history = load(f)
            except Exception as e:  # a benchmark skips what it cannot read, and says so
                print(f"skipped {f.name}: {e}", file=sys.stderr)
                continue
            for s in history.steps:
                out.append((f"{f.name} step {s.index} reply", parse_reply, content_text(s.reply.get("content"))))
                out.extend((f"{f.name} step {s.index} command", analyze_only, a.command) for a in s.actions)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("paths", nargs="*", help="trajectory files or folders (optional)")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    print(f"refold parse benchmark  python {platform.python_version()}  {platform.machine()}")
    print(f"best of {args.repeat}; ms for 62.5 kB / 250 kB / 1 MB; x4 growth per step (4 = linear)")
    for title, fn in (("reply (head, command block, context command)", parse_reply), ("shell analysis", analyze_only)):
        print(title)
        worst = 0.0
        for name, make in SHAPES.items():
            times = [best_ms(fn, make(n), args.repeat) for n in (MB // 16, MB // 4, MB)]
            worst = max(worst, times[-1])
            growth = " ".join(f"x{b / a:.1f}" if a > 0.01 else "  -" for a, b in zip(times, times[1:], strict=False))
            print(f"  {name:20s} {times[0]:8.2f} {times[1]:8.2f} {times[2]:8.2f} ms   growth {growth}")
        verdict = "met" if worst <= TARGET_MS else "MISSED"
        print(f"  slowest 1 MB input: {worst:.2f} ms  (target <= {TARGET_MS:.0f} ms: {verdict})")
    if args.paths:
        texts = real_texts(args.paths)
        timed = sorted(((best_ms(fn, t, args.repeat), len(t), label) for label, fn, t in texts), reverse=True)
        total = sum(ms for ms, _, _ in timed)
        print(f"real: {len(texts)} replies and commands, total {total:.1f} ms, slowest:")
        for ms, size, label in timed[:3]:
            print(f"  {ms:8.3f} ms  {size:>8} chars  {label}")


if __name__ == "__main__":
    main()

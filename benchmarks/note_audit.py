"""Count, over Claude Code and Codex logs, the one-line summaries of tool outputs (what a mask note
says in place of a hidden output) that would mislead the model reading them: one class a line, each
found reading real sessions' prompts and fixed at its root (see the commits naming them).

    PYTHONPATH=src python benchmarks/note_audit.py LOG_OR_DIR [...]

Every tool output of every session is summarized as the note would (``summarize`` with the action
``action_of`` pairs it with), not only the outputs a replay happens to hide. Prints derived counts
only (no text of the logs), so the figures of private logs can be kept.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from refold.loaders import load_all
from refold.mechanisms.summary import Summary, summarize
from refold.messages import action_of
from refold.types import Action, content_text

Check = Callable[[Action, str, Summary], bool]


def _tool(*names: str) -> Callable[[Action], bool]:
    return lambda a: a.tool in names


_read, _edit, _grep = _tool("Read"), _tool("Edit", "Write", "MultiEdit"), _tool("Grep")
_RANGE = re.compile(r" lines \d+-\d+")

CHECKS: dict[str, Check] = {
    "Read note without its line range (numbered output)": lambda a, t, s: _read(a) and s.kind == "read"
    and "\u2192" in t[:200] and _RANGE.search(s.text) is None,
    "read of several files credited to the first one": lambda a, t, s: s.kind == "read"
    and a.effects is not None and len(set(a.effects.reads)) > 1 and a.effects.kind == "read",
    "edit note quoting the tool's boilerplate ('printed \"The file')": lambda a, t, s: 'printed "The file' in s.text,
    "Write creating a file said 'edited'": lambda a, t, s: _edit(a) and t.startswith("File created") and "created" not in s.text,
    "failed or rejected edit not said NOT applied": lambda a, t, s: _edit(a)
    and t.lstrip().startswith(("<tool_use_error>", "The user doesn't want")) and "NOT applied" not in s.text,
    "<tool_use_error> quoted as output": lambda a, t, s: "<tool_use_error>" in s.text,
    "plan tool note without the plan's state": lambda a, t, s: a.tool in ("TodoWrite", "update_plan") and "plan updated" not in s.text,
    "Grep count mode / no match counted as hits": lambda a, t, s: _grep(a)
    and ('"count"' in a.command or t.startswith("No matches found")) and " hit" in s.text and not s.text.startswith("0 hits"),
    "search pipeline's records counted as paths/hits": lambda a, t, s: s.kind == "search"
    and re.search(r"\b(?:xargs|jq|wc|uniq -c)\b|-exec cat\b", a.command) is not None and (" found" in s.text or " hit" in s.text),
    "Codex process still running said '0 hits'/'no output'": lambda a, t, s: "Process running with session ID" in t[:300]
    and s.text in ("no output", "0 hits", "0 paths found"),
    "Codex 'Total output lines' notice quoted": lambda a, t, s: '"Total output lines' in s.text,
    "<persisted-output> tag quoted": lambda a, t, s: '"<persisted-output>"' in s.text,
    "read note naming only the file ('file contents.'/'PATH (N lines)')": lambda a, t, s: s.kind == "read"
    and re.fullmatch(r"\S+ \([\d,]+ lines?\)", s.text) is not None,
}


def files(paths: list[str]) -> list[Path]:
    out: list[Path] = []
    for p in map(Path, paths):
        out += sorted(p.glob("*.jsonl")) if p.is_dir() else [p]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="+")
    args = ap.parse_args()
    hits: Counter[str] = Counter()
    outputs = sessions = 0
    for f in files(args.paths):
        try:
            histories = load_all(f)
        except Exception as e:  # a file of another format: named, not fatal
            print(f"skipped {f.name}: {type(e).__name__}", file=sys.stderr)
            continue
        for h in histories:
            sessions += 1
            for step in h.steps:
                for j, obs in enumerate(step.observations):
                    a = action_of(step, j)
                    if a is None:
                        continue
                    outputs += 1
                    text = content_text(obs.get("content"))  # type: ignore[arg-type]
                    s = summarize(a.command, text, a.tool)
                    for name, check in CHECKS.items():
                        hits[name] += bool(check(a, text, s))
    print(f"{sessions} sessions, {outputs} tool outputs summarized")
    for name in CHECKS:
        print(f"  {name}: {hits[name]}")


if __name__ == "__main__":
    sys.exit(main())

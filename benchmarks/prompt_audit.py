"""Count, over recorded runs, the prompt defects the prompts review found (one line each, see the
commits that fixed them): what the model would read that misleads, contradicts itself or is paid
for nothing.

    PYTHONPATH=src python benchmarks/prompt_audit.py ../shared/data/trajectories/dev \
        ../shared/data/trajectories/dev-sweagent [more dirs or files]

Replays refold's default configuration (``iter_prompts(..., "default")``, reminders off as in
every replay; with ``--stale hindsight`` the simulated STALE marks) and renders each session with
``Config()`` itself for the reminder counts (reminders on, as a live run). Counts are distinct
messages (a note is counted once however many prompts repeat it) and the prompts that hold one.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from pathlib import Path

from refold.config import Config
from refold.json_file import read_json
from refold.lab.replay.runner import iter_prompts
from refold.loaders import AGENT_SEP, agent_names, load
from refold.render import Renderer
from refold.types import content_text

CM = "[context-manager]"
CHECKS = {
    "bare 'Mentions:' line in a condensed reply": lambda ln: ln.startswith("Mentions: "),
    "'Output i of n' notes (in these runs all count format errors)": lambda ln: re.search(r"Output \d+ of \d+ of", ln) is not None,
    "condensed reply keeping only a heading": lambda ln: False,  # whole-message check below
    "fold line missing its opening backtick": lambda ln: re.match(r"\[step \d+\] [^`\s]+`", ln) is not None,
    "'any of them again' after a fold list": lambda ln: ln == "`restore <step>` shows any of them again.",
    "listing note naming '.' and '..'": lambda ln: re.search(r"entries: \., \.\.,", ln) is not None,
    "edit note naming only the first printed line": lambda ln: re.search(r'; printed "[^"]*" \(\+\d+ lines\)', ln) is not None,
    "'at most every k steps' under the cost rule": lambda ln: "(this changes at most every" in ln,
}
_HEADING = re.compile(r"(?m)^[#*\s]*[A-Za-z]+[:*\s]*\n(?:Mentions: .*\n)?\[context-manager\] \d+ more lines? of reasoning hidden")


def sessions(paths: list[str]) -> list[str]:
    out: list[str] = []
    for p in paths:
        files = sorted(Path(p).iterdir()) if Path(p).is_dir() else [Path(p)]
        for f in files:
            if f.suffix not in (".json", ".traj"):
                continue
            names = agent_names(read_json(f))
            out += [f"{f}{AGENT_SEP}{a}" for a in names] if names else [str(f)]
    return out


def text(m: dict[str, object]) -> str:
    return content_text(m.get("content"))  # type: ignore[arg-type]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--stale", default="recorded")
    args = ap.parse_args()
    notes: Counter[str] = Counter()
    prompts: Counter[str] = Counter()
    live_reminders = live_old = live_chars = n_prompts = n_live = 0
    runs = sessions(args.paths)
    for run in runs:
        h = load(run)
        seen: set[tuple[str, str]] = set()
        for p in iter_prompts(h, "default", args.stale):
            n_prompts += 1
            hit: set[str] = set()
            for m in p.messages:
                body = text(m)
                found = {k for k, f in CHECKS.items() if any(f(ln) for ln in body.split("\n"))}
                if m.get("role") == "assistant" and _HEADING.search(body):
                    found.add("condensed reply keeping only a heading")
                for k in found:
                    hit.add(k)
                    if (k, body) not in seen:
                        seen.add((k, body))
                        notes[k] += 1
            for k in hit:
                prompts[k] += 1
        r = Renderer(Config())
        for t in range(len(h) + 1):
            msgs = r.render(h, t).messages
            n_live += 1
            bodies = [text(m) for m in msgs]
            live_chars += sum(len(b) for b in bodies)
            count = [b.count(f"{CM} Reminder:") for b in bodies]
            live_reminders += sum(count)
            live_old += sum(count[:-2])  # not on the latest output (its reply and output are last)
    print(f"{len(runs)} sessions, {n_prompts} prompts (default, --stale {args.stale})")
    for k in CHECKS:
        print(f"  {k}: {notes[k]} messages in {prompts[k]} prompts")
    print(f"live Config() renders: {n_live} prompts, {live_chars:,} chars, {live_reminders:,} reminder lines, "
          f"{live_old:,} of them before the latest output")


if __name__ == "__main__":
    sys.exit(main())

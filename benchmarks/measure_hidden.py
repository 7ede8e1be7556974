"""How trustworthy deduplicated outputs are, on recorded runs (issue 11, item 5).

Runs every step of every trajectory through ``DedupIndex`` as the renderer does (in step order,
``note_writes`` then ``process``, default thresholds) and counts:

* SWE-agent ``edit``/``insert``/``append`` uses recognized as writes (of a named file, or anything);
* outline entries whose line number is wrong: the number an entry shows is checked against the
  output it outlines (the printed number of its line, ``cat -n``/``nl``/SWE-agent ``N:``, or the
  file line implied by ``cat f``/``sed -n 'a,bp' f``; entries labeled "numbered by line of this
  output" against their output line). Entries whose truth cannot be established are counted apart;
* trimmed mini outputs (``<returncode>`` wrapper) whose trimmed text lost the returncode line;
* trimmed outputs with 4 or more markers, and the most markers in one output;
* whole-output stubs citing an output whose verdict (returncode, test summary) differs.

The script uses only API present before and after the fixes, so the "before" figures come from
running it against an older checkout: ``PYTHONPATH=<old>/src python benchmarks/measure_hidden.py ...``.

    python benchmarks/measure_hidden.py FOLDER [FOLDER ...]
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from refold import shell
from refold.loaders import load
from refold.mechanisms.dedup import DedupIndex
from refold.protocol import CM
from refold.types import content_text

_ENTRY = re.compile(r"^  L(\d+) (.*)$")
_PREFIX = re.compile(r"^\s*(\d+)(?:\t|:|\u2192)(.*)$")
_MARKER = re.compile(re.escape(CM) + r" \d+ lines omitted here")
_RC = re.compile(r"^\s*<returncode>\s*(-?\d+)\s*</returncode>\s*$", re.MULTILINE)
_SUMMARY = re.compile(r"^=+ .*\b(passed|failed|error)\b.* =+$", re.MULTILINE)
_CAT = re.compile(r"^\s*(?:cat|nl -ba|cat -n)\s+(\S+)\s*$")
_SED = re.compile(r"^\s*sed -n ['\"]?(\d+),(\d+|\$)p['\"]?\s+(\S+)\s*$")
_PIPE_SED = re.compile(r"^\s*(?:cat|nl -ba|cat -n)\s+\S+\s*\|\s*sed -n ['\"]?(\d+),(\d+|\$)p['\"]?\s*$")
_EDIT_HEADS = {"edit", "insert", "append"}


def verdict(body: str) -> tuple[str, ...]:
    return tuple(_RC.findall(body)) + tuple(m.group(0).strip("= ") for m in _SUMMARY.finditer(body))


def first_file_line(command: str) -> int | None:
    """The file line of an unnumbered output's first content line, from a plain read command."""
    if _CAT.match(command):
        return 1
    m = _SED.match(command) or _PIPE_SED.match(command)
    return int(m.group(1)) if m else None


def truths(body: str, command: str, sig: str) -> tuple[set[int], set[int]]:
    """(file lines, output lines) at which ``sig`` can be found in ``body``."""
    files: set[int] = set()
    outs: set[int] = set()
    lines = body.split("\n")
    start = first_file_line(command)
    content0 = next((i for i, ln in enumerate(lines) if not re.match(r"^\s*</?(?:returncode|output)", ln)), 0)
    end = len(lines)
    if lines[content0 : content0 + 1] == ["<warning>"]:  # mini's too-long output: <output_head> ...
        content0 = next((i + 1 for i, ln in enumerate(lines) if "</warning>" in ln), content0)
        end = next((i for i, ln in enumerate(lines) if ln.strip() == "</output_head>"), end)
    sig = sig.strip().rstrip("\u2026")
    for i, ln in enumerate(lines):
        m = _PREFIX.match(ln)
        text = m.group(2) if m else ln
        if not sig or not text.strip().startswith(sig[:60]):
            continue
        outs.add(i + 1)
        if m:
            files.add(int(m.group(1)))
        elif start is not None and content0 <= i < end:
            files.add(start + i - content0)
    return files, outs


def measure(path: Path, c: Counter[str]) -> None:
    history = load(path)
    index = DedupIndex()
    open_file = getattr(shell, "OpenFile", None)
    state = open_file() if open_file else None
    bodies: dict[int, list[str]] = {}
    for step in history.steps:
        infos = [shell.analyze(a.command, a.tool) for a in step.actions]
        for a, info in zip(step.actions, infos, strict=True):
            index.note_writes(step.index, info)
            resolved = state.advance(info) if state is not None else info
            words = a.command.split(None, 1)
            if (a.tool == "bash" and words and words[0] in _EDIT_HEADS) or a.tool in _EDIT_HEADS:
                c["edit uses"] += 1
                c["edit uses recognized as writes"] += bool(resolved.writes or resolved.writes_anything)
        command = step.actions[0].command if step.actions else ""
        for j, obs in enumerate(step.observations):
            body = content_text(obs.get("content"))
            bodies.setdefault(step.index, []).append(body)
            info: Any = infos[j] if j < len(infos) else infos[0] if infos else None
            result = index.process(step.index, body, info)
            if result.kind == "received":
                continue
            c[f"{result.kind} outputs"] += 1
            c["lines omitted (stubs and trims)"] += result.omitted_lines
            text = result.text
            if result.kind == "trimmed":
                markers = len(_MARKER.findall(text))
                c["trimmed: >=4 markers"] += markers >= 4
                c["trimmed: max markers"] = max(c["trimmed: max markers"], markers)
                if _RC.search(body):
                    c["trimmed mini outputs"] += 1
                    c["trimmed mini outputs that lost their returncode"] += not _RC.search(text)
            else:
                mine = verdict(body)
                mine_lines = {ln for ln in body.split("\n") if len(ln.strip()) > 20}
                # the cited steps' outputs this one repeats (a step may have other outputs too)
                cited = [b for s in result.sources for b in bodies.get(s, []) if mine_lines & set(b.split("\n"))]
                c["stubs citing an output with another verdict"] += any(verdict(b) != mine for b in cited)
            by_output = False
            for line in text.split("\n"):
                if line.startswith("Outline of the omitted lines"):
                    by_output = "line of this output" in line
                    continue
                m = _ENTRY.match(line)
                if not m:
                    continue
                shown, sig = int(m.group(1)), m.group(2)
                c["outline entries"] += 1
                if re.match(r"^\s*\d+[:\t]", sig):
                    c["outline entries wrong"] += 1  # 'L8 83:class RelatedField'
                    continue
                files, outs = truths(body, command, sig)
                known = outs if by_output else files
                if not known:
                    c["outline entries unverifiable"] += 1
                elif shown not in known:
                    c["outline entries wrong"] += 1


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("folders", nargs="+")
    args = ap.parse_args()
    for folder in args.folders:
        c: Counter[str] = Counter()
        files = sorted(q for q in Path(folder).rglob("*") if ".traj" in q.name)
        for f in files:
            try:
                measure(f, c)
            except Exception as e:  # a measurement skips what it cannot read, and says so
                print(f"skipped {f.name}: {e}", file=sys.stderr)
        print(f"{Path(folder).name}: {len(files)} runs")
        for key in sorted(c):
            print(f"  {key:52s} {c[key]:6d}")
        checked = c["outline entries"] - c["outline entries unverifiable"]
        if checked:
            print(f"  {'outline entries wrong, % of verifiable':52s} {100 * c['outline entries wrong'] / checked:6.1f}")


if __name__ == "__main__":
    main()

"""How well mask-note summaries describe real tool outputs, per corpus.

For every tool output of every trajectory in each folder given (one folder = one corpus), this
summarizes the output (``refold.mechanisms.summary.summarize``) and reports the share of outputs
per kind and how many got an informative summary (anything but the first/last-line fallback),
over all outputs and over the outputs large enough to be masked (``Policy.mask_min_chars``). It
also compares the size of the new mask notes with the old ones, counts the outputs whose old mask note (one line count summed over the step's outputs) gave
a wrong size, and times the summarizer. Prints figures only, never the outputs themselves, so the
report may be committed for corpora that may not be copied.

    python benchmarks/bench_summaries.py DIR [DIR ...] [--out results.txt] [--sample N --seed S]

``--sample`` additionally prints N random (command, kind, summary) lines per corpus to stdout,
for reading; they are not written to ``--out``.
"""

from __future__ import annotations

import argparse
import platform
import random
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

from refold.errors import TrajectoryError
from refold.loaders import load
from refold.mechanisms.summary import MAX_CHARS, _summarize, summarize
from refold.mechanisms.summary_wrap import command_line
from refold.messages import action_of, mask_note
from refold.policy import DEFAULT
from refold.tokens import get_tokenizer
from refold.types import Step


def _old_mask_text(step: Step) -> str:
    """The note before per-output notes (one line count summed over the step's outputs), for comparison."""
    lines = sum(t.count("\n") + 1 for t in step.output_texts)
    return (
        f"[step {step.index}]\n[context-manager] Output of step {step.index} ({lines} lines) hidden to save "
        f"context. `restore {step.index}` shows it."
    )


def files(folder: Path) -> list[Path]:
    return sorted(q for q in folder.rglob("*") if ".traj" in q.name) if folder.is_dir() else [folder]


def corpus(folder: Path, sample: int, rng: random.Random) -> list[str]:
    kinds: Counter[str] = Counter()
    informative: Counter[str] = Counter()
    big_kinds: Counter[str] = Counter()
    big_informative = 0
    wrong_size = multi = 0
    times: list[float] = []
    note_tokens: list[int] = []
    old_tokens: list[int] = []
    output_tokens: list[int] = []
    tok = get_tokenizer()
    longest = 0
    runs = skipped = 0
    picked: list[str] = []
    seen = 0
    for path in files(folder):
        try:
            history = load(path)
        except TrajectoryError:
            skipped += 1
            continue
        runs += 1
        for step in history.steps:
            texts = step.output_texts
            summed = sum(t.count("\n") + 1 for t in texts)
            for j, text in enumerate(texts):
                action = action_of(step, j)
                command, tool = (action.command, action.tool) if action else ("", "bash")
                _summarize.cache_clear()  # time the work, not the memo
                t0 = time.perf_counter()
                s = summarize(command, text, tool)
                times.append((time.perf_counter() - t0) * 1000)
                longest = max(longest, len(s.text))
                kinds[s.kind] += 1
                informative[s.kind] += s.informative
                if len(text) >= DEFAULT.mask_min_chars:
                    big_kinds[s.kind] += 1
                    big_informative += s.informative
                    note = mask_note(step, j, reversible=True)
                    note_tokens.append(tok.count(note))
                    old_tokens.append(tok.count(_old_mask_text(step)))
                    output_tokens.append(tok.count(text))
                if len(texts) > 1:
                    multi += 1
                if summed != text.count("\n") + 1:
                    wrong_size += 1
                seen += 1
                if sample and (len(picked) < sample or rng.random() < sample / seen):
                    line = f"  [{s.kind}] $ {command_line(tool, command, 70) or '-'}\n      -> {s.text}"
                    if len(picked) < sample:
                        picked.append(line)
                    else:
                        picked[rng.randrange(sample)] = line
    total = sum(kinds.values())
    big = sum(big_kinds.values())
    out = [
        f"corpus: {folder.name}   runs: {runs}"
        + (f" (skipped {skipped})" if skipped else "")
        + f"   outputs: {total}"
    ]
    if not total:
        return [*out, "  no outputs"]
    inf = sum(informative.values())
    out.append(f"  informative summaries: {inf}/{total} ({100 * inf / total:.1f}%)   fallback: {total - inf}")
    out.append(
        f"  outputs >= {DEFAULT.mask_min_chars} chars (maskable): {big}, informative {big_informative}/{big} "
        f"({100 * big_informative / max(1, big):.1f}%)"
    )
    out.append(f"  {'kind':<9} {'share':>6} {'outputs':>8} {'informative':>12} {'maskable':>9}")
    for kind, n in kinds.most_common():
        out.append(f"  {kind:<9} {100 * n / total:5.1f}% {n:>8} {informative[kind]:>12} {big_kinds[kind]:>9}")
    out.append(
        f"  old mask note size wrong (summed over the step's outputs): {wrong_size}/{total}; "
        f"outputs in multi-output steps: {multi}"
    )
    if note_tokens:
        out.append(
            f"  mask note tokens ({tok.name}) per maskable output: mean {statistics.mean(note_tokens):.1f} "
            f"(old note without summary {statistics.mean(old_tokens):.1f}); hidden output mean "
            f"{statistics.mean(output_tokens):.0f}; notes / outputs {sum(note_tokens) / sum(output_tokens):.3f}"
        )
    times.sort()
    p99 = times[min(len(times) - 1, int(0.99 * len(times)))]
    out.append(
        f"  summarize ms per output (uncached): median {statistics.median(times):.3f}  p99 {p99:.2f}  "
        f"max {times[-1]:.1f};  longest summary {longest} chars (cap {MAX_CHARS})"
    )
    if picked:
        print(f"--- sample of {len(picked)} summaries from {folder.name} (not written to --out)")
        print("\n".join(picked))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folders", nargs="+", type=Path, help="one folder of trajectories per corpus")
    ap.add_argument("--out", type=Path, help="also write the figures to this file")
    ap.add_argument(
        "--sample", type=int, default=0, help="print this many random summaries per corpus (stdout only)"
    )
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    lines = [
        f"refold summary benchmark  python {platform.python_version()}  {platform.machine()}",
        "folders: " + " ".join(str(f) for f in args.folders),
        "multi-agent files (CodeR) load as one merged history: 'control' counts agent hand-offs",
    ]
    for folder in args.folders:
        if not folder.exists():
            sys.exit(f"bench_summaries: {folder}: no such file or folder")
        lines += corpus(folder, args.sample, random.Random(args.seed))
    report = "\n".join(lines)
    print(report)
    if args.out:
        args.out.write_text(report + "\n")


if __name__ == "__main__":
    main()

"""What never hiding a person's mid-session instruction costs, on recorded tool-call runs.

    python benchmarks/bench_user_messages.py DIR [DIR ...] [--at 5] [--chars 2000] [--out FILE]

Each tool-call session (a reply with tool calls) gets one typed instruction of ``--chars``
characters after step ``--at``'s outputs (in memory: no file is written); every policy replays the
run with and without it. Reported per policy: prompt tokens (Qwen3.6, the messages of the prompt
of every stored reply; no tool schemas, no unreplied format-error calls, unlike ``refold replay``)
without and with the instruction, what it added, and that added cost against
base's (base shows it in every later prompt: refold's policies should add as much, never less,
since they never hide it). Text-based sessions are skipped: their user messages are outputs.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from refold.history import History
from refold.lab.replay.paths import collect_paths
from refold.lab.replay.policies import make_projector
from refold.lab.replay.projectors import Options
from refold.loaders import load_all
from refold.prompt_tokens import PromptTokens
from refold.tokens import get_tokenizer

POLICIES = ("base", "default", "refold-best", "masking")


def instruction(chars: int) -> str:
    line = "Stop: use the v2 client in api/v2.py instead of the v1 endpoint, and keep the old signature."
    return "\n".join(f"{i}. {line}" for i in range(1, chars // len(line) + 2))[:chars]


def with_instruction(h: History, at: int, text: str) -> History:
    out = History(h.prefix, source=h.source, meta=dict(h.meta))
    for s in h.steps:
        out.append(s.reply, [*s.observations, {"role": "user", "content": text}] if s.index == at else list(s.observations))
    return out


def tokens(h: History, policy: str, opts: Options) -> int:
    counter = PromptTokens(opts.tokenizer)
    return sum(counter.count(p.messages) for p in make_projector(policy, opts).prompts(h))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--at", type=int, default=5)
    ap.add_argument("--chars", type=int, default=2000)
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    start = time.perf_counter()
    opts = Options(tokenizer=get_tokenizer("qwen3.6"))
    text = instruction(a.chars)
    plain = {p: 0 for p in POLICIES}
    said = {p: 0 for p in POLICIES}
    sessions = calls = 0
    for f in collect_paths(a.paths):
        for h in load_all(f):
            if len(h) <= a.at or not any(s.reply.get("tool_calls") for s in h.steps[: a.at]):
                continue
            h2 = with_instruction(h, a.at, text)
            assert h2.step(a.at).user_messages, h.source
            sessions += 1
            calls += len(h)
            for p in POLICIES:
                plain[p] += tokens(h, p, opts)
                said[p] += tokens(h2, p, opts)
    lines = [
        f"# python benchmarks/bench_user_messages.py {' '.join(a.paths)} --at {a.at} --chars {a.chars}",
        f"{sessions} tool-call sessions, {calls} calls; a {a.chars:,}-character instruction after step {a.at} (Qwen3.6 tokens of the messages, simulated prompts)",
        "",
        f"{'policy':12s} {'without':>12s} {'with':>12s} {'added':>10s} {'vs base':>8s} {'x base':>7s}",
    ]
    base_added = said["base"] - plain["base"]
    for p in POLICIES:
        added = said[p] - plain[p]
        lines.append(f"{p:12s} {plain[p]:12,} {said[p]:12,} {added:+10,} {added / base_added if base_added else 0:8.3f} {said[p] / said['base']:7.4f}")
    lines.append(f"({time.perf_counter() - start:.0f} s)")
    text_out = "\n".join(lines) + "\n"
    sys.stdout.write(text_out)
    if a.out:
        Path(a.out).write_text(text_out, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

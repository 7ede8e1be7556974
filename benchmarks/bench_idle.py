"""What recorded idle gaps change: calls whose cache is cold (gap > the cache lifetime) move the
boundary for free. Renders each run call by call under the cost rule with its recorded times and
with the times removed, and counts cold calls, calls whose boundary differs, and characters sent.

    python benchmarks/bench_idle.py PATH ... [--cache openai,anthropic] [--ttl 0,120,60] [--out FILE]

PATH: folders or files of recorded runs (runs without timestamps, e.g. SWE-agent files, are
counted and skipped). ``--ttl 0`` is the profile's own lifetime (300 s for openai/anthropic).
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from pathlib import Path

from refold.config import Config
from refold.history import History
from refold.loaders import load_all
from refold.mechanisms.boundary import idle_s
from refold.render import Renderer
from refold.types import content_text


def runs_in(paths: list[str]) -> list[Path]:
    out: list[Path] = []
    for p in map(Path, paths):
        out += sorted(q for q in p.rglob("*") if ".traj" in q.name and q.is_file()) if p.is_dir() else [p]
    return out


def sent(h: History, config: Config) -> tuple[list[int], int]:
    """Boundary per call and characters sent over the run."""
    r = Renderer(config)
    bounds, chars = [], 0
    for t in range(len(h) + 1):
        out = r.render(h, t)
        bounds.append(out.stats.boundary)
        chars += sum(len(content_text(m.get("content"))) for m in out.messages)
    return bounds, chars


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--cache", default="openai,anthropic")
    ap.add_argument("--ttl", default="0,120,60", help="cache lifetimes in seconds; 0 = the profile's")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    timed: list[tuple[Path, History, History]] = []
    untimed = 0
    for f in runs_in(args.paths):
        try:
            loaded, bare_all = load_all(f), load_all(f)  # one history per agent of a multi-agent file
        except Exception as e:  # one line per bad file, the rest still runs
            print(f"skipped {f}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}", file=sys.stderr)
            continue
        for h, bare in zip(loaded, bare_all, strict=True):
            if len(h) < 2 or idle_s(h, len(h)) is None:
                untimed += 1
                continue
            for s in bare.steps:
                s.meta.pop("time", None)
            timed.append((f, h, bare))
    gaps = [g for _, h, _ in timed for t in range(2, len(h) + 1) if (g := idle_s(h, t)) is not None]
    lines = [
        f"refold idle-gap benchmark  {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')}",
        f"command: bench_idle.py {' '.join(args.paths)} --cache {args.cache} --ttl {args.ttl}",
        f"histories with recorded times: {len(timed)} ({sum(len(h) for _, h, _ in timed)} calls); without (e.g. SWE-agent files): {untimed}",
        f"gaps between calls: median {sorted(gaps)[len(gaps) // 2]:.1f} s, max {max(gaps):.1f} s" if gaps else "no gaps",
        "",
        f"{'cache':10} {'ttl s':>6} {'cold calls':>10} {'boundary differs':>16} {'chars sent with / without times':>32}",
    ]
    for cache in [c.strip() for c in args.cache.split(",") if c.strip()]:
        for ttl in [float(x) for x in args.ttl.split(",") if x.strip()]:
            config = Config.parse(cache=cache, boundary={"cache_ttl_s": ttl or None})
            life = ttl or {"openai": 300.0, "anthropic": 300.0, "gemini": 300.0}.get(cache)
            cold = sum(1 for g in gaps if life is not None and g > life)
            differs = with_chars = without_chars = 0
            for _, h, bare in timed:
                b1, c1 = sent(h, config)
                b2, c2 = sent(bare, config)
                differs += sum(1 for x, y in zip(b1, b2, strict=True) if x != y)
                with_chars += c1
                without_chars += c2
            ratio = with_chars / without_chars if without_chars else 1.0
            lines.append(f"{cache:10} {life or 0:6.0f} {cold:10d} {differs:16d} {with_chars:>14,} / {without_chars:>14,} ({ratio:.4f}x)")
    report = "\n".join(lines) + "\n"
    print(report, end="")
    if args.out:
        args.out.write_text(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())

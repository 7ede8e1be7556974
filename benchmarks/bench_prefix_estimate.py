"""Which per-session figure estimates the request prefix a Claude Code / Codex log leaves out?

Synthetic sessions (numbers only, no log): call k's messages count ``n_k`` replay tokens (growing
by 200-4000 a call from ~500), the provider records ``A + g * n_k`` (+ what each scenario adds),
``A`` the unrecorded prefix (system prompt + tool schemas, provider tokens) and ``g`` the
provider's tokens per replay token (Claude's tokenizer is not public: g != 1). Three estimators
of the prefix in replay tokens (the unit every replayed figure is in; truth ``A / g``):

* first: the first call's recorded - counted;
* median: the median over the calls of recorded - counted;
* fit (refold.lab.replay.prefix): Theil-Sen slope s, a = median(recorded - s * counted), a / s.

Reported per scenario (mean over sessions): |error| of the prefix (% of A / g), and the error in
percentage points of a policy's prompt-token ratio to base (a policy that shows half of each
call's messages: truth sum(A + g n_k / 2) / sum(A + g n_k), as the provider would bill it).

Run: python benchmarks/bench_prefix_estimate.py [--sessions 300] [--out benchmarks/results/prefix_estimate.txt]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from refold.lab.replay.prefix import fit_prefix  # noqa: E402

Session = tuple[list[int], list[float], float]  # counts, recorded, truth (replay tokens)


def session(rng: random.Random, calls: int, gap: float, prefix: int, kind: str) -> Session:
    counts, n = [], 500
    for _ in range(calls):
        counts.append(n)
        n += rng.randint(200, 4000)
    rec = [prefix + gap * c for c in counts]
    if kind == "noise":  # unlogged reminders of a few dozen tokens on some calls
        rec = [r + rng.randint(-100, 100) for r in rec]
    elif kind == "odd calls":  # a tenth of the calls carry something unlogged shown once
        rec = [r + (rng.randint(1000, 8000) if rng.random() < 0.1 else 0) for r in rec]
    elif kind == "odd first":  # the first call alone differs (a one-off attachment)
        rec[0] += 4000
    elif kind == "tools join":  # an MCP server connects halfway: the prefix grows by 2000
        rec = [r + (2000 if k >= calls // 2 else 0) for k, r in enumerate(rec)]
    return counts, rec, prefix / gap


def first(counts: list[int], rec: list[float]) -> float:
    return max(0.0, rec[0] - counts[0])


def median(counts: list[int], rec: list[float]) -> float:
    return max(0.0, statistics.median(r - c for c, r in zip(counts, rec, strict=True)))


def fit(counts: list[int], rec: list[float]) -> float:
    a, s, _, _ = fit_prefix(counts, rec, same_tokenizer=False)
    return max(0.0, a) / s


ESTIMATORS: dict[str, Callable[[list[int], list[float]], float]] = {"first": first, "median": median, "fit": fit}


def ratio_error(counts: list[int], rec: list[float], est: float, gap: float, prefix: int) -> float:
    """Percentage points between the replay's half-shown/base ratio with ``est`` and the billed one."""
    half = [c / 2 for c in counts]
    true = sum(prefix + gap * h for h in half) / sum(prefix + gap * c for c in counts)
    got = sum(est + h for h in half) / sum(est + c for c in counts)
    return 100 * abs(got - true)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, default=300)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    rng = random.Random(20261205)
    lines = [
        f"# python benchmarks/bench_prefix_estimate.py --sessions {args.sessions}",
        "# prefix |error| % of truth (replay tokens) / ratio-to-base error in points, mean over sessions",
        f"{'scenario':<34}" + "".join(f"{name:>18}" for name in ESTIMATORS),
    ]
    for kind in ("exact", "noise", "odd calls", "odd first", "tools join"):
        for gap in (1.0, 1.2, 0.85):
            for calls in (2, 3, 5, 12, 60):
                errs: dict[str, list[tuple[float, float]]] = {k: [] for k in ESTIMATORS}
                for _ in range(args.sessions):
                    prefix = rng.choice([3000, 16_000, 24_000])
                    counts, rec, truth = session(rng, calls, gap, prefix, kind)
                    for name, f in ESTIMATORS.items():
                        est = f(counts, rec)
                        errs[name].append((100 * abs(est - truth) / truth, ratio_error(counts, rec, est, gap, prefix)))
                cells = "".join(
                    f"{statistics.fmean(e for e, _ in v):>8.1f}% /{statistics.fmean(r for _, r in v):>5.1f}pt" for v in errs.values()
                )
                lines.append(f"{kind + f', g={gap}, {calls} calls':<34}{cells}")
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.out:
        args.out.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()

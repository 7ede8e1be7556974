"""Which cache state each recorded gpt-5-mini hit came from, and what the per-call error can cover.

Checks the mechanisms a replayable rule could use (issue 12's remaining miss), on the recorded
reported hits (derived counts only):

* replies: with each reply that carried no reasoning cached after its prompt, does any reported
  hit exceed the fine 1,024 + 128k grid of the longest prefix shared with what came before?
* large misses (over 2,000 tokens below the fine grid's hit, as in the calibration table): is
  the reported hit zero (a cold machine), the hit of an earlier prompt that is not the latest
  (a machine that saw the run before but not its last calls), or neither?
* what the per-call error can be scored on: replayed calls against calls with a recorded usage
  (a format-error call's reply, and with it its usage, was not stored);
* when the runs were recorded: do runs overlap in time (competing for one machine), how many
  leading tokens all runs share (OpenAI routes by a hash of about the first 256 tokens, and
  overflows a prefix past about 15 requests a minute to other machines [DOC/3P, cache_spec.md]),
  and large misses by recording day.

Used by bench_cache_calibration.py (its "Which state each hit came from" section); run alone:
    python benchmarks/bench_cache_states.py ../shared/data/trajectories/eval-only
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from bench_cache_misses import LARGE, RunLike


def _lcp(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _fine(n: int) -> int:
    return 0 if n < 1024 else 1024 + 128 * ((n - 1024) // 128)


def _chunk(n: int, offset: int) -> int:
    v = offset + 1024 * ((n - offset) // 1024) if n >= offset else 0
    return v if v >= 1024 else 0


def run_states(run: RunLike, offset: int, fine_ttl: float) -> dict[str, Any]:
    """Per-run counts (see the module doc); ``offset``, ``fine_ttl``: the fitted chunk grid's
    offset and the fine tier's life (seconds)."""
    seen: list[list[int]] = []  # earlier prompts, in call order
    with_replies: list[list[int]] = []  # and prompt + reply for replies without reasoning
    out: dict[str, Any] = {"replayed": len(run.calls), "scored": 0, "above_fine": 0, "above_fine_with_replies": 0,
                           "large": 0, "large_zero": 0, "large_older": 0, "large_other": 0, "older_back": [], "days": {},
                           "after_reasoned": 0, "after_reasoned_stale": 0}
    for k, c in enumerate(run.calls):
        p = len(c.ids)
        if c.step is not None:
            out["scored"] += 1
            rep = round(run.reported[c.step] * p)
            prev = run.calls[k - 1] if k else None
            if prev is not None and prev.step is not None and isinstance(prev.generated, int) and prev.generated > 0:
                out["after_reasoned"] += 1  # a stored call right after a stored reply that reasoned
                out["after_reasoned_stale"] += c.time is not None and prev.time is not None and c.time - prev.time >= fine_ttl
            if k:
                lcps = [_lcp(c.ids, s) for s in seen]
                fine = _fine(min(max(lcps), p))
                fine_r = _fine(min(max(_lcp(c.ids, s) for s in with_replies), p))
                out["above_fine"] += rep > fine
                out["above_fine_with_replies"] += rep > fine_r
                big = bool(fine) and fine - rep > LARGE
                if c.time is not None:
                    day = time.strftime("%m-%d", time.gmtime(c.time))
                    cell = out["days"].setdefault(day, [0, 0])
                    cell[0] += big
                    cell[1] += 1
                if big:
                    out["large"] += 1
                    back = [k - j for j, n in enumerate(lcps) if rep and rep in (_fine(min(n, p)), _chunk(min(n, p), offset))]
                    if rep == 0:
                        out["large_zero"] += 1
                    elif back:
                        out["large_older"] += 1
                        out["older_back"].append(min(back))
                    else:
                        out["large_other"] += 1
        seen.append(c.ids)
        with_replies.append(c.ids)
        if isinstance(c.generated, list) and c.generated:
            with_replies.append(c.ids + c.generated)
    times = [c.time for c in run.calls if c.time is not None]
    out["span"] = (min(times), max(times)) if times else None
    out["first_prompt"] = run.calls[0].ids if run.calls else []
    return out


def evidence(runs: Sequence[RunLike], offset: int, fine_ttl: float) -> dict[str, Any]:
    per = [run_states(r, offset, fine_ttl) for r in runs]
    halves: dict[str, dict[str, Any]] = {}
    for i, s in enumerate(per):
        h = halves.setdefault("fit" if i % 2 == 0 else "test", {"runs": 0, "older_back": []})
        h["runs"] += 1
        for k in ("replayed", "scored", "above_fine", "above_fine_with_replies", "large", "large_zero", "large_older",
                  "large_other", "after_reasoned", "after_reasoned_stale"):
            h[k] = h.get(k, 0) + s[k]
        h["older_back"] += s["older_back"]
    days: dict[str, list[int]] = {}
    for s in per:
        for d, (a, n) in s["days"].items():
            cell = days.setdefault(d, [0, 0])
            cell[0] += a
            cell[1] += n
    spans = [s["span"] for s in per if s["span"]]
    overlap = max((min(a[1], b[1]) - max(a[0], b[0]) for i, a in enumerate(spans) for b in spans[i + 1:]), default=0.0)
    firsts = [s["first_prompt"] for s in per if s["first_prompt"]]
    shared = min((_lcp(firsts[0], f) for f in firsts[1:]), default=0)
    for h in halves.values():
        b = sorted(h.pop("older_back"))
        h["older_calls_back_median"] = b[len(b) // 2] if b else None
    return {"fine_ttl": fine_ttl, "halves": halves, "large_misses_by_day": dict(sorted(days.items())),
            "longest_overlap_of_two_runs_s": round(max(0.0, overlap), 1), "leading_tokens_shared_by_all_runs": shared}


def lines(model: str, ev: dict[str, Any]) -> list[str]:
    """The markdown section of cache_calibration.md."""
    out = [f"Which state each hit came from, {model} (stored calls after each run's first; a large miss is over 2,000 "
           "tokens below the fine grid's hit):", "",
           "| half | runs | replayed calls | calls with a recorded usage (scored) | hits above the fine grid | "
           "the same, replies without reasoning cached | large misses | of them: zero | an earlier, not the latest, "
           "prompt's hit | neither |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for half, h in ev["halves"].items():
        out.append(f"| {half} | {h['runs']} | {h['replayed']} | {h['scored']} | {h['above_fine']} | "
                   f"{h['above_fine_with_replies']} | {h['large']} | {h['large_zero']} | {h['large_older']} | {h['large_other']} |")
    after = sum(h["after_reasoned"] for h in ev["halves"].values())
    stale = sum(h["after_reasoned_stale"] for h in ev["halves"].values())
    days = ", ".join(f"{d}: {a}/{n}" for d, (a, n) in ev["large_misses_by_day"].items())
    out += ["", "Replies without reasoning are cached: counting them, no reported hit exceeds the fine grid. A large miss "
            "lands on zero or on the hit of an earlier prompt of the run that is not the latest: the call reached a machine "
            "that had served the run before but not its last calls (several machines serve one prefix). A reply that "
            f"reasoned is followed by a request past the fine tier ({ev['fine_ttl']:g} s) in {stale} of {after} stored calls "
            "right after one, so holding a reasoned call's prompt in chunks only changes little beside the tiers. The calls a "
            "per-call error can be scored on are those with a recorded usage; the others (format errors: their reply and "
            "usage were not stored) are replayed, so they shape the cache, but have no reported hit (the run's "
            "`instance_cost` includes them, but their output tokens are unknown, so their cached tokens cannot be "
            f"separated). Runs recorded one after another (the longest overlap of two runs: "
            f"{ev['longest_overlap_of_two_runs_s']:g} s); all share their first {ev['leading_tokens_shared_by_all_runs']} "
            "tokens (system prompt and tool schema), so a routing key of about the first 256 tokens is shared by every run "
            "and by any other traffic sending the same template, whose rate the record does not show. Large misses by "
            f"recording day (UTC): {days}."]
    return out


def main(argv: list[str] | None = None) -> int:
    import bench_cache_calibration as cal  # a sibling script: the runs

    from refold.lab.cache import CALIBRATED

    runs = cal.gpt5mini_runs(argv, __doc__)
    if runs is None:
        return 1
    offset, ttl = CALIBRATED["openai"].get("chunk_offset", 0), CALIBRATED["openai"].get("fine_ttl", 0.0)
    ev = evidence(runs, offset if isinstance(offset, int) else 0, float(ttl) if isinstance(ttl, int | float) else 0.0)
    print("\n".join(lines("gpt-5-mini", ev)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

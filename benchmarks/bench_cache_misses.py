"""What precedes a large cache miss in the recorded gpt-5-mini runs, feature by feature.

A large miss is a stored call whose reported cached tokens are over 2,000 below the fine grid's
hit (the longest prefix shared with any earlier prompt of the run, on the 1,024 + 128k grid).
Per-call MAE is minimized by the conditional median, so a feature can lower it only where it
tells a miss with more than 50% probability; this tabulates the miss share per feature value on
each half (fit = even positions by file name, test = odd), searches every combination of up to
three features on the fit half, and checks the state models the runs suggest (misses clustered
by run: is the previous call's miss, or "the cache holds only what was written since the miss",
a state worth modelling?). The recorded outcome rows use the reported hits of earlier calls,
which a replay of another policy does not have: they bound what a state model could see.

Used by bench_cache_calibration.py (its "What precedes a large miss" section); run alone:
    python benchmarks/bench_cache_misses.py ../shared/data/trajectories/eval-only
"""

from __future__ import annotations

import itertools
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from refold.history import History
from refold.lab.cache import CALIBRATED, CalibratedCache, ReplayedCache
from refold.lab.replay.cache_requests import CallIds

LARGE = 2000
"""Tokens below the fine grid's hit that make a large miss (as in the calibration table)."""
HOLDS = "holds the missed call's prompt"


class RunLike(Protocol):
    name: str
    calls: list[CallIds]
    reported: dict[int, float]
    history: History


@dataclass
class Call:
    """One stored call after the first of its run: what a predictor may know, and the outcome."""

    run: str
    half: str
    prompt: int
    fresh: int  # the fine grid's hit
    reported: int
    big: bool
    features: dict[str, str]
    outcome: dict[str, str] = field(default_factory=dict)  # from earlier calls' reported hits


def _bucket(v: float, cuts: Sequence[float], unit: str = "") -> str:
    """The value's range among ``cuts``: "a-b s" for seconds, "a-(b-1)" (or "a") for counts."""
    lo = 0.0
    for c in cuts:
        if v < c:
            if unit:
                return f"{lo:g}-{c:g}{unit}"
            return f"{lo:g}" if c - lo == 1 else f"{lo:g}-{c - 1:g}"
        lo = c
    return f">={lo:g}{unit}"


def _order(v: str) -> tuple[float, str]:
    head = v.lstrip(">=").split("-")[0].split(" ")[0].rstrip("k")
    try:
        return (float(head) + (0.5 if v.startswith(">=") else 0.0), v)
    except ValueError:
        return (float("inf"), v)


def _num(d: Any, *keys: str) -> float | None:
    for k in keys:
        d = d.get(k) if isinstance(d, dict) else None
    return float(d) if isinstance(d, int | float) and not isinstance(d, bool) else None


def _response(history: History, step: int) -> tuple[dict[str, Any], dict[str, Any]]:
    extra = history.step(step).reply.get("extra")
    extra = extra if isinstance(extra, dict) else {}
    resp = extra.get("response")
    return extra, resp if isinstance(resp, dict) else {}


def calls_of(run: RunLike, half: str, params: dict[str, Any]) -> list[Call]:
    """Every stored call of ``run`` but the first, with its features (see the module doc)."""
    fresh_sim = CalibratedCache("fresh", min_tokens=params["min_tokens"], increment=params["increment"],
                                cache_generated=params["cache_generated"], per_route=params["per_route"])
    states = ReplayedCache("openai")  # which earlier call's state each recorded hit matches
    out: list[Call] = []
    times = [c.time for c in run.calls]
    prev_stored: int | None = None  # index in run.calls
    history: list[tuple[int, bool]] = []  # (call index, large miss) of stored calls so far
    for k, c in enumerate(run.calls):
        p = len(c.ids)
        fresh = fresh_sim.request(c.ids, generated=c.generated, session=c.route).cached_tokens
        rep = round(run.reported[c.step] * p) if c.step is not None else None
        states.now = c.time
        state = states.probe(c.ids, rep if rep is not None else fresh, generated=c.generated)
        if c.step is None or rep is None:
            continue
        big = bool(fresh) and fresh - rep > LARGE
        if k and prev_stored is not None:
            prev = run.calls[prev_stored]
            assert prev.step is not None
            pextra, presp = _response(run.history, prev.step)
            _, resp = _response(run.history, c.step)
            dt = (c.time or 0.0) - (times[k - 1] or 0.0)
            gen_s = (_num(pextra, "timestamp") or 0.0) - (_num(presp, "created") or 0.0)
            prev_p = len(run.calls[k - 1].ids)
            crossed = [f"{t // 1024}k" for t in (8192, 16384, 32768, 49152) if prev_p < t <= p]
            recent = sum(1 for t in times[:k] if t is not None and c.time is not None and c.time - 60.0 <= t < c.time)
            hour = time.gmtime(c.time).tm_hour if c.time is not None else -1
            features = {
                "seconds since the previous request": _bucket(dt, (1.5, 3, 5, 10, 30), " s"),
                "previous reply's reasoning tokens": _bucket(_num(presp, "usage", "completion_tokens_details", "reasoning_tokens") or 0, (1, 200, 1000)),
                "previous reply's output tokens": _bucket(_num(presp, "usage", "completion_tokens") or 0, (50, 300, 1500)),
                "previous reply's generation time": _bucket(gen_s, (2, 10), " s"),
                "previous call's reply not stored (format error)": "yes" if run.calls[k - 1].step is None else "no",
                "tool calls in the previous reply": str(len(run.history.step(prev.step).reply.get("tool_calls") or [])),
                "prompt tokens": _bucket(p, (8192, 16384, 32768, 49152)),
                "prompt crossed a size since the previous call": crossed[-1] if crossed else "no",
                "prompt growth since the previous call": _bucket(p - prev_p, (200, 1000, 4000)),
                "position in the run (stored calls)": _bucket(len(history), (5, 10, 20, 30)),
                "hour of the request (UTC)": f"{hour:02d}",
                "requests in the previous 60 s": _bucket(recent, (5, 10)),
                **{f"response field `{f}`": str(resp.get(f)) for f in ("model", "system_fingerprint", "service_tier", "object")},
            }
            last3 = [b for _, b in history[-3:]]
            miss_at = next((i for i, b in reversed(history) if b), None)
            outcome = {
                "previous stored call a large miss": "yes" if history and history[-1][1] else "no",
                "large misses among the last 3 stored calls": str(sum(last3)),
                "large misses so far in the run": _bucket(sum(b for _, b in history), (1, 2, 4)),
                "after a large miss: the state the next call reached": "-" if not (history and history[-1][1]) or miss_at is None
                else HOLDS if state >= miss_at else "an older state",
            }
            out.append(Call(run.name, half, p, fresh, rep, big, features, outcome))
        history.append((k, big))
        prev_stored = k
    return out


def _counts(calls: list[Call], key: Callable[[Call], str | None]) -> dict[str, dict[str, list[int]]]:
    out: dict[str, dict[str, list[int]]] = {}
    for c in calls:
        v = key(c)
        if v is None:
            continue
        cell = out.setdefault(v, {"fit": [0, 0], "test": [0, 0]})[c.half]
        cell[0] += c.big
        cell[1] += 1
    return out


def _share(a: int, n: int) -> str:
    return f"{a}/{n} ({a / n:.0%})" if n else "-"


Cond = tuple[tuple[str, str], ...]


def _label(cond: Cond) -> str:
    return " & ".join(f"{k} {v}" for k, v in cond)


def combinations(calls: list[Call], depth: int = 3, min_calls: int = 5) -> tuple[int, list[tuple[float, int, Cond, list[int]]]]:
    """Every value of up to ``depth`` features combined with at least ``min_calls`` fit-half calls:
    how many there are, and those whose fit-half large-miss share exceeds 50% (with the test half)."""
    names = sorted(f for f in (calls[0].features if calls else {}) if len({c.features[f] for c in calls}) > 1)
    seen, over = 0, []
    for n in range(1, depth + 1):
        for ks in itertools.combinations(names, n):
            table: dict[Cond, dict[str, list[int]]] = {}
            for c in calls:
                cell = table.setdefault(tuple((k, c.features[k]) for k in ks), {"fit": [0, 0], "test": [0, 0]})[c.half]
                cell[0] += c.big
                cell[1] += 1
            for cond, cells in table.items():
                a, m = cells["fit"]
                if m >= min_calls:
                    seen += 1
                    if a / m > 0.5:
                        over.append((a / m, m, cond, cells["test"]))
    return seen, sorted(over, key=lambda t: (-t[0], -t[1]))


def rule_effect(calls: list[Call], cond: Cond) -> dict[str, float]:
    """Per-call MAE of the fine grid's hit on each half, and with the calls matching ``cond``
    predicted at the fit half's median ratio of reported to fine-grid hit there."""
    def match(c: Call) -> bool:
        return all(c.features[k] == v for k, v in cond)

    ratios = [c.reported / c.fresh for c in calls if c.half == "fit" and c.fresh and match(c)]
    r = statistics.median(ratios) if ratios else 1.0
    out: dict[str, float] = {"ratio": r}
    for half in ("fit", "test"):
        hs = [c for c in calls if c.half == half]
        out[f"{half}_before"] = sum(abs(c.fresh - c.reported) / c.prompt for c in hs) / max(1, len(hs))
        out[f"{half}_after"] = sum(abs((c.fresh * r if match(c) else c.fresh) - c.reported) / c.prompt for c in hs) / max(1, len(hs))
    return out


def evidence(runs: Sequence[RunLike], params: dict[str, Any]) -> dict[str, Any]:
    calls = [c for i, r in enumerate(runs) for c in calls_of(r, "fit" if i % 2 == 0 else "test", params)]
    def feature(f: str) -> Callable[[Call], str | None]:
        return lambda c: c.features[f]

    def recorded(f: str) -> Callable[[Call], str | None]:
        return lambda c: c.outcome[f] if c.outcome[f] != "-" else None

    feats = {f: _counts(calls, feature(f)) for f in (sorted(calls[0].features) if calls else [])}
    outcome = {f: _counts(calls, recorded(f)) for f in (sorted(calls[0].outcome) if calls else [])}
    seen, over = combinations(calls)
    kept, sets = [], []
    for t in over:  # one entry per set of fit-half calls (a narrower condition naming the same ones is left out)
        ids = {i for i, c in enumerate(calls) if c.half == "fit" and all(c.features[k] == v for k, v in t[2])}
        if ids not in sets:
            sets.append(ids)
            kept.append(t)
    rules = [{"when": _label(cond), "fit": f"{round(s * m)}/{m}", "test": f"{t[0]}/{t[1]}",
              **{k: round(v, 4) for k, v in rule_effect(calls, cond).items()}} for s, m, cond, t in kept]
    return {"calls": len(calls), "large_misses": {h: sum(c.big for c in calls if c.half == h) for h in ("fit", "test")},
            "features": feats, "recorded_outcomes": outcome, "combinations_tried": seen, "combinations_over_half": rules}


def blind_bound(rows: Sequence[tuple[int, int, float]], large: Sequence[bool], bound: float = 0.03) -> dict[str, float]:
    """The lowest per-call MAE with |bias| <= ``bound`` of a predictor that is exact on every call
    but the large misses and gives those the fine grid's hit (it cannot tell them), its hits then
    lowered by one factor: what the misses alone cost. ``rows``: (prompt, fine grid's hit, reported share)."""
    best: tuple[float, float, float] | None = None
    flat = [(raw if big else rep * p) / p - rep for (p, raw, rep), big in zip(rows, large, strict=True)]
    for i in range(0, 501):
        m = i / 1000
        err = [((raw if big else rep * p) * (1 - m)) / p - rep for (p, raw, rep), big in zip(rows, large, strict=True)]
        mae, bias = sum(map(abs, err)) / len(err), sum(err) / len(err)
        if abs(bias) <= bound and (best is None or mae < best[0]):
            best = (mae, bias, m)
    if best is None:
        return {}
    return {"mae": round(best[0], 4), "bias": round(best[1], 4), "lowered_by": best[2],
            "mae_unlowered": round(sum(map(abs, flat)) / len(flat), 4)}


def lines(model: str, ev: dict[str, Any]) -> list[str]:
    """The markdown section of cache_calibration.md."""
    lm = ev["large_misses"]
    out = [f"What precedes a large miss, {model} ({ev['calls']} stored calls after each run's first; large misses: "
           f"{lm['fit']} on the fit half, {lm['test']} on the test half). Per-call MAE is minimized by the conditional "
           "median, so only a feature value after which a large miss comes with more than 50% probability can lower it:", "",
           "| feature (what a replay knows before the call) | value | fit half: large misses | test half |", "|---|---|---:|---:|"]
    best: tuple[float, str, str] | None = None
    constant = []
    for f, table in ev["features"].items():
        if len(table) == 1:
            constant.append(f"{f} = {next(iter(table))}")
            continue
        for v, cell in sorted(table.items(), key=lambda kv: _order(kv[0])):
            out.append(f"| {f} | {v} | {_share(*cell['fit'])} | {_share(*cell['test'])} |")
            a, n = cell["fit"]
            if n >= 5 and (best is None or a / n > best[0]):
                best = (a / n, f"{f} {v}", _share(*cell["test"]))
    out += ["", "| recorded outcome (not known to a replay of another policy) | value | fit half | test half |", "|---|---|---:|---:|"]
    for f, table in ev["recorded_outcomes"].items():
        for v, cell in sorted(table.items(), key=lambda kv: _order(kv[0])):
            out.append(f"| {f} | {v} | {_share(*cell['fit'])} | {_share(*cell['test'])} |")
    out.append("")
    if constant:
        out.append("The same in every call (no information): " + "; ".join(constant) + ". The response `id` is unique per call.")
    if best is not None:
        out.append(f"Highest single-feature value on the fit half (5+ calls): {best[1]}, {best[0]:.0%} (test half {best[2]}).")
    rules = ev["combinations_over_half"]
    msg = (f"Of {ev['combinations_tried']} values of up to three features combined (5+ fit-half calls), {len(rules)} exceed 50% "
           "large misses on the fit half")
    if rules:
        msg += ": " + "; ".join(
            f"{r['when']} ({r['fit']}; test half {r['test']}; predicting those calls at the fit half's median ratio {r['ratio']:.2f} "
            f"of the fine grid's hit moves the fine grid's MAE (calls after the first) {r['test_before']:.3f} -> {r['test_after']:.3f} on the test half)" for r in rules)
    out.append(msg + ".")
    prev = ev["recorded_outcomes"].get("previous stored call a large miss", {})
    after = ev["recorded_outcomes"].get("after a large miss: the state the next call reached", {})
    if prev:
        def cell(v: str, h: str) -> list[int]:
            return list(prev.get(v, {}).get(h, [0, 0]))

        def n(v: str, h: str) -> int:
            return int(after.get(v, {}).get(h, [0, 0])[1])

        out.append(
            "State models: fitted on the fit half, a two-state chain (the previous stored call a large miss or not) gives "
            f"P(large miss | miss) = {_share(*cell('yes', 'fit'))} and P(large miss | no miss) = {_share(*cell('no', 'fit'))}; "
            "below 50% in both states even for a replay that could see the state, so the median in each is the fine grid's "
            f"hit. After a large miss the next call reached a state holding the missed call's prompt in "
            f"{n(HOLDS, 'fit')} of {prev.get('yes', {}).get('fit', [0, 0])[1]} "
            f"(fit) and {n(HOLDS, 'test')} of {prev.get('yes', {}).get('test', [0, 0])[1]} "
            "(test) cases and an older state (a machine seen before) in the rest, so the cache does not hold only what "
            "was written since the miss; where it does, the next prompt extends the missed one and the fine grid's hit is "
            "that state's hit too: the model changes no prediction.")
    return out


def main(argv: list[str] | None = None) -> int:
    import bench_cache_calibration as cal  # a sibling script: the runs and the fitted parameters

    runs = cal.gpt5mini_runs(argv, __doc__)
    if runs is None:
        return 1
    print("\n".join(lines("gpt-5-mini", evidence(runs, dict(CALIBRATED["openai"])))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

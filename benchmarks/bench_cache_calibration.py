"""Fit and validate the calibrated hosted-cache profiles against provider-reported cached tokens.

Sources (each call's reported ``prompt_tokens_details.cached_tokens`` / ``prompt_tokens``):

* ``openai``: mini-swe-agent 2.x runs with gpt-5-mini (eval-only), o200k (exact prompt counts);
* ``gemini-openrouter``: mini-swe-agent 1.x runs with Gemini 3 Pro through OpenRouter (dev),
  Qwen3.6 tokenizer (replay's default; Gemini's own is not available offline), routes from the
  recorded ``response.provider``.

Files are split by name: even positions fit, odd positions test. The fit grid-searches the
structural parameters (minimum, increment, whether a reply is cached, one cache per route, the
time the fine grid holds and the coarse chunk grid after it) and then the expected-value
parameters (shortfalls, miss rate) on the fit half, minimizing per-call MAE + |bias| of the
cached share. Times are the recorded request times (``response.created``). The table reports
both halves for the fitted profile and for the uncalibrated ones (``openai-exact``, ``vllm``),
then per run (residuals), and the evidence for the mechanism (hits by time since the previous
request; large misses by idle gap, request rate and the previous call's recompute).

Run: python benchmarks/bench_cache_calibration.py ../shared/data/trajectories/eval-only \
        ../shared/data/trajectories/dev [--out benchmarks/results/cache_calibration]
Writes ``<out>.json`` and ``<out>.md`` (derived figures only).
"""

from __future__ import annotations

import argparse
import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import bench_cache_misses as precede  # a sibling script: what precedes a large miss
import bench_cache_states as states  # a sibling script: which state each hit came from

from refold.history import History
from refold.lab.cache import REPLAYED, ROUTED_CACHES, CalibratedCache, ReplayedCache, make_cache
from refold.lab.replay.cache_requests import CallIds
from refold.lab.replay.metrics import measure
from refold.lab.replay.paths import collect_paths
from refold.lab.replay.policies import make_projector
from refold.lab.replay.projectors import Options
from refold.lab.replay.recorded import recorded_as_of
from refold.lab.replay.settings import request_tools
from refold.loaders import load_all
from refold.tokens import get_tokenizer


@dataclass
class Run:
    name: str
    calls: list[CallIds]
    reported: dict[int, float]  # step -> reported cached share
    history: History


def gpt5mini_runs(argv: list[str] | None, doc: str) -> list[Run] | None:
    """The gpt-5-mini runs with reported usage in the folders named on the command line (the
    sibling analyses' input), or None after saying there are too few."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("folders", nargs="+")
    a = ap.parse_args(argv)
    runs = _runs(collect_paths(a.folders), "o200k", "gpt-5-mini")
    if len(runs) < 2:
        print("no gpt-5-mini runs with reported usage on every call in", ", ".join(a.folders))
        return None
    return runs


def _runs(files: list[str], tokenizer: str, want: str) -> list[Run]:
    tok = get_tokenizer(tokenizer)
    out = []
    for f in files:
        try:
            (h,) = load_all(f)
        except Exception:  # noqa: BLE001 - other formats are not this source
            continue
        model = str(h.meta.get("model") or "")
        if want not in model:
            continue
        rep: dict[int, float] = {}
        for s in h.steps:
            u = s.meta.get("usage") or {}
            p, c = u.get("prompt_tokens"), u.get("cached_tokens")
            if isinstance(p, int) and p > 0 and isinstance(c, int):
                rep[s.index] = c / p
        if len(rep) != len(h):
            continue
        keep: list[CallIds] = []
        measure(h, make_projector("base", Options(tokenizer=tok)), tok, cache_name="none", keep_ids=keep, tools=request_tools(h, "base"))
        out.append(Run(Path(f).name, keep, rep, h))
    return sorted(out, key=lambda r: r.name)


Row = tuple[int, int, bool, float]


def _structural(
    run: Run, min_tokens: int, increment: int, cache_generated: bool, per_route: bool,
    fine_ttl: float | None = None, chunk_offset: int = 0, chunk_reasoned: bool = False,
) -> list[Row]:
    """(prompt, raw hit of the two-tier grid, previous reply reasoned, reported share) per stored call."""
    sim = CalibratedCache("fit", min_tokens=min_tokens, increment=increment, cache_generated=cache_generated,
                          per_route=per_route, fine_ttl=fine_ttl, chunk_offset=chunk_offset,
                          chunk_reasoned=chunk_reasoned)
    rows = []
    reasoned: dict[Any, bool] = {}
    for c in run.calls:
        key = c.route if per_route else None
        sim.now = c.time
        res = sim.request(c.ids, generated=c.generated, session=c.route)
        if c.step is not None:
            rows.append((len(c.ids), res.cached_tokens, reasoned.get(key, False), run.reported[c.step]))
        reasoned[key] = isinstance(c.generated, int) and c.generated > 0
    return rows


def _structures(grid: dict[str, list[Any]]) -> list[dict[str, Any]]:
    out = []
    for mt, inc, gen, route, ttl, chunked in itertools.product(
        grid["min_tokens"], grid["increment"], grid["cache_generated"], grid["per_route"], grid.get("fine_ttl", [None]),
        grid.get("chunk_reasoned", [False]),
    ):
        if inc > mt and grid.get("increment_le_min"):
            continue
        for off in grid.get("chunk_offset", [0]) if ttl is not None or chunked else [0]:
            out.append({"min_tokens": mt, "increment": inc, "cache_generated": gen, "per_route": route,
                        "fine_ttl": ttl, "chunk_offset": off, "chunk_reasoned": chunked})
    return out


def _rows(runs: list[Run], params: dict[str, Any]) -> list[Row]:
    keys = ("min_tokens", "increment", "cache_generated", "per_route", "fine_ttl", "chunk_offset", "chunk_reasoned")
    defaults: dict[str, Any] = {"fine_ttl": None, "chunk_offset": 0, "chunk_reasoned": False}
    return [row for r in runs for row in _structural(r, *(params.get(k, defaults.get(k)) for k in keys))]


def _score3(rows: list[Row], short: int, shortfall: int, miss: float) -> tuple[float, float, float]:
    """Per-call MAE and bias of the cached share, and the bias of the totals (token-weighted)."""
    err = []
    diff = total = 0.0
    for p, raw, reasoned, rep in rows:
        hit = float(raw)
        if hit:
            hit = max(0.0, hit - short - (shortfall if reasoned else 0))
        hit *= 1.0 - miss
        err.append(min(p, round(hit)) / p - rep)
        diff += min(p, round(hit)) - rep * p
        total += p
    return sum(abs(e) for e in err) / len(err), sum(err) / len(err), diff / total


def _score(rows: list[Row], short: int, shortfall: int, miss: float) -> tuple[float, float]:
    mae, bias, _ = _score3(rows, short, shortfall, miss)
    return mae, bias


def _profile_score(runs: list[Run], name: str, **kw: Any) -> tuple[float, float, int, float]:
    """Per-call MAE and bias, calls, and the token-weighted bias of the totals."""
    err = []
    diff = total = 0.0
    for r in runs:
        sim = make_cache(name, **kw)
        states = recorded_as_of(r.history, r.calls, name) if name in REPLAYED else None
        for k, c in enumerate(r.calls):
            if isinstance(sim, ReplayedCache):
                sim.calls, sim.as_of = k, states[k] if states else None
            if isinstance(sim, CalibratedCache | ReplayedCache):
                sim.now = c.time
            res = sim.request(c.ids, generated=c.generated, session=c.route if name in ROUTED_CACHES else "v")
            if c.step is not None:
                err.append(res.cached_tokens / max(1, len(c.ids)) - r.reported[c.step])
                diff += res.cached_tokens - r.reported[c.step] * len(c.ids)
                total += len(c.ids)
    return sum(abs(e) for e in err) / len(err), sum(err) / len(err), len(err), diff / total


def frontier(rows: list[Row], grid: dict[str, list[Any]], bound: float) -> tuple[float, dict[str, Any]] | None:
    """The lowest per-call MAE any expected-value setting reaches with |bias| <= ``bound`` on ``rows``."""
    best: tuple[float, dict[str, Any]] | None = None
    for short, sf, miss in itertools.product(grid["shortfall"], grid["reasoning_shortfall"], grid["miss_rate"]):
        mae, bias = _score(rows, short, sf, miss)
        if abs(bias) <= bound and (best is None or mae < best[0]):
            best = (mae, {"shortfall": short, "reasoning_shortfall": sf, "miss_rate": miss})
    return best


def fit_expected(train: list[Run], params: dict[str, Any], grid: dict[str, list[Any]]) -> dict[str, Any]:
    """The expected-value mode: the structural fit, with shortfalls and miss rate chosen so the
    fit half's totals are unbiased (token-weighted bias within 0.005), then the lowest MAE."""
    rows = _rows(train, params)
    best: tuple[float, dict[str, Any]] | None = None
    for short, sf, miss in itertools.product(grid["shortfall"], grid["reasoning_shortfall"], grid["miss_rate"]):
        mae, _, tb = _score3(rows, short, sf, miss)
        obj = mae + (0.0 if abs(tb) <= 0.005 else 1.0 + abs(tb))
        if best is None or obj < best[0]:
            best = (obj, {**params, "shortfall": short, "reasoning_shortfall": sf, "miss_rate": miss})
    assert best is not None
    return best[1]


def fit(train: list[Run], grid: dict[str, list[Any]]) -> dict[str, Any]:
    best: tuple[float, dict[str, Any]] | None = None
    for struct in _structures(grid):
        rows = _rows(train, struct)
        for short, sf, miss in itertools.product(grid["shortfall"], grid["reasoning_shortfall"], grid["miss_rate"]):
            mae, bias = _score(rows, short, sf, miss)
            # the lowest MAE among fits that keep the fit half's bias within 0.015
            obj = mae + (0.0 if abs(bias) <= 0.015 else 1.0 + abs(bias))
            if best is None or obj < best[0]:
                best = (obj, {**struct, "shortfall": short, "reasoning_shortfall": sf, "miss_rate": miss})
    assert best is not None
    return best[1]


def per_run(runs: list[Run], params: dict[str, Any]) -> list[dict[str, Any]]:
    """Per-call error of the fitted profile in each run, split into large misses and the rest."""
    out = []
    for i, r in enumerate(runs):
        rows = _rows([r], params)
        fresh = _rows([r], {**params, "fine_ttl": None})
        err = []
        big_err = rest_err = 0.0
        big = 0
        for (p, raw, reasoned, rep), f in zip(rows, fresh, strict=True):
            hit = float(raw)
            if hit:
                hit = max(0.0, hit - params["shortfall"] - (params["reasoning_shortfall"] if reasoned else 0))
            e = min(p, round(hit * (1.0 - params["miss_rate"]))) / p - rep
            err.append(e)
            if f[1] and f[1] - rep * p > 2000:
                big += 1
                big_err += abs(e)
            else:
                rest_err += abs(e)
        n = max(1, len(err))
        out.append({"run": r.name, "half": "fit" if i % 2 == 0 else "test", "calls": len(err), "large_misses": big,
                    "mae": sum(map(abs, err)) / n, "bias": sum(err) / n, "mae_large_misses": big_err / n, "mae_rest": rest_err / n})
    return out


_DT_BUCKETS = ((0.0, 2.0), (2.0, 4.0), (4.0, 8.0), (8.0, float("inf")))


def evidence(runs: list[Run], params: dict[str, Any]) -> dict[str, Any]:
    """What each stored call's reported hit was, against the seconds since the previous request:
    the fine grid's hit, the coarse chunk grid's, a large miss, or something else."""
    off, chunk = params.get("chunk_offset", 0), 1024
    by_dt: dict[str, dict[str, int]] = {f"{lo:g}-{hi:g}s": {"fine": 0, "coarse": 0, "large miss": 0, "other": 0} for lo, hi in _DT_BUCKETS}
    mods: dict[int, int] = {}
    prev_new: dict[str, list[int]] = {"<1000": [0, 0], "1000-4000": [0, 0], ">=4000": [0, 0]}
    per_minute: dict[str, list[int]] = {"0-4": [0, 0], "5-9": [0, 0], "10+": [0, 0]}
    for r in runs:
        starts = [c.time for c in r.calls]
        fresh = CalibratedCache("e", min_tokens=params["min_tokens"], increment=params["increment"],
                                cache_generated=params["cache_generated"], per_route=params["per_route"])
        last_t: float | None = None
        last_new: int | None = None
        for k, c in enumerate(r.calls):
            hit = fresh.request(c.ids, generated=c.generated, session=c.route).cached_tokens
            if c.step is not None and c.time is not None and last_t is not None:
                p = len(c.ids)
                rep = round(r.reported[c.step] * p)
                coarse = off + chunk * ((hit - off) // chunk) if hit >= params["min_tokens"] else 0
                kind = "fine" if rep == hit else "coarse" if rep == coarse and coarse >= params["min_tokens"] else (
                    "large miss" if hit - rep > 2000 else "other")
                dt = c.time - last_t
                label = next(f"{lo:g}-{hi:g}s" for lo, hi in _DT_BUCKETS if lo <= dt < hi)
                by_dt[label][kind] += 1
                if rep < hit and kind != "large miss":
                    mods[rep % chunk] = mods.get(rep % chunk, 0) + 1
                rate = sum(1 for t in starts[:k] if t is not None and c.time - 60.0 <= t < c.time)
                pm = per_minute["0-4" if rate < 5 else "5-9" if rate < 10 else "10+"]
                pm[0] += kind == "large miss"
                pm[1] += 1
                if last_new is not None:
                    b = "<1000" if last_new < 1000 else "1000-4000" if last_new < 4000 else ">=4000"
                    prev_new[b][0] += kind == "large miss"
                    prev_new[b][1] += 1
            last_new = len(c.ids) - round(r.reported[c.step] * len(c.ids)) if c.step is not None else None
            last_t = c.time if c.time is not None else last_t
    return {"by_seconds_since_previous_request": by_dt, "short_hits_mod_1024": dict(sorted(mods.items())),
            "large_miss_by_previous_recompute": prev_new, "large_miss_by_requests_in_the_previous_minute": per_minute}


def _evidence_lines(model: str, ev: dict[str, Any]) -> list[str]:
    lines = [f"Mechanism evidence, {model} (all runs; each stored call's reported hit against the fine 1,024 + 128k grid "
             "and the coarse chunk grid of the fitted offset):", "",
             "| seconds since the previous request | fine grid | coarse chunk | large miss | other |", "|---|---:|---:|---:|---:|"]
    for label, c in ev["by_seconds_since_previous_request"].items():
        lines.append(f"| {label} | {c['fine']} | {c['coarse']} | {c['large miss']} | {c['other']} |")
    mods = ev["short_hits_mod_1024"]
    lines += ["", "Hits below the fine grid (not large misses), by position mod 1,024: "
              + ", ".join(f"{k}: {v}" for k, v in mods.items()) + ".",
              "Large misses by the previous call's recomputed tokens: "
              + ", ".join(f"{k}: {a}/{n}" for k, (a, n) in ev["large_miss_by_previous_recompute"].items()) + "; by requests "
              "in the previous 60 s (unreplied calls included): "
              + ", ".join(f"{k}: {a}/{n}" for k, (a, n) in ev["large_miss_by_requests_in_the_previous_minute"].items()) + "."]
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folders", nargs="+")
    ap.add_argument("--out", default="benchmarks/results/cache_calibration")
    a = ap.parse_args(argv)
    files = collect_paths(a.folders)
    miss = [round(0.01 * i, 2) for i in range(0, 21)]
    sources = {
        "openai": ("o200k", "gpt-5-mini", {
            "min_tokens": [1024], "increment": [128], "cache_generated": [True, False], "per_route": [False],
            "fine_ttl": [None, 1.5, 2.0, 3.0, 4.0, 6.0], "chunk_offset": list(range(0, 1024, 128)),
            "shortfall": list(range(0, 1025, 128)), "reasoning_shortfall": list(range(0, 1025, 128)),
            "miss_rate": miss}),
        "gemini-openrouter": ("qwen3.6", "gemini-3-pro", {
            "min_tokens": list(range(1536, 2561, 128)), "increment": list(range(1536, 2305, 64)),
            "cache_generated": [False], "per_route": [True, False], "increment_le_min": True,
            "shortfall": [0, 256, 512], "reasoning_shortfall": [0, 256], "miss_rate": miss}),
    }
    result: dict[str, Any] = {}
    lines = [
        "# Calibrated cache profiles: validation (derived from recorded usage; SIMULATED hits)",
        "",
        "Per-call cached share (cached / prompt tokens), simulated minus reported: mean absolute error",
        "(MAE) and mean (bias) over calls; \"totals\" is the bias of the summed cached tokens (token-",
        "weighted). Fit on the runs at even positions (sorted by file name), tested on the odd ones.",
        "Reproduce: `python benchmarks/bench_cache_calibration.py ../shared/data/trajectories/eval-only",
        "../shared/data/trajectories/dev`.",
        "",
        "| source | tokenizer | profile | half | runs | calls | MAE | bias | totals |",
        "|---|---|---|---|---:|---:|---:|---:|---:|",
    ]
    notes: list[str] = []
    residuals = [
        "| source | run | half | calls | large misses | MAE | bias | MAE from large misses | MAE of the rest |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    evidence_lines: list[str] = []
    for name, (tokenizer, model, grid) in sources.items():
        runs = _runs(files, tokenizer, model)
        if len(runs) < 2:
            continue
        train, test = runs[0::2], runs[1::2]
        params = fit(train, grid)
        expected = fit_expected(train, params, grid)
        # the reasoning fallback as a per-prompt rule instead of time tiers, fitted the same way
        chunked = fit(train, {**grid, "fine_ttl": [None], "chunk_reasoned": [True]}) if params.get("fine_ttl") is not None else None
        printed: dict[tuple[str, str], tuple[float, float]] = {}
        entry: dict[str, Any] = {"tokenizer": tokenizer, "model": model, "fitted": params, "expected": expected, "halves": {}}
        if chunked is not None:
            entry["chunked"] = chunked
        for half, rs in (("fit", train), ("test", test)):
            rows: dict[str, Any] = {}
            variants: list[tuple[str, str, dict[str, Any]]] = [
                (f"`{name}` fitted (per call)", name, params),
                (f"`{name}-expected` (totals unbiased)", name, expected),
            ]
            if params["per_route"]:  # what routing from the recorded endpoint buys
                variants.append((f"`{name}` fitted, one cache for all routes", name, {**params, "per_route": False}))
            if params.get("fine_ttl") is not None:  # what the time tiers buy, all else as fitted
                variants.append((f"`{name}` fitted, no time tiers (fine grid always)", name, {**params, "fine_ttl": None}))
            if chunked is not None:
                variants.append((f"`{name}` refitted: a reasoned call's prompt held in chunks, no time tiers", name, chunked))
            variants += [
                (f"`{name}-replayed` (the record's states: not a prediction)", f"{name}-replayed", {}),
                ("`openai-exact`", "openai-exact", {}),
                ("`vllm`", "vllm", {}),
            ]
            for label, prof, kw in variants:
                mae, bias, n, tb = _profile_score(rs, prof, **kw)
                printed[(half, label)] = (mae, bias)
                rows[label.replace("`", "")] = {"runs": len(rs), "calls": n, "mae": round(mae, 4), "bias": round(bias, 4), "totals_bias": round(tb, 4)}
                lines.append(f"| {model} | {tokenizer} | {label} | {half} | {len(rs)} | {n} | {mae:.3f} | {bias:+.3f} | {tb:+.3f} |")
            entry["halves"][half] = rows
        # how low can any setting of the family go on the test half with |bias| <= 0.03?
        test_rows = _rows(test, params)
        best = None
        for struct in _structures(grid):
            b = frontier(_rows(test, struct), grid, 0.03)
            if b is not None and (best is None or b[0] < best[0]):
                best = (b[0], {**struct, **b[1]})
        fresh_rows = _rows(test, {**params, "fine_ttl": None})
        # a large miss: over 2,000 tokens below the fine grid's hit
        large = [bool(f[1] and f[1] - f[3] * f[0] > 2000) for f in fresh_rows]
        misses = [(p, raw, rep) for (p, raw, _, rep), big in zip(test_rows, large, strict=True) if big]
        oracle = sum(abs(min(p, raw) / p - rep) for (p, raw, _, rep), big in zip(test_rows, large, strict=True) if not big) / len(test_rows)
        miss_loss = sum(raw / p - rep for p, raw, rep in misses) / len(test_rows)
        blind = precede.blind_bound([(p, raw, rep) for p, raw, _, rep in fresh_rows], large)
        entry["test_frontier"] = {
            "lowest_mae_with_abs_bias_le_0.03": None if best is None else round(best[0], 4),
            "setting": None if best is None else best[1],
            "large_misses": len(misses),
            "mae_from_large_misses_alone": round(miss_loss, 4),
            "mae_if_large_misses_were_known": round(oracle, 4),
            "mae_exact_but_blind_to_large_misses": blind,
        }
        entry["per_run"] = per_run(runs, params)
        residuals += [f"| {model} | {r['run']} | {r['half']} | {r['calls']} | {r['large_misses']} | {r['mae']:.3f} | "
                      f"{r['bias']:+.3f} | {r['mae_large_misses']:.3f} | {r['mae_rest']:.3f} |" for r in entry["per_run"]]
        if params.get("fine_ttl") is not None:  # exact token counts and recorded times: the tiers can be seen
            entry["evidence"] = evidence(runs, params)
            evidence_lines += _evidence_lines(model, entry["evidence"])
            # on the calls that are not large misses, what the time tiers change (no shortfall, no miss rate)
            for half, rs in (("fit", train), ("test", test)):
                tiers, flat = _rows(rs, params), _rows(rs, {**params, "fine_ttl": None})
                keep = [i for i, f in enumerate(flat) if not (f[1] and f[1] - f[3] * f[0] > 2000)]
                t_mae, t_bias = _score([tiers[i] for i in keep], 0, 0, 0.0)
                f_mae, f_bias = _score([flat[i] for i in keep], 0, 0, 0.0)
                entry.setdefault("without_large_misses", {})[half] = {
                    "calls": len(keep), "time_tiers": {"mae": round(t_mae, 4), "bias": round(t_bias, 4)},
                    "fine_grid_only": {"mae": round(f_mae, 4), "bias": round(f_bias, 4)}}
                evidence_lines.append(
                    f"Without the large misses ({half} half, {len(keep)} calls; no shortfall, no miss rate): the fine grid alone "
                    f"MAE {f_mae:.3f}, bias {f_bias:+.3f}; with the time tiers MAE {t_mae:.3f}, bias {t_bias:+.3f}.")
            evidence_lines.append("")
            entry["states"] = st = states.evidence(runs, params["chunk_offset"], params["fine_ttl"])
            evidence_lines += [*states.lines(model, st), ""]
            entry["what_precedes_a_large_miss"] = ev = precede.evidence(runs, params)
            evidence_lines += [*precede.lines(model, ev), ""]
        result[name] = entry
        if best is not None:
            notes.append(
                f"* {model}, test half: {len(misses)} of {len(test_rows)} calls are large misses (over 2,000 tokens below the "
                f"fine grid's hit), {miss_loss:.3f} of MAE on their own. The lowest MAE any setting of the family (every "
                f"structure and shortfall of the grid) reaches there with |bias| <= 0.03 is {best[0]:.3f} "
                f"({', '.join(f'{k}={v}' for k, v in best[1].items())}; chosen on the test half itself, so a lower bound for "
                f"this family); knowing the misses in advance it would be {oracle:.3f}. A predictor exact on every other call "
                f"that gives the misses the fine grid's hit (MAE {blind.get('mae_unlowered', float('nan')):.3f}, all of it "
                + (f"from the misses) needs its hits lowered by {blind['lowered_by']:.1%} to reach |bias| <= 0.03, and then "
                   f"has MAE {blind['mae']:.3f}." if blind.get("lowered_by") else "from the misses) is within |bias| <= 0.03 as it is.")
            )
            mae, bias = printed[("test", f"`{name}` fitted (per call)")]
            fitted = {"mae": mae, "bias": bias}
            met = mae <= 0.07 and abs(bias) <= 0.03
            notes.append(
                f"* {model}, target (test half: MAE <= 0.07, |bias| <= 0.03): {'met' if met else 'NOT met'} by the fitted "
                f"profile (MAE {fitted['mae']:.3f}, bias {fitted['bias']:+.3f})."
                + ("" if met else " What a rule would need, a feature that tells a large miss with over 50% probability, "
                   "is not in the record (see \"What precedes a large miss\" below)." if name == "openai" else "")
            )
        print(name, json.dumps(params), json.dumps(expected), json.dumps(entry["test_frontier"]))
    lines += ["", "What bounds the per-call error (no rule that cannot tell a miss in advance does better):", "", *notes]
    lines += ["", "Per run, the fitted per-call profile (residuals; nothing is fitted per run):", "", *residuals]
    lines += ["", *evidence_lines]
    lines += ["", "Fitted parameters:", ""]
    for name, e in result.items():
        lines.append(f"* `{name}`: " + ", ".join(f"{k}={v}" for k, v in e["fitted"].items()))
        lines.append(f"* `{name}-expected`: " + ", ".join(f"{k}={v}" for k, v in e["expected"].items()))
        if e.get("chunked"):
            lines.append(f"* `{name}` refitted, reasoned prompts held in chunks (not shipped: no better on the test half): "
                         + ", ".join(f"{k}={v}" for k, v in e["chunked"].items()))
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

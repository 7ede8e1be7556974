"""Fit and validate the calibrated hosted-cache profiles against provider-reported cached tokens.

Sources (each call's reported ``prompt_tokens_details.cached_tokens`` / ``prompt_tokens``):

* ``openai``: mini-swe-agent 2.x runs with gpt-5-mini (eval-only), o200k (exact prompt counts);
* ``gemini-openrouter``: mini-swe-agent 1.x runs with Gemini 3 Pro through OpenRouter (dev),
  Qwen3.6 tokenizer (replay's default; Gemini's own is not available offline), routes from the
  recorded ``response.provider``.

Files are split by name: even positions fit, odd positions test. The fit grid-searches the
structural parameters (minimum, increment, whether a reply is cached, one cache per route) and
then the expected-value parameters (reasoning shortfall, miss rate) on the fit half, minimizing
per-call MAE + |bias| of the cached share. The table reports both halves for the fitted profile
and for the uncalibrated ones (``openai-exact``, ``vllm``).

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

from refold.history import History
from refold.lab.cache import REPLAYED, ROUTED_CACHES, CalibratedCache, ReplayedCache, make_cache
from refold.lab.replay.metrics import CallIds, measure
from refold.lab.replay.policies import Options, make_projector
from refold.lab.replay.recorded import recorded_as_of
from refold.lab.replay.runner import collect_paths, request_tools
from refold.loaders import load_all
from refold.tokens import get_tokenizer


@dataclass
class Run:
    name: str
    calls: list[CallIds]
    reported: dict[int, float]  # step -> reported cached share
    history: History


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


def _structural(run: Run, min_tokens: int, increment: int, cache_generated: bool, per_route: bool) -> list[tuple[int, int, bool, float]]:
    """(prompt, raw grid hit, previous reply reasoned, reported share) per stored call."""
    sim = CalibratedCache("fit", min_tokens=min_tokens, increment=increment, cache_generated=cache_generated, per_route=per_route)
    rows = []
    reasoned: dict[Any, bool] = {}
    for c in run.calls:
        key = c.route if per_route else None
        res = sim.request(c.ids, generated=c.generated, session=c.route)
        if c.step is not None:
            rows.append((len(c.ids), res.cached_tokens, reasoned.get(key, False), run.reported[c.step]))
        reasoned[key] = isinstance(c.generated, int) and c.generated > 0
    return rows


def _score3(rows: list[tuple[int, int, bool, float]], short: int, shortfall: int, miss: float) -> tuple[float, float, float]:
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


def _score(rows: list[tuple[int, int, bool, float]], short: int, shortfall: int, miss: float) -> tuple[float, float]:
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
            res = sim.request(c.ids, generated=c.generated, session=c.route if name in ROUTED_CACHES else "v")
            if c.step is not None:
                err.append(res.cached_tokens / max(1, len(c.ids)) - r.reported[c.step])
                diff += res.cached_tokens - r.reported[c.step] * len(c.ids)
                total += len(c.ids)
    return sum(abs(e) for e in err) / len(err), sum(err) / len(err), len(err), diff / total


def frontier(rows: list[tuple[int, int, bool, float]], grid: dict[str, list[Any]], bound: float) -> tuple[float, dict[str, Any]] | None:
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
    rows = [row for r in train for row in _structural(r, params["min_tokens"], params["increment"], params["cache_generated"], params["per_route"])]
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
    for mt, inc, gen, route in itertools.product(grid["min_tokens"], grid["increment"], grid["cache_generated"], grid["per_route"]):
        if inc > mt and grid.get("increment_le_min"):
            continue
        rows = [row for r in train for row in _structural(r, mt, inc, gen, route)]
        for short, sf, miss in itertools.product(grid["shortfall"], grid["reasoning_shortfall"], grid["miss_rate"]):
            mae, bias = _score(rows, short, sf, miss)
            # the lowest MAE among fits that keep the fit half's bias within 0.015
            obj = mae + (0.0 if abs(bias) <= 0.015 else 1.0 + abs(bias))
            if best is None or obj < best[0]:
                best = (obj, {"min_tokens": mt, "increment": inc, "cache_generated": gen, "per_route": route,
                              "shortfall": short, "reasoning_shortfall": sf, "miss_rate": miss})
    assert best is not None
    return best[1]


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
    for name, (tokenizer, model, grid) in sources.items():
        runs = _runs(files, tokenizer, model)
        if len(runs) < 2:
            continue
        train, test = runs[0::2], runs[1::2]
        params = fit(train, grid)
        expected = fit_expected(train, params, grid)
        entry: dict[str, Any] = {"tokenizer": tokenizer, "model": model, "fitted": params, "expected": expected, "halves": {}}
        for half, rs in (("fit", train), ("test", test)):
            rows: dict[str, Any] = {}
            variants: list[tuple[str, str, dict[str, Any]]] = [
                (f"`{name}` fitted (per call)", name, params),
                (f"`{name}-expected` (totals unbiased)", name, expected),
            ]
            if params["per_route"]:  # what routing from the recorded endpoint buys
                variants.append((f"`{name}` fitted, one cache for all routes", name, {**params, "per_route": False}))
            variants += [
                (f"`{name}-replayed` (the record's states: not a prediction)", f"{name}-replayed", {}),
                ("`openai-exact`", "openai-exact", {}),
                ("`vllm`", "vllm", {}),
            ]
            for label, prof, kw in variants:
                mae, bias, n, tb = _profile_score(rs, prof, **kw)
                rows[label.replace("`", "")] = {"runs": len(rs), "calls": n, "mae": round(mae, 4), "bias": round(bias, 4), "totals_bias": round(tb, 4)}
                lines.append(f"| {model} | {tokenizer} | {label} | {half} | {len(rs)} | {n} | {mae:.3f} | {bias:+.3f} | {tb:+.3f} |")
            entry["halves"][half] = rows
        # how low can any setting of the fitted grid go on the test half with |bias| <= 0.03?
        test_rows = [row for r in test for row in _structural(r, params["min_tokens"], params["increment"], params["cache_generated"], params["per_route"])]
        best = frontier(test_rows, grid, 0.03)
        misses = [(p, raw, rep) for p, raw, _, rep in test_rows if raw and (raw - rep * p) > 2000]
        oracle = sum(abs(min(p, raw) / p - rep) for p, raw, _, rep in test_rows if not (raw and (raw - rep * p) > 2000)) / len(test_rows)
        miss_loss = sum(raw / p - rep for p, raw, rep in misses) / len(test_rows)
        entry["test_frontier"] = {
            "lowest_mae_with_abs_bias_le_0.03": None if best is None else round(best[0], 4),
            "setting": None if best is None else best[1],
            "large_misses": len(misses),
            "mae_from_large_misses_alone": round(miss_loss, 4),
            "mae_if_large_misses_were_known": round(oracle, 4),
        }
        result[name] = entry
        if best is not None:
            notes.append(
                f"* {model}, test half: {len(misses)} of {len(test_rows)} calls are large misses (over 2,000 tokens below the "
                f"grid hit), {miss_loss:.3f} of MAE on their own. The lowest MAE any setting of the fitted grid reaches "
                f"there with |bias| <= 0.03 is {best[0]:.3f} ({', '.join(f'{k}={v}' for k, v in best[1].items())}; chosen on "
                f"the test half itself, so a lower bound for this family); knowing the misses in advance it would be {oracle:.3f}."
            )
        print(name, json.dumps(params), json.dumps(expected), json.dumps(entry["test_frontier"]))
    lines += ["", "What bounds the per-call error (no rule that cannot tell a miss in advance does better):", "", *notes]
    lines += ["", "Fitted parameters:", ""]
    for name, e in result.items():
        lines.append(f"* `{name}`: " + ", ".join(f"{k}={v}" for k, v in e["fitted"].items()))
        lines.append(f"* `{name}-expected`: " + ", ".join(f"{k}={v}" for k, v in e["expected"].items()))
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

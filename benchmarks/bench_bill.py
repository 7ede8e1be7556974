"""Does `refold replay` (policy base) reproduce what the provider billed?

Compares the replay of recorded runs with the usage the runs store:

* CodeR (multi-agent SWE-agent .traj, GPT-4-Turbo): per-agent replay, cl100k, against
  ``info.model_stats.tokens_sent`` / ``tokens_received`` / ``instance_cost`` per run.
* mini-swe-agent 2.x tool-call runs (gpt-5-mini): o200k with the ``bash`` schema, per stored call
  against ``usage.prompt_tokens``; cost per call against ``extra.cost`` and per run against
  ``instance_cost`` (which, like ``extra.cost``, covers stored calls only); the calls whose reply
  was not stored (format errors) are counted apart.
* mini-swe-agent 1.x runs with OpenRouter usage (Gemini 3 Pro, dev/): cost against the recorded
  ``usage.cost`` per call and ``instance_cost`` per run, with the ``gemini-openrouter`` cache
  profile. No Gemini tokenizer is available offline, so prompts are counted with Qwen3.6 and
  priced on ESTIMATED Gemini counts (``COUNT_CALIBRATIONS``: fitted here on the even half of the
  runs, tested on the odd half; the raw Qwen3.6 figures are shown beside them).

Costs are computed twice: with the provider's recorded cached tokens (checks counting + price
rows) and with the replay's simulated cache (the figure `refold replay` reports).

Run: python benchmarks/bench_bill.py ../shared/data/trajectories/eval-only [../shared/data/trajectories/dev]
     [--out benchmarks/results/bill.json]
Only derived figures are written.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from refold.history import History
from refold.lab.cache import DEFAULT_PRICES, cost_usd, price_for_model
from refold.lab.replay import Settings
from refold.lab.replay.paths import collect_paths
from refold.lab.replay.report import per_file
from refold.lab.replay.runner import TaskResult, replay_history, replay_sessions
from refold.loaders import load_all


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q / 100 * (len(s) - 1))))]


def _replay(history: History, tokenizer: str, price: str | None, cache: str, calibrate: bool = True) -> dict[str, Any]:
    s = Settings(policies=("base",), tokenizer=tokenizer, cache=cache, price=price, validate=False, count_calibration=calibrate)
    r = TaskResult(file=history.source)
    replay_history(history, s, r)
    return r.policies["base"]


def _usage(history: History, t: int) -> dict[str, Any]:
    extra = history.step(t).reply.get("extra") or {}
    resp = extra.get("response") or {}
    return {"usage": resp.get("usage") or {}, "cost": extra.get("cost")}


def coder(files: list[str]) -> dict[str, Any]:
    rows = []
    s = Settings(policies=("base",), tokenizer="cl100k", cache="none", price="gpt-4-turbo", validate=False, per_call=False)
    for f in files:
        results = replay_sessions(f, s)
        stats = results[0].file_stats
        if "tokens_sent" not in stats or len(results) < 2 or any(r.error for r in results):
            continue
        stored = [r.policies["base"] for r in results]
        sent = sum(m["prompt_tokens"] for m in stored)
        calls = sum(m["calls"] for m in stored)
        cost = sum(m["cost_usd"] for m in stored)
        total = per_file(results)[results[0].path]
        est = total.get("estimated")
        t = total["policies"]["base"]
        rows.append(
            {
                "run": Path(f).name,
                "agents": len(results),
                "calls": calls,
                "api_calls": stats.get("api_calls"),
                "tokens_sent": stats["tokens_sent"],
                "replayed": sent,
                "error_stored_calls": sent / stats["tokens_sent"] - 1,
                "estimated_calls": est["calls"] if est else 0,
                "replayed_with_estimate": t["prompt_tokens"],
                "error": t["prompt_tokens"] / stats["tokens_sent"] - 1,
                "tokens_received": stats.get("tokens_received"),
                "replayed_output": t["output_tokens"],
                "instance_cost": stats.get("instance_cost"),
                "replayed_cost": t["cost_usd"],
                "cost_error_stored_calls": cost / stats["instance_cost"] - 1 if stats.get("instance_cost") else None,
                "cost_error": t["cost_usd"] / stats["instance_cost"] - 1 if stats.get("instance_cost") else None,
            }
        )
    errs = [abs(r["error"]) for r in rows]
    return {
        "runs": rows,
        "within_1pct": sum(e <= 0.01 for e in errs),
        "stored_calls_within_1pct": sum(abs(r["error_stored_calls"]) <= 0.01 for r in rows),
        "exact": sum(r["replayed"] == r["tokens_sent"] for r in rows),
        "median_abs_error": statistics.median(errs) if errs else None,
    }


def _call_cost(price: Any, prompt: int, cached: int, out: int) -> float:
    return cost_usd(price, prompt, cached, 0, out)


def mini_toolcall(files: list[str]) -> dict[str, Any]:
    per_call: list[float] = []
    cost_rec_cache: list[float] = []
    rows = []
    for f in files:
        (h,) = load_all(f)
        if not h.meta.get("tool_calls") or not str(h.meta.get("format")).startswith("mini-swe-agent"):
            continue
        model = str(h.meta.get("model") or "")
        price_name = price_for_model(model) or "gpt-5-mini"
        price = DEFAULT_PRICES[price_name]
        m = _replay(h, "o200k", price_name, "openai")
        rp = _replay(h, "o200k", price_name, "openai-replayed")["per_call"]
        pc = m["per_call"]
        stored_prompt = stored_cost_sim = stored_cost_rec = rec_cost = stored_cost_replayed = 0.0
        unreplied_prompt = 0
        for i, step in enumerate(pc["step"]):
            n, out = pc["prompt_tokens"][i], pc["output_tokens"][i]
            if step == 0:
                unreplied_prompt += n
                continue
            u = _usage(h, step)
            rep = u["usage"].get("prompt_tokens")
            cached = (u["usage"].get("prompt_tokens_details") or {}).get("cached_tokens") or 0
            if isinstance(rep, int) and rep > 0:
                per_call.append(abs(n - rep) / rep)
            stored_prompt += n
            sim = _call_cost(price, n, pc["cached_tokens"][i], out)
            stored_cost_replayed += _call_cost(price, n, rp["cached_tokens"][i], out)
            rec = _call_cost(price, n, min(cached, n), out)
            stored_cost_sim += sim
            stored_cost_rec += rec
            if isinstance(u["cost"], int | float) and u["cost"] > 0:
                rec_cost += u["cost"]
                cost_rec_cache.append(abs(rec / u["cost"] - 1))
        inst = (h.meta.get("file_stats") or {}).get("instance_cost")
        rows.append(
            {
                "run": Path(f).name,
                "api_calls": (h.meta.get("file_stats") or {}).get("api_calls"),
                "replayed_calls": m["calls"],
                "unreplied_calls": m["unreplied_calls"],
                "unreplied_prompt_share": unreplied_prompt / max(1, m["prompt_tokens"]),
                "all_vs_stored_prompt": m["prompt_tokens"] / max(1, stored_prompt),
                "reasoning_share_of_stored_cost": None,
                "instance_cost": inst,
                "sum_extra_cost": rec_cost,
                "stored_cost_recorded_cache": stored_cost_rec,
                "stored_cost_simulated_cache": stored_cost_sim,
                "cost_error_recorded_cache": stored_cost_rec / inst - 1 if inst else None,
                "cost_error_simulated_cache": stored_cost_sim / inst - 1 if inst else None,
                "cost_error_replayed_cache": stored_cost_replayed / inst - 1 if inst else None,
                "replayed_cost_all_calls": m["cost_usd"],
                "reasoning_tokens": m["reasoning_tokens"],
                "output_tokens": m["output_tokens"],
            }
        )
    return {
        "runs": rows,
        "calls": len(per_call),
        "prompt_error_median": statistics.median(per_call) if per_call else None,
        "prompt_error_p95": _pct(per_call, 95),
        "prompt_error_max": max(per_call) if per_call else None,
        "exact_calls": sum(e == 0 for e in per_call),
        "call_cost_error_recorded_cache_median": statistics.median(cost_rec_cache) if cost_rec_cache else None,
        "call_cost_error_recorded_cache_p95": _pct(cost_rec_cache, 95),
    }


def _solve(a: list[list[float]], b: list[float]) -> list[float]:
    """Gaussian elimination with partial pivoting (the normal equations of a 3-feature fit)."""
    n = len(b)
    m = [row[:] + [b[i]] for i, row in enumerate(a)]
    for c in range(n):
        piv = max(range(c, n), key=lambda r: abs(m[r][c]))
        m[c], m[piv] = m[piv], m[c]
        for r in range(n):
            if r != c and m[c][c]:
                f = m[r][c] / m[c][c]
                m[r] = [x - f * y for x, y in zip(m[r], m[c], strict=True)]
    return [m[i][n] / m[i][i] for i in range(n)]


def _count_rows(h: History, tokenizer: str) -> list[tuple[int, int, int, int, int]]:
    """Per stored call: (replay prompt tokens, characters, reported prompt tokens, replay visible
    output tokens, reported visible output tokens = completion - reasoning)."""
    from refold.chat_tokens import message_tokens, prompt_token_ids
    from refold.lab.replay.cache_requests import message_chars
    from refold.lab.replay.policies import make_projector
    from refold.lab.replay.projectors import Options
    from refold.lab.replay.settings import request_tools
    from refold.messages import clean
    from refold.tokens import get_tokenizer

    tok = get_tokenizer(tokenizer)
    tools = request_tools(h, "base")
    rows = []
    for p in make_projector("base", Options(tokenizer=tok)).prompts(h):
        u = _usage(h, p.t + 1)["usage"]
        rep, comp = u.get("prompt_tokens"), u.get("completion_tokens")
        reasoning = (u.get("completion_tokens_details") or {}).get("reasoning_tokens") or 0
        if not isinstance(rep, int) or rep <= 0 or not isinstance(comp, int):
            continue  # no usage recorded for this call
        n = len(prompt_token_ids(p.messages, tok, tools=tools))
        vis = len(message_tokens(clean(h.step(p.t + 1).reply), tok)) - len(prompt_token_ids([], tok))
        rows.append((n, message_chars(p.messages), rep, max(0, vis), comp - reasoning))
    return rows


def fit_counts(histories: list[tuple[str, History]], tokenizer: str) -> dict[str, Any]:
    """Fit the count calibration (provider prompt tokens from the replay's tokens and characters,
    visible output tokens from the replay's) on the runs at even positions; test on the odd ones."""
    runs = sorted((name, _count_rows(h, tokenizer)) for name, h in histories)
    fit_half = runs[0::2]
    # relative least squares: each call weighs 1/reported (errors are read as shares)
    ata = [[0.0] * 3 for _ in range(3)]
    atb = [0.0] * 3
    out_num = out_den = 0.0
    for _, rows in fit_half:
        for n, ch, rep, vis, rep_vis in rows:
            x = [n / rep, ch / rep, 1.0 / rep]
            for i in range(3):
                atb[i] += x[i]
                for j in range(3):
                    ata[i][j] += x[i] * x[j]
            out_num += rep_vis
            out_den += vis
    per_token, per_char, per_call = _solve(ata, atb)
    fitted = {"per_token": round(per_token, 4), "per_char": round(per_char, 5), "per_call": round(per_call, 1),
              "output_per_token": round(out_num / max(1.0, out_den), 4)}
    halves: dict[str, Any] = {}
    for half, rs in (("fit", runs[0::2]), ("test", runs[1::2])):
        per_run = []
        for name, rows in rs:
            est = sum(fitted["per_token"] * n + fitted["per_char"] * ch + fitted["per_call"] for n, ch, *_ in rows)
            raw = sum(n for n, *_ in rows)
            rep = sum(r[2] for r in rows)
            per_run.append({"run": name, "calibrated": est / rep - 1, "uncalibrated": raw / rep - 1})
        cal = [abs(r["calibrated"]) for r in per_run]
        raw_ = [abs(r["uncalibrated"]) for r in per_run]
        halves[half] = {"runs": per_run, "mean_abs_calibrated": statistics.mean(cal), "mean_abs_uncalibrated": statistics.mean(raw_),
                        "bias_calibrated": statistics.mean(r["calibrated"] for r in per_run),
                        "bias_uncalibrated": statistics.mean(r["uncalibrated"] for r in per_run),
                        "within_2pct_calibrated": sum(e <= 0.02 for e in cal), "within_2pct_uncalibrated": sum(e <= 0.02 for e in raw_)}
    return {"tokenizer": tokenizer, "fitted": fitted, "halves": halves}


def openrouter(files: list[str]) -> dict[str, Any]:
    rows = []
    histories: list[tuple[str, History]] = []
    for f in files:
        try:
            (h,) = load_all(f)
        except Exception:  # noqa: BLE001 - only runs with OpenRouter usage matter here
            continue
        costs = [(_usage(h, s.index)["usage"] or {}).get("cost") for s in h.steps]
        if not costs or not all(isinstance(c, int | float) for c in costs):
            continue
        model = str(h.meta.get("model") or "")
        price_name = price_for_model(model)
        if price_name is None:
            continue
        price = DEFAULT_PRICES[price_name]
        histories.append((Path(f).name, h))
        m = _replay(h, "qwen3.6", price_name, "gemini-openrouter")
        mr = _replay(h, "qwen3.6", price_name, "gemini-openrouter-replayed")
        mu = _replay(h, "qwen3.6", price_name, "gemini-openrouter", calibrate=False)
        mru = _replay(h, "qwen3.6", price_name, "gemini-openrouter-replayed", calibrate=False)
        pc = m["per_call"]
        rec_tok_cost = 0.0
        for s in h.steps:
            u = _usage(h, s.index)["usage"]
            cached = (u.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
            rec_tok_cost += _call_cost(price, u["prompt_tokens"], cached, u["completion_tokens"])
        recorded = float(sum(costs))  # type: ignore[arg-type]
        inst = (h.meta.get("file_stats") or {}).get("instance_cost")
        reported_prompt = sum((_usage(h, s.index)["usage"]).get("prompt_tokens", 0) for s in h.steps)
        rows.append(
            {
                "run": Path(f).name,
                "model": model,
                "price": price_name,
                "recorded_cost": recorded,
                "instance_cost": inst,
                "price_row_on_recorded_usage": rec_tok_cost,
                "price_row_error": rec_tok_cost / recorded - 1,
                "replayed_cost": m["cost_usd"],
                "replayed_cost_error": m["cost_usd"] / recorded - 1,
                "replayed_cost_error_replayed_cache": mr["cost_usd"] / recorded - 1,
                "cost_counts": m["cost_counts"],
                "uncalibrated_cost_error": mu["cost_usd"] / recorded - 1,
                "uncalibrated_cost_error_replayed_cache": mru["cost_usd"] / recorded - 1,
                "replayed_prompt_vs_reported": sum(pc["prompt_tokens"]) / max(1, reported_prompt) - 1,
                "reasoning_tokens": m["reasoning_tokens"],
                "output_tokens": m["output_tokens"],
            }
        )
    rows.sort(key=lambda r: r["run"])
    for i, r in enumerate(rows):
        r["half"] = "fit" if i % 2 == 0 else "test"
    summary: dict[str, Any] = {}
    for half in ("fit", "test", "all"):
        rs = [r for r in rows if half in ("all", r["half"])]
        summary[half] = {
            key: sum(abs(r[key]) <= 0.05 for r in rs)
            for key in ("replayed_cost_error", "replayed_cost_error_replayed_cache", "uncalibrated_cost_error",
                        "uncalibrated_cost_error_replayed_cache")
        } | {"runs": len(rs)}
    counts = fit_counts(histories, "qwen3.6") if len(histories) >= 2 else None
    return {"runs": rows, "within_5pct": summary, "count_calibration": counts}


def _p(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"{x:+.{digits}%}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folders", nargs="+", help="eval-only folder (and optionally dev/)")
    ap.add_argument("--out", default="benchmarks/results/bill.json")
    a = ap.parse_args(argv)
    files = collect_paths(a.folders)
    coder_files = [f for f in files if f.endswith(".traj")]
    json_files = [f for f in files if not f.endswith(".traj")]
    result = {
        "coder_per_agent_cl100k": coder(coder_files),
        "mini2_toolcall_o200k": mini_toolcall(json_files),
        "openrouter_qwen3.6": openrouter(json_files),
    }
    c, t = result["coder_per_agent_cl100k"], result["mini2_toolcall_o200k"]
    print(
        f"CodeR per agent (Reproducer with CodeR's LastNObservations n=5): {c['exact']} exact, "
        f"{c['within_1pct']}/{len(c['runs'])} within 1% of tokens_sent "
        f"({c['stored_calls_within_1pct']} on stored calls alone)"
    )
    for r in c["runs"]:
        est = f" (+{r['estimated_calls']} ESTIMATED requery; stored calls {_p(r['error_stored_calls'], 4)})" if r["estimated_calls"] else ""
        print(f"  {r['run']:<55} {_p(r['error'], 4)}  calls {r['calls']}/{r['api_calls']}  cost {_p(r['cost_error'])}{est}")
    if t["calls"]:
        print(
            f"mini 2.x tool calls: {t['exact_calls']}/{t['calls']} stored calls exact; per-call prompt error "
            f"median {t['prompt_error_median']:.4%} p95 {t['prompt_error_p95']:.4%} max {t['prompt_error_max']:.4%}"
        )
    within = [abs(r["cost_error_replayed_cache"]) <= 0.05 for r in t["runs"] if r["cost_error_replayed_cache"] is not None]
    within_sim = [abs(r["cost_error_simulated_cache"]) <= 0.05 for r in t["runs"] if r["cost_error_simulated_cache"] is not None]
    print(f"gpt-5-mini base cost within 5% of instance_cost: openai-replayed {sum(within)}/{len(within)}, openai {sum(within_sim)}/{len(within_sim)}")
    for r in t["runs"]:
        print(
            f"  {r['run']:<55} calls {r['replayed_calls']}/{r['api_calls']} (unreplied {r['unreplied_calls']}, "
            f"{r['unreplied_prompt_share']:.0%} of prompt tokens)  cost vs instance_cost: recorded cache "
            f"{_p(r['cost_error_recorded_cache'])}, openai {_p(r['cost_error_simulated_cache'])}, "
            f"openai-replayed {_p(r['cost_error_replayed_cache'])}"
        )
    g = result["openrouter_qwen3.6"]
    cc = g["count_calibration"]
    if cc:
        f = cc["fitted"]
        print(
            f"Gemini counts: no Gemini/Gemma tokenizer ships offline; ESTIMATED from Qwen3.6 as {f['per_token']} x tokens + "
            f"{f['per_char']} x characters {f['per_call']:+} per call, visible output x {f['output_per_token']} "
            f"(fit on the even half of the runs)"
        )
        for half in ("fit", "test"):
            v = cc["halves"][half]
            print(
                f"  {half} half: per-run prompt error mean |.| {v['mean_abs_calibrated']:.2%} (bias {v['bias_calibrated']:+.2%}), "
                f"{v['within_2pct_calibrated']}/{len(v['runs'])} within 2%; raw Qwen3.6 {v['mean_abs_uncalibrated']:.2%} "
                f"(bias {v['bias_uncalibrated']:+.2%}), {v['within_2pct_uncalibrated']}/{len(v['runs'])} within 2%"
            )
    for half in ("fit", "test", "all"):
        w = g["within_5pct"][half]
        print(
            f"Gemini base cost within 5% of the recorded bill ({half}, {w['runs']} runs): gemini-openrouter "
            f"{w['replayed_cost_error']} calibrated counts / {w['uncalibrated_cost_error']} raw Qwen3.6; "
            f"gemini-openrouter-replayed {w['replayed_cost_error_replayed_cache']} / {w['uncalibrated_cost_error_replayed_cache']}"
        )
    for r in g["runs"]:
        print(
            f"  {r['run']:<55} {r['half']:<4} price row on recorded usage {r['price_row_error']:+.2%}; replayed "
            f"{r['replayed_cost_error']:+.2%} (raw qwen3.6 {r['uncalibrated_cost_error']:+.2%}), gemini-openrouter-replayed "
            f"{r['replayed_cost_error_replayed_cache']:+.2%} (raw {r['uncalibrated_cost_error_replayed_cache']:+.2%}), "
            f"qwen3.6 prompt {r['replayed_prompt_vs_reported']:+.2%}"
        )
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1, default=float) + "\n")
    print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

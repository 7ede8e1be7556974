"""The replay report: versioned JSON (``refold-replay-1``), a flat CSV, and summary aggregates."""

from __future__ import annotations

import csv
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .needed import NEEDED_NOTE
from .prefix_notes import not_read_notes, partial_notes, prefix_notes, prefix_summary, subagent_notes
from .runner import TaskResult
from .settings import Settings

__all__ = ["CSV_FIELDS", "FORMAT", "SUMMED", "build_report", "per_file", "summarize", "write_csv"]

FORMAT = "refold-replay-1"

SUMMED = (
    "prompt_tokens",
    "cached_tokens",
    "recomputed_tokens",
    "output_tokens",
    "cost_usd",
    "removed_tokens_restorable",
    "removed_tokens_lost",
    "compactions",
    "compaction_input_tokens",
    "reasoning_tokens",
    "unreplied_calls",
    "unreplied_output_tokens",
    "hidden_needed_calls",
    "hidden_needed_restore_tokens",
)
CSV_FIELDS = (
    "file",
    "path",
    "agent",
    "format",
    "calls",
    "policy",
    "stale",
    "prompt_tokens",
    "cached_tokens",
    "recomputed_tokens",
    "written_tokens",
    "output_tokens",
    "peak_prompt_tokens",
    "peak_kv_tokens",
    "peak_kv_gib",
    "cost_usd",
    "render_ms_median",
    "render_ms_p99",
    "history_tokens",
    "removed_tokens_restorable",
    "removed_tokens_lost",
    "restores",
    "compactions",
    "compaction_input_tokens",
    "compaction_output_tokens",
    "stubs",
    "folded_steps",
    "reasoning_tokens",
    "unreplied_calls",
    "unreplied_output_tokens",
    "unreplied_prompt_tokens",
    "hidden_needed_calls",
    "hidden_needed_restore_tokens",
    "reported_prompt_tokens",
    "reported_cached_tokens",
    "error",
    "simulated",
    "unrecorded_prefix_tokens",
)
SIMULATED_COLUMNS = (
    "cached_tokens recomputed_tokens written_tokens peak_kv_tokens peak_kv_gib cost_usd: "
    "simulated (prefix-cache simulator, KV and price tables); compaction_output_tokens: modeled"
)
"""The CSV's own label of its simulated columns, in every row (a row read alone still says so)."""

SIMULATED_NOTE = (
    "Measured: prompt sizes of re-rendered recorded prompts (tokenizer), render time. Simulated: "
    "cached/recomputed tokens (prefix-cache simulator), KV and cost (tables), every compaction "
    "figure (summary size is modeled), and every STALE-dependent figure when stale != 'recorded'."
)


def _ok(results: Sequence[TaskResult]) -> list[TaskResult]:
    return [r for r in results if r.error is None]


def summarize(results: Sequence[TaskResult], policies: Sequence[str]) -> dict[str, Any]:
    """Totals and per-task medians per policy, overall and per source format, plus savings vs base."""
    ok = _ok(results)
    groups: dict[str, list[TaskResult]] = {"all": ok}
    for r in ok:
        groups.setdefault(f"format:{r.format}", []).append(r)
    out: dict[str, Any] = {}
    for gname, rs in groups.items():
        g: dict[str, Any] = {"tasks": len(rs), "calls": sum(r.calls for r in rs), "policies": {}}
        for p in policies:
            rows = [r.policies[p] for r in rs if p in r.policies]
            if not rows:
                continue
            entry: dict[str, Any] = {f"total_{k}": _num(sum(row.get(k, 0) for row in rows)) for k in SUMMED}
            for k in ("prompt_tokens", "cost_usd", "peak_prompt_tokens", "peak_kv_gib", "render_ms_median"):
                entry[f"median_{k}"] = _num(statistics.median(row[k] for row in rows))
            entry["render_ms_p99_max"] = _num(max(row["render_ms_p99"] for row in rows))
            calls = sum(row["calls"] - row.get("unreplied_calls", 0) for row in rows)  # with a reply to judge
            entry["hidden_needed_rate"] = _num(entry["total_hidden_needed_calls"] / calls if calls else 0.0)
            base = [r.policies["base"] for r in rs if "base" in r.policies and p in r.policies]
            if base and len(base) == len(rows):
                bt = sum(b["prompt_tokens"] for b in base)
                pt = sum(row["prompt_tokens"] for row in rows)
                entry["prompt_tokens_vs_base"] = _num(pt / bt - 1 if bt else 0.0)
                bc = sum(b["cost_usd"] for b in base)
                pc = sum(row["cost_usd"] for row in rows)  # unrounded: base vs itself is exactly 0
                entry["cost_vs_base"] = _num(pc / bc - 1 if bc else 0.0)
                ratios = [
                    row["peak_kv_tokens"] / b["peak_kv_tokens"] - 1
                    for row, b in zip(rows, base, strict=True)
                    if b["peak_kv_tokens"]
                ]
                entry["median_peak_kv_vs_base"] = _num(statistics.median(ratios)) if ratios else None
            g["policies"][p] = entry
        out[gname] = g
    return out


FILE_SUMMED = ("calls", "prompt_tokens", "cached_tokens", "output_tokens", "reasoning_tokens", "cost_usd")


def per_file(results: Sequence[TaskResult]) -> dict[str, Any]:
    """Totals per file over its sessions (a multi-agent file's agents), next to the file's own
    recorded totals (``info.model_stats``), so a replay can be checked against the bill."""
    out: dict[str, Any] = {}
    for r in _ok(results):
        key = r.path or r.file
        f = out.setdefault(
            key, {"sessions": [], "calls": 0, "recorded": r.file_stats or None, "policies": {}}
        )
        f["sessions"].append(r.agent or r.file)
        f["calls"] += r.calls
        for name, m in r.policies.items():
            e = f["policies"].setdefault(name, dict.fromkeys(FILE_SUMMED, 0))
            for k in FILE_SUMMED:
                e[k] += m.get(k, 0)
        if r.unrecorded:  # calls the file counts but does not hold: ESTIMATED, and said so
            f["estimated"] = r.unrecorded
            f["calls"] += r.unrecorded["calls"]
            for name, m in r.unrecorded["policies"].items():
                e = f["policies"].setdefault(name, dict.fromkeys(FILE_SUMMED, 0))
                for k in FILE_SUMMED:
                    e[k] += m.get(k, 0)
    for f in out.values():
        for e in f["policies"].values():
            e["cost_usd"] = _num(e["cost_usd"])
    return out


def recorded_usage(results: Sequence[TaskResult]) -> dict[str, Any] | None:
    """The provider's own prompt counts next to base's re-rendered ones, over the sessions that
    report usage on every stored call (None when none does), and over the same calls: the usage
    covers the stored calls only, so base's unreplied calls (a compaction's summarization call,
    a format error) are left out of its side. Tokenizers differ: compare sizes, not ids."""
    rows = [r for r in _ok(results) if isinstance(r.reported.get("prompt_tokens"), int) and "base" in r.policies]
    if not rows:
        return None
    cached = [r.reported.get("cached_tokens") for r in rows]
    out: dict[str, Any] = {
        "sessions": len(rows),
        "of_sessions": len(_ok(results)),
        "prompt_tokens": sum(int(r.reported["prompt_tokens"] or 0) for r in rows),
        "cached_tokens": sum(c for c in cached if isinstance(c, int)) if all(isinstance(c, int) for c in cached) else None,
        "base_prompt_tokens": sum(_stored(r.policies["base"], "prompt_tokens", "unreplied_prompt_tokens") for r in rows),
    }
    prefix = sum(
        int(r.policies["base"].get("unrecorded_prefix_tokens", 0))
        - int((r.prefix or {}).get("tokens_per_call", 0)) * int(r.policies["base"].get("unreplied_calls", 0))
        for r in rows
    )
    if prefix:  # of base_prompt_tokens
        out["base_unrecorded_prefix_tokens_estimated"] = prefix
    return out


def _stored(m: dict[str, Any], total: str, unreplied: str) -> int:
    """A policy's figure over its stored calls: the total less the unreplied calls' share."""
    return int(m.get(total, 0)) - int(m.get(unreplied, 0))


def _validation_summary(results: Sequence[TaskResult]) -> dict[str, Any] | None:
    vals = [r.validation for r in _ok(results) if r.validation]
    if not vals:
        return None
    out: dict[str, Any] = {
        "tasks": len(vals),
        "reported_cached_fraction_median": _num(
            statistics.median(v["reported_cached_fraction"] for v in vals)
        ),
        "profiles": {},
    }
    for name in vals[0]["profiles"]:
        ps = [v["profiles"][name] for v in vals]
        out["profiles"][name] = {
            "simulated_cached_fraction_median": _num(
                statistics.median(p["simulated_cached_fraction"] for p in ps)
            ),
            "mae_per_call_mean": _num(statistics.fmean(p["mae_per_call"] for p in ps)),
            "bias_per_call_mean": _num(statistics.fmean(p["bias_per_call"] for p in ps)),
        }
    return out


def _num(x: float) -> float:
    return round(float(x), 6)


def _counts_note(results: Sequence[TaskResult]) -> str:
    """Say when a cost was priced on ESTIMATED provider counts (CountCalibration) rather than tokens."""
    labels = sorted({m.get("cost_counts") or "" for r in _ok(results) for m in r.policies.values()} - {""})
    return f" Cost on {'; '.join(labels)}." if labels else ""


def _unpriced_note(results: Sequence[TaskResult], settings: Settings) -> list[str]:
    """Say which recorded models ``--price auto`` has no row for, and what they were priced as."""
    missed: dict[str, int] = {}
    for r in _ok(results):
        if settings.unpriced(r.model):
            name = r.model or "(no model recorded)"
            missed[name] = missed.get(name, 0) + 1
    out = []
    if missed:
        which = ", ".join(f"{m} ({n} session{'s' if n > 1 else ''})" for m, n in sorted(missed.items()))
        out.append(
            f"--price auto: no price row for {which}: priced as {settings.price_name()} instead; "
            "add the rows with --prices FILE (JSON/TOML) for their own cost."
        )
    mixed = [r for r in _ok(results) if r.models] if settings.price == "auto" else []
    if mixed:
        r = mixed[0]
        shares = ", ".join(f"{m} {n / sum(r.models.values()):.0%}" for m, n in r.models.items())
        out.append(
            f"--price auto: {len(mixed)} session(s) switched models (e.g. {Path(r.file).name}: {shares} of its reply "
            "lines): each is priced as its most common model."
        )
    return out


def build_report(
    results: Sequence[TaskResult], settings: Settings, *, seconds: float | None = None
) -> dict[str, Any]:
    """The JSON report. Everything but ``seconds``/``render_ms_*`` is deterministic."""
    report: dict[str, Any] = {
        "format": FORMAT,
        "tokenizer": settings.tokenizer,
        "cache": settings.cache,
        "stale": settings.stale,
        "price": settings.price or settings.price_name(),
        "kv_model": settings.kv_model,
        "budget": settings.budget,
        "mask_after": settings.options().mask_after,
        "policies": list(settings.policies),
        "simulated": SIMULATED_NOTE + _counts_note(results),
        "hidden_needed": NEEDED_NOTE,
        "tasks": [r.to_dict() for r in results],
        "failed": [{"file": r.file, "reason": r.error} for r in results if r.error is not None],
        "summary": summarize(results, settings.policies),
        "files": per_file(results),
        "cache_validation": _validation_summary(results),
        "recorded": recorded_usage(results),
    }
    notes = prefix_notes(_ok(results), settings.prefix_estimate) + not_read_notes(_ok(results)) + partial_notes(_ok(results))
    notes += subagent_notes(_ok(results)) + _unpriced_note(results, settings)
    if notes:
        report["notes"] = notes
    prefix = prefix_summary(_ok(results))
    if prefix is not None:
        report["unrecorded_prefix"] = prefix
    if not settings.prefix_estimate:  # absent: estimated where a log leaves the prefix out
        report["prefix_estimate"] = False
    if settings.protect:  # figures measured with outputs kept: say so (absent, the report reads as the default's)
        report["protect"] = list(settings.protect)
    if seconds is not None:
        report["seconds"] = round(seconds, 3)
    return report


def write_csv(results: Sequence[TaskResult], path: str | Path, stale: str = "recorded") -> None:
    """One row per (task, policy); a failed task is one row with its error. ``stale``: where the
    STALE marks came from; anything but the run's own is labeled simulated in every row."""
    source = stale if stale == "recorded" else f"{stale} (simulated)"
    simulated = SIMULATED_COLUMNS if stale == "recorded" else f"{SIMULATED_COLUMNS}; every figure: STALE marks simulated"
    # errors=: a file name that is not UTF-8 (its bytes kept as lone surrogates) is written with '?'
    # in the file and path columns, not a UnicodeEncodeError after the whole replay
    with open(path, "w", newline="", encoding="utf-8", errors="replace") as f:
        w = csv.DictWriter(f, fieldnames=list(CSV_FIELDS), extrasaction="ignore")
        w.writeheader()
        for r in results:
            common = {
                "file": r.file,
                "path": r.path or r.file,
                "agent": r.agent,
                "format": r.format,
                "calls": r.calls,
                "stale": source,
                "reported_prompt_tokens": r.reported.get("prompt_tokens"),
                "reported_cached_tokens": r.reported.get("cached_tokens"),
            }
            if r.error is not None:
                w.writerow({**common, "error": r.error})
                continue
            label = simulated
            if r.prefix is not None:  # prompt figures include it: say so in each row
                label = f"{simulated}; prompt figures include an ESTIMATED unrecorded prefix (unrecorded_prefix_tokens)"
            for name, m in r.policies.items():
                figures = {k: v for k, v in m.items() if k != "per_call"}
                w.writerow({**common, "policy": name, **figures, "simulated": label})

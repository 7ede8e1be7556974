"""Regenerate every replay figure of docs/results.md, from the committed commands.

    python benchmarks/bench_results.py ../shared/data/trajectories [--out benchmarks/results] [--skip-runs]

``DATA`` is the trajectories folder: its ``dev/`` and ``dev-sweagent/`` runs are replayed under
every policy (and with hindsight STALE marks, and the ``mask_after`` sweep); its ``eval-only/``
runs, when present, are passed as an argument only (never copied; only derived figures are
written). Each replay is the ``refold replay`` command printed above its output; the JSON reports
land in ``--out``, and ``<out>/results_tables.md`` holds every table of docs/results.md built from
them. ``--skip-runs`` rebuilds the tables from the JSON already there.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

SWEEP = (2, 3, 4, 6, 8, 12, 16)


def _pct(x: float | None) -> str:
    return "0" if not x else f"{x:+.1%}".replace("-", "−")


def _n(x: float) -> str:
    return f"{round(x):,}"


def commands(data: Path, out: Path) -> list[tuple[str, list[str]]]:
    dev = [str(data / "dev"), str(data / "dev-sweagent")]
    ev = data / "eval-only"
    runs: list[tuple[str, list[str]]] = [
        ("replay_dev", [*dev, "--jobs", "2", "--csv", str(out / "replay_dev.csv")]),
        ("replay_dev_hindsight", [*dev, "--jobs", "2", "--stale", "hindsight-conservative", "--no-per-call"]),
        ("replay_dev_hindsight-produced", [*dev, "--jobs", "2", "--stale", "hindsight-produced", "--no-per-call"]),
        ("replay_dev_hindsight-aggressive", [*dev, "--jobs", "2", "--stale", "hindsight-aggressive", "--no-per-call"]),
    ]
    runs += [
        (f"replay_dev_sweep_mask_after_{n}", [*dev, "--jobs", "2", "--policy", "base,refold-best", "--stale", "none", "--mask-after", str(n), "--no-per-call"])
        for n in SWEEP
    ]
    hosted = ["--policy", "base,refold,refold-best,masking,compact", "--no-per-call", "--price", "auto"]
    runs += [
        ("replay_dev_gemini_openrouter", [str(data / "dev"), "--jobs", "2", "--cache", "gemini-openrouter", *hosted]),
        ("replay_dev_gemini_openrouter_replayed", [str(data / "dev"), "--jobs", "2", "--cache", "gemini-openrouter-replayed", *hosted]),
    ]
    if ev.is_dir():
        g5 = str(ev / "mini2-gpt5mini")
        runs += [
            ("replay_eval_gpt5mini_openai", [g5, "--jobs", "2", "--tokenizer", "o200k", "--cache", "openai", *hosted]),
            ("replay_eval_gpt5mini_openai_expected", [g5, "--jobs", "2", "--tokenizer", "o200k", "--cache", "openai-expected", *hosted]),
            ("replay_eval_gpt5mini_openai_replayed", [g5, "--jobs", "2", "--tokenizer", "o200k", "--cache", "openai-replayed", *hosted]),
            ("replay_eval_coder_per_agent", [str(ev / "coder-gpt4"), "--jobs", "2", "--tokenizer", "cl100k", "--cache", "none",
                                             "--price", "gpt-4-turbo", "--policy", "base,refold,refold-best,masking", "--no-per-call"]),
        ]
    return runs


def run_all(data: Path, out: Path) -> None:
    for name, args in commands(data, out):
        cmd = [sys.executable, "-m", "refold", "replay", *args, "--json", str(out / f"{name}.json")]
        print("$ refold replay " + " ".join(args) + f" --json {out / name}.json", flush=True)
        p = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if p.returncode not in (0, 1):  # 1: some file failed to parse (named in the report)
            raise SystemExit(f"{name}: refold replay exited {p.returncode}: {p.stderr.strip()[-400:]}")


def _load(out: Path, name: str) -> dict[str, Any] | None:
    path = out / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def totals_table(r: dict[str, Any]) -> list[str]:
    lines = [
        "| policy | prompt tokens | Δ tokens | cached | cost $ | Δ cost | median peak prompt | Δ peak KV (median) "
        "| recomputed | hidden-then-needed | removed restorable | removed lost | compactions |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, p in r["summary"]["all"]["policies"].items():
        cached = p["total_cached_tokens"] / p["total_prompt_tokens"] if p["total_prompt_tokens"] else 0
        lines.append(
            f"| {name} | {_n(p['total_prompt_tokens'])} | {_pct(p.get('prompt_tokens_vs_base'))} | {cached:.0%} | "
            f"{p['total_cost_usd']:.3f} | {_pct(p.get('cost_vs_base'))} | {_n(p['median_peak_prompt_tokens'])} | "
            f"{_pct(p.get('median_peak_kv_vs_base'))} | {_n(p['total_recomputed_tokens'])} | {p['hidden_needed_rate']:.1%} | "
            f"{_n(p['total_removed_tokens_restorable'])} | {_n(p['total_removed_tokens_lost'])} | {_n(p['total_compactions'])} |"
        )
    return lines


def format_table(r: dict[str, Any]) -> list[str]:
    cols = ("default", "refold", "refold-best", "masking", "masking-polling", "compact")
    lines = [
        "| format | tasks / calls | base tokens (median per task) | " + " | ".join(cols) + " |",
        "|---|---|---:|" + "---:|" * len(cols),
    ]
    for g, s in r["summary"].items():
        if not g.startswith("format:"):
            continue
        ps = s["policies"]
        lines.append(
            f"| {g.removeprefix('format:')} | {s['tasks']} / {s['calls']} | {_n(ps['base']['median_prompt_tokens'])} | "
            + " | ".join(_pct(ps[c].get("prompt_tokens_vs_base")) for c in cols if c in ps)
            + " |"
        )
    return lines


def hindsight_table(out: Path) -> list[str]:
    lines = [
        "| `--stale` | marks | refold Δ tokens | refold Δ cost | default Δ tokens | default Δ cost | refold-best Δ tokens "
        "| refold-best Δ cost | refold-best Δ peak KV | compact+refold compactions |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for label, name in (("recorded", "replay_dev"), ("hindsight-conservative", "replay_dev_hindsight"),
                        ("hindsight-produced (`hindsight`)", "replay_dev_hindsight-produced"),
                        ("hindsight-aggressive", "replay_dev_hindsight-aggressive")):
        r = _load(out, name)
        if r is None:
            continue
        ps = r["summary"]["all"]["policies"]
        marks = sum(t.get("stale_marks", 0) for t in r["tasks"])
        lines.append(
            f"| {label} | {marks} | {_pct(ps['refold']['prompt_tokens_vs_base'])} | {_pct(ps['refold']['cost_vs_base'])} | "
            f"{_pct(ps['default']['prompt_tokens_vs_base'])} | {_pct(ps['default']['cost_vs_base'])} | "
            f"{_pct(ps['refold-best']['prompt_tokens_vs_base'])} | {_pct(ps['refold-best']['cost_vs_base'])} | "
            f"{_pct(ps['refold-best']['median_peak_kv_vs_base'])} | {_n(ps['compact+refold']['total_compactions'])} |"
        )
    return lines


def sweep_table(out: Path) -> list[str]:
    lines = ["| mask_after | Δ tokens | Δ cost | Δ recomputed |", "|---:|---:|---:|---:|"]
    for n in SWEEP:
        r = _load(out, f"replay_dev_sweep_mask_after_{n}")
        if r is None:
            continue
        ps = r["summary"]["all"]["policies"]
        rec = ps["refold-best"]["total_recomputed_tokens"] / ps["base"]["total_recomputed_tokens"] - 1
        lines.append(f"| {n} | {_pct(ps['refold-best']['prompt_tokens_vs_base'])} | {_pct(ps['refold-best']['cost_vs_base'])} | {_pct(rec)} |")
    return lines


def validation_table(r: dict[str, Any]) -> list[str]:
    v = r.get("cache_validation")
    if not v:
        return []
    lines = [
        "| | median cached fraction per task | mean abs. error per call | mean bias per call |",
        "|---|---:|---:|---:|",
        f"| reported (Gemini 3 Pro via OpenRouter) | {v['reported_cached_fraction_median']:.3f} | – | – |",
    ]
    for name, p in v["profiles"].items():
        lines.append(f"| `{name}` | {p['simulated_cached_fraction_median']:.3f} | {p['mae_per_call_mean']:.3f} | {p['bias_per_call_mean']:+.3f} |")
    return lines


def hosted_table(out: Path) -> list[str]:
    lines = [
        "| runs (JSON in `benchmarks/results/`) | cache | refold-best Δ tokens | refold-best Δ cost | masking Δ cost | compact Δ cost |",
        "|---|---|---:|---:|---:|---:|",
    ]
    rows = (("dev", "replay_dev", "vllm"),
            ("dev", "replay_dev_gemini_openrouter", "gemini-openrouter"),
            ("dev", "replay_dev_gemini_openrouter_replayed", "gemini-openrouter-replayed"),
            ("gpt-5-mini", "replay_eval_gpt5mini_openai", "openai"),
            ("gpt-5-mini", "replay_eval_gpt5mini_openai_expected", "openai-expected"),
            ("gpt-5-mini", "replay_eval_gpt5mini_openai_replayed", "openai-replayed"),
            ("CodeR per agent", "replay_eval_coder_per_agent", "none (GPT-4-Turbo)"))
    for runs, name, cache in rows:
        r = _load(out, name)
        if r is None:
            continue
        ps = r["summary"]["all"]["policies"]
        comp = _pct(ps["compact"].get("cost_vs_base")) if "compact" in ps else "–"
        lines.append(
            f"| {runs}, `{name}.json` | `{cache}` | {_pct(ps['refold-best']['prompt_tokens_vs_base'])} | "
            f"{_pct(ps['refold-best']['cost_vs_base'])} | {_pct(ps['masking']['cost_vs_base'])} | {comp} |"
        )
    return lines


def unseen_table(out: Path) -> list[str]:
    """Sizes of what a replay holds fixed, estimated from the reports."""
    r, ha = _load(out, "replay_dev"), _load(out, "replay_dev_hindsight-aggressive")
    if r is None:
        return []
    ps = r["summary"]["all"]["policies"]
    base = ps["base"]["total_prompt_tokens"]
    lines = ["| effect | estimated size (dev runs unless named) | from |", "|---|---|---|"]
    for p in ("default", "refold-best"):
        q = ps[p]
        lines.append(
            f"| restores the agent would issue ({p}) | {q['hidden_needed_rate']:.1%} of calls need a hidden name; "
            f"restoring it costs {_n(q['total_hidden_needed_restore_tokens'])} tokens once ({q['total_hidden_needed_restore_tokens'] / base:.2%} "
            f"of base prompt tokens), plus its re-sending in later calls | hidden-then-needed (replay/needed.py) |"
        )
    if ha is not None:
        # the hindsight replies gain PROGRESS/STALE head lines: their output tokens over recorded
        qa, qr = ha["summary"]["all"]["policies"]["refold"], ps["refold"]
        extra = qa["total_output_tokens"] - qr["total_output_tokens"]
        calls = sum(t["calls"] for t in r["tasks"] if "error" not in t)
        lines.append(
            f"| protocol lines in replies (`PROGRESS:`, `STALE:`) | +{_n(extra)} output tokens ({extra / max(1, qr['total_output_tokens']):.1%} of output, "
            f"{extra / max(1, calls):.0f} per reply), re-sent in later prompts | refold output, hindsight-aggressive vs recorded |"
        )
    g5 = _load(out, "replay_eval_gpt5mini_openai")
    if g5 is not None:
        b = g5["summary"]["all"]["policies"]["base"]
        lines.append(
            f"| output of calls whose reply was not stored (gpt-5-mini) | {_n(b['total_unreplied_calls'])} of {g5['summary']['all']['calls']} calls; "
            f"their {_n(b['total_unreplied_output_tokens'])} output tokens are the run's mean (ESTIMATED) | `unreplied_output_tokens` |"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", help="the trajectories folder (dev/, dev-sweagent/, optionally eval-only/)")
    ap.add_argument("--out", default="benchmarks/results")
    ap.add_argument("--skip-runs", action="store_true")
    a = ap.parse_args(argv)
    data, out = Path(a.data), Path(a.out)
    if not (data / "dev").is_dir():
        print(f"bench_results: {data}/dev: no such folder", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    if not a.skip_runs:
        run_all(data, out)
    r = _load(out, "replay_dev")
    if r is None:
        print(f"bench_results: {out}/replay_dev.json missing (run without --skip-runs)", file=sys.stderr)
        return 2
    cmds = "\n".join(f"refold replay {' '.join(args)} --json {out / name}.json" for name, args in commands(data, out))
    doc = [
        "# Tables of docs/results.md (generated by benchmarks/bench_results.py; caches, KV and cost SIMULATED)",
        "", "```bash", cmds, "```", "",
        f"## Totals ({r['summary']['all']['tasks']} dev tasks, {r['summary']['all']['calls']} calls, `--stale recorded`)", "",
        *totals_table(r), "", "## By source format", "", *format_table(r), "",
        "## With STALE marks estimated in hindsight (SIMULATED)", "", *hindsight_table(out), "",
        "## `mask_after` sweep (`--stale none`, refold-best vs base)", "", *sweep_table(out), "",
        "## Cache validation on the dev runs (base, Qwen3.6 tokens)", "", *validation_table(r), "",
        "## Hosted caches (SIMULATED)", "", *hosted_table(out), "",
        "## What a replay cannot see (sizes)", "", *unseen_table(out), "",
    ]
    (out / "results_tables.md").write_text("\n".join(doc))
    print(f"wrote {out / 'results_tables.md'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

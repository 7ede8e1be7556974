"""Print the totals table of docs/results.md from a ``refold replay --json`` file.

    python benchmarks/results_table.py benchmarks/results/replay_dev.json
"""

from __future__ import annotations

import json
import sys


def n(x: float) -> str:
    return f"{round(x):,}"


def pct(x: float | None) -> str:
    return "0" if not x else f"{x:+.1%}".replace("-", "−")


def main(path: str) -> int:
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    rows = data["summary"]["all"]["policies"]
    print("| policy | prompt tokens | Δ tokens | cached | cost $ | Δ cost | median peak prompt | Δ peak KV (median) "
          "| recomputed | hidden-then-needed | removed restorable | removed lost | compactions |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, r in rows.items():
        cached = r["total_cached_tokens"] / r["total_prompt_tokens"] if r["total_prompt_tokens"] else 0
        print(f"| {name} | {n(r['total_prompt_tokens'])} | {pct(r.get('prompt_tokens_vs_base'))} | {cached:.0%} | "
              f"{r['total_cost_usd']:.3f} | {pct(r.get('cost_vs_base'))} | {n(r['median_peak_prompt_tokens'])} | "
              f"{pct(r.get('median_peak_kv_vs_base'))} | {n(r['total_recomputed_tokens'])} | {r['hidden_needed_rate']:.1%} | "
              f"{n(r['total_removed_tokens_restorable'])} | {n(r['total_removed_tokens_lost'])} | {n(r['total_compactions'])} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))

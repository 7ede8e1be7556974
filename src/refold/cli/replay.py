"""``refold replay PATH...``: re-render recorded runs under several policies, side by side.

Exit codes: 0 all files replayed, 1 some files failed (each is named with its reason, the rest
are still replayed and reported), 2 usage errors (raised as RefoldError, printed by the cli).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from ..errors import PolicyError
from ..lab.cache import CACHE_NAMES
from ..lab.replay import (
    POLICIES,
    STALE_SOURCES,
    Settings,
    TaskResult,
    build_report,
    replay_paths,
    write_csv,
)
from ._output import (
    Column,
    NoPrefixEstimateOpt,
    PlotOpt,
    ProtectOpt,
    WideOpt,
    check_output,
    check_plot_output,
    input_runs,
    plot_output,
    plural,
    print_table,
    progress_ticks,
    write_output,
)
from ._plot import replay_series

COLUMNS = (
    Column("policy", left=True),
    Column("tokens"),
    Column("Δ"),
    Column("cached"),
    Column("cost $"),
    Column("Δ$"),
    Column("peak p50"),
    Column("ΔKV p50", compact=False),
    Column("rm restorable", compact=False),
    Column("rm lost", compact=False),
    Column("recomputed", compact=False),
    Column("needed"),
    Column("restore", compact=False),
    Column("compact", compact=False),
    Column("ms p50", compact=False),
)


def _title(report: dict[str, Any]) -> str:
    s = report["summary"].get("all", {})
    return (
        f"refold replay: {plural(s.get('tasks', 0), 'task')}, {plural(s.get('calls', 0), 'call')} "
        f"(tokenizer {report['tokenizer']}, cache {report['cache']}, stale {report['stale']})"
    )


def _rows(report: dict[str, Any]) -> list[list[str]]:
    rows = []
    for name, e in report["summary"].get("all", {}).get("policies", {}).items():
        total = e["total_prompt_tokens"]
        cached = e["total_cached_tokens"] / total if total else 0.0
        rows.append(
            [
                name,
                f"{total:,.0f}",
                _pct(e.get("prompt_tokens_vs_base")),
                f"{cached:.0%}",
                f"{e['total_cost_usd']:.3f}",
                _pct(e.get("cost_vs_base")),
                f"{e['median_peak_prompt_tokens']:,.0f}",
                _pct(e.get("median_peak_kv_vs_base")),
                f"{e['total_removed_tokens_restorable']:,.0f}",
                f"{e['total_removed_tokens_lost']:,.0f}",
                f"{e['total_recomputed_tokens']:,.0f}",
                f"{e['hidden_needed_rate']:.1%}",
                f"{e['total_hidden_needed_restore_tokens']:,.0f}",
                f"{e['total_compactions']:.0f}",
                f"{e['median_render_ms_median']:.3f}",
            ]
        )
    return rows


def _without_per_call(report: dict[str, Any]) -> dict[str, Any]:
    """The report as ``--no-per-call`` asks for it when per-call lists were kept for ``--plot``."""
    tasks = [
        {**t, "policies": {n: {k: v for k, v in e.items() if k != "per_call"} for n, e in t.get("policies", {}).items()}}
        for t in report.get("tasks", [])
    ]
    return {**report, "tasks": tasks}


def summary_line(files: int, failed_files: int, sessions: int, seconds: float, jobs: int) -> str:
    """``3 files (1 failed) in 2.0 s with 1 job.``: counts of files, not of sessions."""
    done = f"{plural(files, 'file')}" + (f" ({failed_files} failed)" if failed_files else "")
    per_agent = f", {plural(sessions, 'session')} (a file with several sessions counts each)" if sessions != files else ""
    return f"{done}{per_agent} in {seconds:.1f} s with {plural(jobs, 'job')}."


def recorded_lines(report: dict[str, Any], tokenizer: str) -> list[str]:
    """What the runs' own usage says next to base's re-rendered prompts, and the formats' notes."""
    out = []
    rec = report.get("recorded")
    if isinstance(rec, dict):
        of = f"{rec['sessions']} of {rec['of_sessions']} sessions" if rec["sessions"] != rec["of_sessions"] else plural(rec["sessions"], "session")
        cached = f", {rec['cached_tokens'] / max(1, rec['prompt_tokens']):.0%} cached" if rec.get("cached_tokens") is not None else ""
        prefix = rec.get("base_unrecorded_prefix_tokens_estimated")
        of_prefix = f", of which {prefix:,} ESTIMATED unrecorded prefix (see below)" if prefix else ""
        out.append(
            f"Recorded usage ({of}): {rec['prompt_tokens']:,} prompt tokens as the provider counted them{cached}; "
            f"base re-rendered: {rec['base_prompt_tokens']:,} ({tokenizer} tokenizer){of_prefix}."
        )
    out.extend(str(n) for n in report.get("notes") or [])
    return out


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:+.1%}"


def replay(
    paths: Annotated[
        list[Path],
        typer.Argument(
            help="Trajectory files or folders (mini-swe-agent 1.x/2.x, SWE-agent .traj, Claude Code session .jsonl, Codex rollout-*.jsonl, refold runs, .gz); "
            "a file holding several sessions (CodeR agents, Claude Code compactions and subagents, Codex compactions) "
            "is replayed per session, FILE#main / FILE#compact-1 / FILE#part2 / FILE#Agent picks one."
        ),
    ],
    policy: Annotated[
        str, typer.Option("--policy", help=f"Comma-separated policies: {', '.join(POLICIES)}.")
    ] = ",".join(POLICIES),
    stale: Annotated[
        str, typer.Option(help=f"Where STALE marks come from: {', '.join(STALE_SOURCES)}.")
    ] = "recorded",
    tokenizer: Annotated[str, typer.Option(help="qwen3.6 (default), o200k, cl100k or chars4.")] = "qwen3.6",
    cache: Annotated[
        str, typer.Option(help=f"Prefix-cache simulator: {', '.join(CACHE_NAMES)}.")
    ] = "vllm",
    price: Annotated[
        str | None,
        typer.Option(help="Price table entry (default follows --cache); 'auto': each run's recorded model (a model without a row is priced by the default and named in a note)."),
    ] = None,
    prices: Annotated[
        Path | None, typer.Option(help="A JSON/TOML price table to add to the defaults.")
    ] = None,
    kv_model: Annotated[str, typer.Option(help="Model of the KV table for peak KV GiB.")] = "qwen3.6-27b",
    budget: Annotated[int, typer.Option(help="Context budget of the compact policies (tokens).")] = 32_768,
    mask_after: Annotated[
        int | None, typer.Option(help="refold-best's mask_after (default: the sweep's choice).")
    ] = None,
    protect: ProtectOpt = None,
    jobs: Annotated[int, typer.Option("--jobs", "-j", help="Worker processes.")] = 1,
    json_out: Annotated[
        Path | None, typer.Option("--json", help="Write the refold-replay-1 JSON report here.")
    ] = None,
    csv_out: Annotated[
        Path | None, typer.Option("--csv", help="Write one CSV row per task and policy here.")
    ] = None,
    per_call: Annotated[bool, typer.Option(help="Include per-call token lists in the JSON.")] = True,
    no_validate: Annotated[
        bool, typer.Option("--no-validate", help="Skip the cache-simulator validation on base.")
    ] = False,
    no_prefix_estimate: NoPrefixEstimateOpt = False,
    wide: WideOpt = None,
    plot: PlotOpt = None,
) -> None:
    """Re-render every model call of recorded runs under several policies and compare them."""
    names = tuple(p.strip() for p in policy.split(",") if p.strip())
    if jobs < 1:
        raise PolicyError(f"--jobs must be at least 1, got {jobs}")
    settings = Settings(
        policies=names,
        stale=stale,
        tokenizer=tokenizer,
        cache=cache,
        price=price,
        prices_file=str(prices) if prices else None,
        kv_model=kv_model,
        budget=budget,
        mask_after=mask_after,
        protect=tuple(protect or ()),
        validate=not no_validate,
        prefix_estimate=not no_prefix_estimate,
        per_call=per_call or plot is not None,  # the plot draws every call
    )
    settings.check()
    for flag, target in (("--json", json_out), ("--csv", csv_out)):
        if target is not None:
            check_output(target, flag)
    check_plot_output(plot)
    files = input_runs(paths, [("--json", json_out), ("--csv", csv_out), ("--plot", plot)])
    err = Console(stderr=True)
    out = Console()
    start = time.perf_counter()
    jobs = max(1, min(jobs, len(files), os.cpu_count() or 1))  # what the pool runs (replay_paths caps it alike)
    per = len(settings.policies)
    with progress_ticks(err, "replay", len(files) * per, f"{len(files)} file(s) x {per} policies") as tick:

        def one_policy(r: TaskResult, name: str) -> None:  # in this process only: a long file's policies
            tick(1 / max(1, r.sessions), f"{Path(r.file).name} {name}")

        def done(r: TaskResult) -> None:
            # one file's agents are one result each: together they advance it by one file
            left = per - (len(r.policies) if jobs == 1 else 0)  # what ``policy`` did not count
            tick(left / max(1, r.sessions), Path(r.file).name)

        results = replay_paths(files, settings, jobs=jobs, on_result=done, on_policy=one_policy)
    seconds = time.perf_counter() - start
    report = build_report(results, settings, seconds=seconds)
    failed = [r for r in results if r.error is not None]
    if len(failed) < len(results):  # every file failed: an empty table says nothing the errors do not
        print_table(out, _title(report), COLUMNS, _rows(report), wide)
    failed_files = len({r.file.split("#", 1)[0] for r in failed})
    # what is measured and what simulated describes a table: none was printed when every file failed
    said = [report["simulated"]] if len(failed) < len(results) else []
    out.print(summary_line(len(files), failed_files, len(results), seconds, jobs), *said, highlight=False)
    for line in recorded_lines(report, settings.tokenizer):
        out.print(line, highlight=False)
    if json_out:
        saved = report if per_call else _without_per_call(report)
        write_output(json_out, json.dumps(saved, indent=1, sort_keys=False) + "\n")
    if csv_out:
        try:
            write_csv(results, csv_out, stale=settings.stale)
        except OSError as e:
            raise PolicyError(f"cannot write {csv_out}: {e.strerror or e}") from None
    if plot is not None and len(failed) == len(results):  # an empty chart with made-up axes said nothing either
        typer.echo(f"refold: --plot {plot} not written: no file was replayed", err=True)
    else:
        plot_output(err, plot, _title(report), lambda: replay_series(report))
    for r in failed:
        typer.echo(f"refold: failed: {r.file}: {r.error}", err=True)
    if failed:
        what = "session" if len(results) != len(files) else "file"
        typer.echo(f"refold: {len(failed)} of {plural(len(results), what)} failed", err=True)
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("replay")(replay)

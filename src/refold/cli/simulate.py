"""``refold simulate PATH...``: w agent sessions sharing one vLLM server, per policy (SIMULATED).
What it prints and writes is ``simulate_output``.

Exit codes: 0 done, 2 usage errors (RefoldError, printed as one line by the cli).
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from ..errors import PolicyError, RefoldError
from ..lab.cache import kv_spec
from ..lab.cache.kv import hybrid_block_size
from ..lab.cache.kv import state_blocks as state_blocks_for
from ..lab.replay import POLICIES, STALE_SOURCES
from ..lab.serversim import (
    GPUS,
    MODELS,
    STEP_MODELS,
    ServerConfig,
    SimResult,
    Trace,
    build_trace,
    capacity_blocks_for,
    check_fits,
    find_max_sessions,
    make_step_time,
    set_shared_prefixes,
    simulate,
)
from ..lab.serversim.steptime import gpu as gpu_spec
from ..loaders import load_all
from ..tokens import TOKENIZER_NAMES
from ._output import (
    NoPrefixEstimateOpt,
    PlotOpt,
    WideOpt,
    check_output,
    check_plot_output,
    input_runs,
    plot_output,
    plural,
    progress_bar,
    write_output,
)
from .simulate_output import json_report, print_maxima, print_results, simulate_series, uncalibrated

MAX_SESSIONS = 4096  # far past any one GPU server's concurrency
MAX_POOL_TOKENS = 1 << 27  # 134M tokens, the KV of several 8-GPU nodes: the pool is held block by block
MAX_GPU_GIB = 1_000_000.0


def _ints(text: str, flag: str) -> list[int]:
    try:
        out = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise PolicyError(f"{flag} takes comma-separated integers, got {text!r}") from None
    if not out or min(out) < 1:
        raise PolicyError(f"{flag} needs integers >= 1, got {text!r}")
    return sorted(set(out))


def _max_from_sweep(results: list[SimResult], ok: Any) -> int:
    best = 0
    for r in sorted(results, key=lambda r: r.sessions):
        if not ok(r):
            break
        best = r.sessions
    return best


def simulate_cmd(
    paths: Annotated[
        list[Path], typer.Argument(help="Trajectory files or folders (as refold replay reads).")
    ],
    policy: Annotated[
        str, typer.Option("--policy", help=f"Comma-separated policies: {', '.join(POLICIES)}.")
    ] = "base,refold-best",
    sessions: Annotated[
        str, typer.Option("--sessions", help="Comma-separated session counts w.")
    ] = "8,16,32,48",
    stale: Annotated[
        str, typer.Option(help=f"Where STALE marks come from: {', '.join(STALE_SOURCES)}.")
    ] = "recorded",
    tokenizer: Annotated[
        str, typer.Option(help="qwen3.6 (default), o200k, cl100k or chars4 (fast).")
    ] = "qwen3.6",
    kv_tokens: Annotated[
        int | None, typer.Option("--kv-tokens", help="KV pool size in tokens (else derived from the GPU).")
    ] = None,
    gpu_gib: Annotated[
        float | None, typer.Option("--gpu-gib", help="GPU memory in GiB (default: the --gpu's).")
    ] = None,
    model: Annotated[
        str, typer.Option(help=f"Model for KV sizing and the roofline: {', '.join(MODELS)}.")
    ] = ("qwen3.6-27b"),
    gpu: Annotated[str, typer.Option(help=f"GPU for the roofline and memory: {', '.join(GPUS)}.")] = "h100",
    step_model: Annotated[
        str, typer.Option("--step-model", help=f"Step-time model: {', '.join(STEP_MODELS)}.")
    ] = "roofline",
    block_size: Annotated[
        int | None,
        typer.Option(help="KV block size in tokens (default: 16, or vLLM's aligned size for hybrid models)."),
    ] = None,
    max_batched_tokens: Annotated[int, typer.Option(help="max_num_batched_tokens per step.")] = 8192,
    tool_delay: Annotated[float, typer.Option(help="Seconds between a reply and the next request.")] = 2.0,
    stagger: Annotated[float, typer.Option(help="Session i starts at i * stagger seconds.")] = 1.0,
    output_tokens: Annotated[
        int | None, typer.Option(help="Fixed output length (default: recorded completion tokens).")
    ] = None,
    wait_threshold: Annotated[
        float, typer.Option(help="Max w 'fits' while the mean queue wait is at most this (s).")
    ] = 1.0,
    find_max: Annotated[
        bool, typer.Option("--find-max", help="Bisect 1..max(--sessions) for the max w per policy.")
    ] = False,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the JSON report here.")] = None,
    no_prefix_estimate: NoPrefixEstimateOpt = False,
    wide: WideOpt = None,
    plot: PlotOpt = None,
) -> None:
    """Simulate w agent sessions sharing one vLLM server under each policy (SIMULATED)."""
    names = list(dict.fromkeys(p.strip() for p in policy.split(",") if p.strip()))  # each once, as replay does
    for p in names:
        if p not in POLICIES:
            raise PolicyError(f"unknown policy {p!r}; valid choices: {', '.join(POLICIES)}")
    if not names:
        raise PolicyError("no policy selected")
    ws = _ints(sessions, "--sessions")
    if max(ws) > MAX_SESSIONS:  # each session is replayed requests in one process: 100,000 ran for minutes silently
        raise PolicyError(f"--sessions: at most {MAX_SESSIONS:,} sessions on one server, got {max(ws):,}")
    if stale not in STALE_SOURCES:
        raise PolicyError(f"unknown --stale {stale!r}; valid choices: {', '.join(STALE_SOURCES)}")
    if tokenizer not in TOKENIZER_NAMES:
        raise PolicyError(f"unknown tokenizer {tokenizer!r}; valid choices: {', '.join(TOKENIZER_NAMES)}")
    if kv_tokens is not None and gpu_gib is not None:
        raise PolicyError("give --kv-tokens or --gpu-gib, not both")
    if output_tokens is not None and output_tokens < 1:
        raise PolicyError(f"--output-tokens must be >= 1, got {output_tokens}")
    if max_batched_tokens < 1:  # ServerConfig's own check names vLLM's setting, not this flag
        raise PolicyError(f"--max-batched-tokens must be >= 1, got {max_batched_tokens}")
    if block_size is not None and not 1 <= block_size <= MAX_POOL_TOKENS:
        raise PolicyError(f"--block-size must be between 1 and {MAX_POOL_TOKENS:,}, got {block_size}")
    for flag, value, positive in (("--tool-delay", tool_delay, False), ("--stagger", stagger, False),
                                  ("--wait-threshold", wait_threshold, False), ("--gpu-gib", gpu_gib, True)):
        if value is not None and not (math.isfinite(value) and (value > 0 if positive else value >= 0)):
            raise PolicyError(f"{flag} must be a finite number {'> 0' if positive else '>= 0'}, got {value}")
    if gpu_gib is not None and gpu_gib > MAX_GPU_GIB:  # 1e300 was a NaN traceback in the sizing
        raise PolicyError(f"--gpu-gib must be at most {MAX_GPU_GIB:,}, got {gpu_gib:g}")
    gpu_spec(gpu)
    step_time = make_step_time(step_model, model, gpu)
    try:
        kv_spec(model)
    except ValueError as e:
        raise PolicyError(str(e)) from None
    hybrid = hybrid_block_size(model)
    if block_size is None:
        block_size = hybrid or 16
    state = state_blocks_for(model, block_size)
    if kv_tokens is not None:
        if kv_tokens < block_size:
            raise PolicyError(f"--kv-tokens must be at least one block ({block_size}), got {kv_tokens}")
        capacity = kv_tokens // block_size
    else:
        capacity = capacity_blocks_for(
            model, gpu_gib if gpu_gib is not None else gpu_spec(gpu).memory_gib, block_size=block_size
        )
    if capacity * block_size > MAX_POOL_TOKENS:  # the pool is held block by block: 1e20 was a MemoryError
        raise PolicyError(
            f"a KV pool of {capacity * block_size:,} tokens is more than the simulator holds "
            f"(at most {MAX_POOL_TOKENS:,}); give a smaller --kv-tokens or --gpu-gib"
        )
    cfg = ServerConfig(
        capacity, block_size, max_batched_tokens, tool_delay=tool_delay, stagger=stagger, state_blocks=state
    )
    cfg.check()
    if json_out is not None:
        check_output(json_out, "--json")
    check_plot_output(plot)
    files = input_runs(paths, [("--json", json_out), ("--plot", plot)])
    err = Console(stderr=True)
    out = Console()
    start = time.perf_counter()
    histories = []
    with progress_bar(err) as progress:
        task = progress.add_task("loading", total=len(files))
        for f in files:  # one session per agent of a multi-agent file
            try:
                histories.extend(load_all(f))
            except RefoldError as e:
                raise PolicyError(str(e)) from None
            progress.advance(task)
    traces: dict[str, list[Trace]] = {}
    with progress_bar(err) as progress:
        task = progress.add_task("rendering", total=len(histories) * len(names))
        for name in names:
            progress.update(task, description=f"rendering {name}")
            traces[name] = []
            for h in histories:
                traces[name].append(
                    build_trace(
                        h,
                        name,
                        stale=stale,
                        tokenizer=tokenizer,
                        block_size=block_size,
                        output_tokens=output_tokens,
                        prompt_only_hashes=hybrid is not None,
                        prefix_estimate=not no_prefix_estimate,
                    )
                )
                progress.advance(task)
            set_shared_prefixes(traces[name], block_size)
            check_fits(traces[name], cfg)
    results: list[SimResult] = []
    extra: dict[str, dict[int, SimResult]] = {}
    maxima: dict[str, dict[str, int]] = {}

    def no_preempt(r: SimResult) -> bool:
        return r.preemptions == 0

    def wait_ok(r: SimResult) -> bool:
        return r.wait_mean <= wait_threshold

    with progress_bar(err) as progress:
        task = progress.add_task("simulating", total=len(names) * len(ws))
        for name in names:
            for w in ws:
                progress.update(task, description=f"simulating {name} w={w}")
                results.append(simulate(traces[name], w, cfg, step_time))
                progress.advance(task)
    for name in names:
        mine = [r for r in results if r.policy == name]
        maxima[name] = {
            "no_preemption": _max_from_sweep(mine, no_preempt),
            "wait": _max_from_sweep(mine, wait_ok),
        }
        if find_max:
            tr = traces[name]
            known = {r.sessions: r for r in mine}

            def run(w: int, tr: list[Trace] = tr, known: dict[int, SimResult] = known) -> SimResult:
                if w not in known:
                    known[w] = simulate(tr, w, cfg, step_time)
                return known[w]

            hi = max(ws)
            maxima[name] = {
                "no_preemption": find_max_sessions(run, no_preempt, hi)[0],
                "wait": find_max_sessions(run, wait_ok, hi)[0],
            }
            extra[name] = known
    seconds = time.perf_counter() - start
    kv_gib = capacity * block_size * kv_spec(model).bytes_per_token() / (1 << 30)
    title = (
        f"refold simulate (SIMULATED): {plural(len(files), 'file')} ({plural(len(histories), 'session')}), KV pool {capacity * block_size:,} tokens "
        f"({kv_gib:.1f} GiB {model}), step time {step_model}"
        + (f" {model} on {gpu}" if step_model == "roofline" else "")
        + f", tool delay {tool_delay:g}s, stale {stale}, tokenizer {tokenizer}"
    )
    print_results(out, title, results, wide)
    how = "bisection over 1.." + str(max(ws)) if find_max else "the largest tested w that meets it"
    print_maxima(out, maxima, wait_threshold, how, (1 if find_max else min(ws), max(ws)))
    out.print(
        f"{plural(len(files), 'file')} ({plural(len(histories), 'session')}) in {seconds:.1f} s. "
        "Every figure is SIMULATED (no GPU)."
        + (f" w above {len(histories)} replays the runs again: session i is run i mod {len(histories)} "
           "(copies share no cache past the prefix all runs share)." if max(ws) > len(histories) else ""),
        highlight=False,
    )
    assumed = uncalibrated(model, hybrid is not None, step_model)
    out.print("Uncalibrated: " + "; ".join(assumed), highlight=False)
    prefixes = {t.source: t.prefix_tokens for t in traces[names[0]] if t.prefix_tokens}
    if prefixes:
        out.print(
            f"{plural(len(prefixes), 'session')} (Claude Code / Codex) start every request with an ESTIMATED prefix "
            f"standing for the system prompt and tool schemas their logs leave out ({min(prefixes.values()):,}-"
            f"{max(prefixes.values()):,} tokens, fitted on the recorded usage as refold replay does; not shared "
            "between sessions); --no-prefix-estimate leaves it out.",
            highlight=False,
        )
    partial = {str(h.meta.get("path") or h.source): [str(x) for x in h.meta["partial"]]
               for h in histories if isinstance(h.meta.get("partial"), list)}  # e.g. a rollout without its head
    for f, why in partial.items():
        out.print(f"Partial file: {f}: {'; '.join(why)}.", highlight=False)
    if json_out is not None:
        settings = {
            "policies": names,
            "sessions": ws,
            "stale": stale,
            "tokenizer": tokenizer,
            "model": model,
            "gpu": gpu,
            "step_model": step_model,
            "capacity_blocks": capacity,
            "block_size": block_size,
            "state_blocks_per_sequence": state,
            "hybrid_prompt_only_hits": hybrid is not None,
            "kv_tokens": capacity * block_size,
            "max_num_batched_tokens": max_batched_tokens,
            "tool_delay": tool_delay,
            "stagger": stagger,
            "output_tokens": output_tokens,
            "wait_threshold": wait_threshold,
        }
        if no_prefix_estimate:
            settings["prefix_estimate"] = False
        report = json_report(files, settings, len(histories), assumed, results, maxima, extra)
        if prefixes:
            report["unrecorded_prefix"] = {"estimated": True, "tokens_per_call": prefixes}
        if partial:
            report["partial"] = partial
        write_output(json_out, json.dumps(report, indent=1) + "\n")
    plot_output(err, plot, title, lambda: simulate_series(traces, results))


def register(app: typer.Typer) -> None:
    app.command("simulate")(simulate_cmd)

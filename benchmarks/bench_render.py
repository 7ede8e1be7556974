"""Per-call render time and memory of the renderer: recorded runs and synthetic 2,000/10,000-step runs.

Every history is rendered call by call (t = 0..n) with one fresh ``Renderer`` per history and
config, as an agent loop does, under three configs: ``Config()``, ``Config.parse(mask_after=5)``
and the mini wrapper's (span and ledger prompts, budget line); ``--configs self-gc`` adds the
self-gc preset (the ledger view at every call). Reported per config and history:
median, p99 and max ms per call; the mean of the last 5% of calls over the mean of the first 5%;
and memory: bytes the renderer allocated and still holds after the last call (tracemalloc) over
the bytes the History holds when built alone. Synthetic (simulated) runs come from
``benchmarks/synthetic.py``: reads with overlapping ranges, edits, greps, tests, STALE marks,
spans, ledger ops and restores recorded as refold's mini wrapper stores them.

    python benchmarks/bench_render.py [PATH ...] [--quick] [--repeat 5] [--first-render N] [--out FILE]

PATH: folders or files of recorded runs (default: the runs in tests/data and the package's demo
run). ``--quick``: 200/1,000-step synthetic runs and one pass (a smoke test; writes nothing unless
``--out``). ``--first-render N``: also time what a session's first request pays for an N-step
history (a restarted proxy, a resumed run): building the History from its JSON, then one render
of its last call by a fresh Renderer (the cost rule replays every call before it), and the same
call with nothing to replay (fixed boundary, no budget line: the work any first render does once).
Otherwise the report goes to stdout and benchmarks/results/render.txt.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from functools import partial
from importlib import resources
from pathlib import Path

from refold.config import Config
from refold.history import History
from refold.loaders import load, load_all

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from render_passes import (  # noqa: E402
    CLOCKS,
    fastest,
    first_render,
    from_wire,
    held,
    opcodes,
    renderer_bytes,
    timed,
    use_clock,
)
from render_rows import (  # noqa: E402
    TARGET_MEDIAN_MS,
    TARGET_MEMORY,
    TARGET_P99_MS,
    TARGET_RATIO,
    Row,
    describe_opcodes,
    edges,
)
from synthetic import mix, synthetic_messages, text_chars  # noqa: E402

TRACE_COST = 8  # a pass under tracemalloc takes about this many times a timed pass (6-7x on main's renderer)

CONFIGS: dict[str, tuple[str, Config]] = {
    "default": ("Config()", Config()),
    "mask5": ("Config.parse(mask_after=5)", Config.parse(mask_after=5)),
    "mini": (
        'Config.parse(spans={"prompt": True}, ledger={"prompt": True, "budget_tokens": 128000})',
        Config.parse(spans={"prompt": True}, ledger={"prompt": True, "budget_tokens": 128000}),
    ),
    "self-gc": ('Config.parse(preset="self-gc")', Config.parse(preset="self-gc")),  # the ledger view at every call
}
SIZES, QUICK_SIZES = (2000, 10000), (200, 1000)

def runs_in(paths: list[str]) -> list[Path]:
    if not paths:
        data = HERE.parent / "tests" / "data"
        demo = Path(str(resources.files("refold") / "data" / "django__django-11477.traj.json.gz"))
        return [*sorted(p for p in data.iterdir() if ".traj" in p.name), demo]
    out: list[Path] = []
    for p in map(Path, paths):
        out += sorted(q for q in p.rglob("*") if ".traj" in q.name and q.is_file()) if p.is_dir() else [p]
    return out


def describe_mix(counts: dict[str, int]) -> str:
    shell = ", ".join(
        f"{k} {counts.get(k, 0)}" for k in ("read", "edit", "grep", "test", "ls", "git", "python")
    )

    def pair(name: str) -> str:
        return f"{name} {counts.get(f'{name} ok', 0)}/{counts.get(f'{name} refused', 0)}"

    ctx = ", ".join(pair(n) for n in ("begin_span", "fold_span", "fold", "drop", "restore"))
    return f"{shell}; ok/refused: {ctx}; replies with STALE marks {counts.get('stale marks', 0)}"


def git_rev() -> str:
    try:
        out = subprocess.run(
            ["git", "-C", str(HERE), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        return out.stdout.strip() or "?"
    except (OSError, subprocess.SubprocessError):
        return "?"


def _error(e: Exception) -> str:
    text = str(e).splitlines()[0] if str(e) else ""
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("paths", nargs="*", help="folders or files of recorded runs")
    ap.add_argument(
        "--quick", action="store_true", help="200/1,000-step synthetic runs, one pass, no results file"
    )
    ap.add_argument(
        "--repeat",
        type=int,
        default=None,
        help="passes over each recorded run, fastest call kept (default 5; 1 with --quick)",
    )
    ap.add_argument(
        "--sizes",
        default=None,
        help="steps of the synthetic runs, comma-separated (default 2000,10000; 200,1000 with --quick; '' for none)",
    )
    ap.add_argument("--seed", type=int, default=0, help="seed of the synthetic runs")
    ap.add_argument(
        "--configs",
        default="default,mask5,mini",
        help=f"configs to run, comma-separated (of {', '.join(CONFIGS)})",
    )
    ap.add_argument(
        "--memory-budget",
        type=float,
        default=90.0,
        help=f"skip a memory pass expected to take longer than this many seconds ({TRACE_COST}x its timed pass); 0: never skip",
    )
    ap.add_argument(
        "--clock",
        choices=sorted(CLOCKS),
        default="cpu",
        help="cpu: this thread's CPU time per call, not inflated by other load (default); wall: perf_counter",
    )
    ap.add_argument(
        "--first-render",
        type=int,
        default=0,
        metavar="N",
        help="also time building an N-step synthetic History and its first render (a session's first request); 0: skip",
    )
    ap.add_argument(
        "--no-opcodes",
        action="store_true",
        help="skip counting the Python opcodes per call of the recorded runs and the largest synthetic run (untimed traced passes)",
    )
    ap.add_argument(
        "--out",
        type=Path,
        default=None,
        help="results file (default benchmarks/results/render.txt; none with --quick)",
    )
    args = ap.parse_args(argv)
    repeat = args.repeat or (1 if args.quick else 5)
    if args.sizes is not None:
        try:
            sizes = tuple(int(x) for x in args.sizes.split(",") if x.strip())
        except ValueError:
            sizes = (0,)
        if any(n < 1 for n in sizes):
            ap.error(f"--sizes: '{args.sizes}' is not a comma-separated list of step counts >= 1")
    else:
        sizes = QUICK_SIZES if args.quick else SIZES
    configs = {
        k: CONFIGS[k]
        for k in dict.fromkeys(x.strip() for x in args.configs.split(",") if x.strip())
        if k in CONFIGS
    }
    unknown = [x for x in args.configs.split(",") if x.strip() and x.strip() not in CONFIGS]
    if unknown or not configs:
        ap.error(
            f"--configs: unknown '{','.join(unknown) or args.configs}'; choose from {', '.join(CONFIGS)}"
        )
    out_path = args.out or (None if args.quick else HERE / "results" / "render.txt")
    started = time.perf_counter()
    overhead = use_clock(args.clock)

    def progress(msg: str) -> None:
        print(f"[{time.perf_counter() - started:6.1f}s] {msg}", file=sys.stderr, flush=True)

    recorded: list[tuple[Path, History, int]] = []
    skipped: list[str] = []
    for f in runs_in(args.paths):
        try:  # a multi-agent file (CodeR) is one session per agent, each measured alone
            sessions = [h.source or str(f) for h in load_all(f)]
        except Exception as e:  # a bad file costs one line, the rest still runs
            skipped.append(f"{f}: {_error(e)}")
            continue
        for source in sessions:
            try:
                h, size = held(partial(load, source))
            except Exception as e:
                skipped.append(f"{source}: {_error(e)}")
                continue
            recorded.append((Path(source), h, size))
    recorded_chars = sum(
        len(str(m.get("content") or ""))
        for _, h, _ in recorded
        for m in [*h.prefix, *(x for s in h.steps for x in (s.reply, *s.observations))]
    )
    synthetic: list[tuple[int, History, int, dict[str, int], int]] = []
    for n in sizes:
        messages = synthetic_messages(n, args.seed)
        counts, chars = dict(mix(messages)), text_chars(messages)
        wire = json.dumps(messages)
        del messages
        # built from the JSON text, as a loader would, so that the History's own strings are counted
        h, size = held(partial(from_wire, wire, f"synthetic-{n}"))
        synthetic.append((n, h, size, counts, chars))
        progress(f"built synthetic-{n}: {len(h)} steps, History holds {size / 1e6:.1f} MB")

    # lazy imports and regex caches load once, before anything is measured
    warm = History.from_messages(synthetic_messages(120, args.seed + 1))
    for _, config in configs.values():
        timed(warm, config)

    def memory_pass(h: History, config: Config, ms: list[float]) -> int | None:
        expected = TRACE_COST * sum(ms) / 1000
        if args.memory_budget and expected > args.memory_budget:
            return None
        return renderer_bytes(h, config)

    rows: list[Row] = []
    errors: list[str] = []
    first_lines = first_render(args.first_render, args.seed, configs) if args.first_render > 0 else []
    if first_lines:
        progress(f"first render of synthetic-{args.first_render} timed")
    for key, (_, config) in configs.items():
        if recorded:
            row = Row(key, f"recorded ({len(recorded)})", [], [], [], 0, 0, recorded=True)
            for f, h, size in recorded:
                try:
                    ms, listed = fastest(h, config, repeat)
                    rb = renderer_bytes(h, config)
                    ops = [] if args.no_opcodes else opcodes(h, config)
                except Exception as e:
                    errors.append(f"{key} {f.name}: {_error(e)}")
                    continue
                a, b = edges(ms)
                row.ms += ms
                row.listed += listed
                row.opcodes += ops
                row.first += a
                row.last += b
                row.renderer_bytes = (row.renderer_bytes or 0) + rb
                row.history_bytes += size
            if row.ms:
                rows.append(row)
            progress(
                f"{key} recorded: median {statistics.median(row.ms):.4f} ms"
                if row.ms
                else f"{key} recorded: failed"
            )
        for n, h, size, _, _ in synthetic:
            try:
                ms, listed = timed(h, config)
                progress(
                    f"{key} synthetic-{n} timed: {sum(ms) / 1000:.1f} s, median {statistics.median(ms):.3f} ms"
                )
                held_bytes = memory_pass(h, config, ms)
                # the p99 and ratio targets in a unit the box's load does not change
                ops = opcodes(h, config) if n == max(sizes) and not args.no_opcodes else []
            except Exception as e:
                errors.append(f"{key} synthetic-{n}: {_error(e)}")
                continue
            rows.append(
                Row(key, f"synthetic-{n}", ms, *edges(ms), held_bytes, size, largest=n == max(sizes), listed=listed, opcodes=ops)
            )

    lines: list[str] = []
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines.append(
        f"refold render benchmark  {now}  python {platform.python_version()} {platform.machine()}  git {git_rev()}"
    )
    shown_paths = " ".join(args.paths) or "(default: tests/data and the demo run)"
    lines.append(
        f"command: bench_render.py {shown_paths}{' --quick' if args.quick else ''} --repeat {repeat} "
        f"--sizes {','.join(map(str, sizes))} --configs {','.join(configs)} --seed {args.seed} --memory-budget {args.memory_budget:g} --clock {args.clock}"
        + (f" --first-render {args.first_render}" if args.first_render > 0 else "")
        + (" --no-opcodes" if args.no_opcodes else "")
    )
    lines.append(
        f"clock: {args.clock} ({'thread CPU time' if args.clock == 'cpu' else 'wall time'}; {overhead * 1e6:.2f} us of "
        f"clock reading subtracted per call); load average at the end "
        f"{', '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} cores"
    )
    lines.append(
        "Each history is rendered call by call, t = 0..n, by one fresh Renderer per history and config (gc off while "
        f"timing, the summary memo emptied before each pass); recorded runs: fastest of {repeat} pass(es) per call, pooled; synthetic runs: one pass."
    )
    lines.append(
        "listed = the render plus reading Rendered.messages and .origins (joined on first read: what a caller "
        "that reads them pays); the targets apply to the render."
    )
    lines.append(
        "memory = bytes the renderer allocated and still holds after the last call / bytes the History holds when "
        "built alone (tracemalloc, in a separate untimed pass)."
    )
    lines.append("")
    lines.append(
        f"recorded: {len(recorded)} runs, {sum(len(h) for _, h, _ in recorded)} steps, {recorded_chars / 1e6:.1f} MB of text"
    )
    for n, h, size, counts, chars in synthetic:
        lines.append(
            f"synthetic-{n} (simulated, seed {args.seed}): {len(h)} steps, {chars / 1e6:.1f} MB of text, History holds {size / 1e6:.1f} MB"
        )
        lines.append(f"    {describe_mix(counts)}")
    lines += [f"skipped {s}" for s in skipped]
    lines.append("configs:")
    lines += [f"    {key:8} {expr}" for key, (expr, _) in configs.items()]
    lines.append("")
    lines.append(
        f"{'config':8} {'history':16} {'calls':>6} {'median ms':>10} {'p99 ms':>8} {'max ms':>8} {'last/first 5%':>14} "
        f"{'memory':>7}  {'renderer / history MB':>21}  {'listed median / p99 ms':>22}  misses"
    )
    for r in rows:
        mem = f"{r.memory:6.2f}x" if r.memory is not None else f"{'-':>7}"
        mb = f"{r.renderer_bytes / 1e6:9.1f}" if r.renderer_bytes is not None else f"{'skipped':>9}"
        lines.append(
            f"{r.config:8} {r.history:16} {len(r.ms):6d} {statistics.median(r.ms):10.4f} {r.p(0.99):8.3f} {max(r.ms):8.2f} "
            f"{r.ratio:14.2f} {mem}  {mb} / {r.history_bytes / 1e6:9.1f}  "
            f"{statistics.median(r.listed):11.4f} / {r.p(0.99, listed=True):8.3f}  {', '.join(r.misses()) or '-'}"
        )
    lines.append("")
    largest = f"synthetic-{max(sizes)}" if sizes else "the largest synthetic run"
    lines.append(
        f"targets: median <= {TARGET_MEDIAN_MS} ms on recorded runs; at {largest} p99 <= {TARGET_P99_MS:g} ms and "
        f"last/first 5% <= {TARGET_RATIO:g}; memory <= {TARGET_MEMORY:g}x everywhere"
    )
    counted = [r for r in rows if r.opcodes]
    if counted:
        lines.append(
            "opcodes per call (Python opcodes a call executes, sys.settrace, untimed pass; independent of the load): "
            + "; ".join(describe_opcodes(r) for r in counted)
        )
    missed = [f"{r.config}/{r.history}: {', '.join(r.misses())}" for r in rows if r.misses()]
    lines.append(f"missed: {'; '.join(missed)}" if missed else "all targets met")
    if any(r.renderer_bytes is None for r in rows):
        lines.append(
            f"memory skipped where a traced pass would take over {args.memory_budget:g} s (--memory-budget 0 measures all)"
        )
    if first_lines:
        lines.append("")
        lines += first_lines
        lines.append("first render: CPU seconds of this thread, gc on, one pass from cold caches (target: well under 1 s at 5,000 steps)")
    lines += [f"error {e}" for e in errors]
    lines.append(f"wall time {time.perf_counter() - started:.0f} s")
    report = "\n".join(lines) + "\n"
    print(report, end="")
    if out_path is not None:
        out_path.parent.mkdir(parents=True, exist_ok=True)
        out_path.write_text(report)
        progress(f"wrote {out_path}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())

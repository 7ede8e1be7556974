"""``refold demo``: replay the real recorded run shipped in the package, base vs refold, call by call."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from ..errors import PolicyError, RefoldError
from ..lab.cache import CACHE_NAMES
from ..loaders import load
from ._output import check_output

DEMO_FILE = "django__django-11477.traj.json.gz"

COLUMNS = (  # (policy, STALE source, column label)
    ("base", "recorded", "base"),
    ("default", "recorded", "default"),
    ("refold", "recorded", "refold"),
    ("refold-best", "recorded", "refold-best"),
    ("refold", "hindsight-conservative", "refold cons*"),
    ("refold", "hindsight-aggressive", "refold aggr*"),
)


def demo_path() -> Path:
    return Path(str(resources.files("refold") / "data" / DEMO_FILE))


def _policy_runs(path: Path, tokenizer: str, cache: str) -> dict[str, dict[str, Any]]:
    from ..lab.replay import Settings, TaskResult
    from ..lab.replay.runner import replay_history

    history = load(path)
    out: dict[str, dict[str, Any]] = {}
    for stale in dict.fromkeys(s for _, s, _ in COLUMNS):
        names = tuple(dict.fromkeys(p for p, s, _ in COLUMNS if s == stale))
        settings = Settings(policies=names, stale=stale, tokenizer=tokenizer, cache=cache, validate=False)
        result = TaskResult(file=str(path))
        replay_history(history, settings, result)
        for p, s, label in COLUMNS:
            if s == stale:
                out[label] = result.policies[p]
    return {label: out[label] for _, _, label in COLUMNS}


def demo(
    output: Annotated[Path, typer.Option("--output", "-o", help="Where to write the HTML report.")] = Path(
        "refold-demo.html"
    ),
    tokenizer: Annotated[str, typer.Option(help="qwen3.6, o200k, cl100k or chars4.")] = "qwen3.6",
    cache: Annotated[str, typer.Option(help=f"Prefix-cache model: {', '.join(CACHE_NAMES)}.")] = "vllm",
    no_report: Annotated[bool, typer.Option("--no-report", help="Skip writing the HTML report.")] = False,
) -> None:
    """Replay a real recorded agent run (shipped in the package): base vs refold, per call and in total."""
    from ..lab.replay import Settings

    Settings(policies=("base",), tokenizer=tokenizer, cache=cache).check()  # usage errors first
    if not no_report:
        try:
            check_output(output, "--output")
        except PolicyError as e:  # a first run from a read-only folder: say how to go on
            raise PolicyError(f"{e}; write the report elsewhere with -o FILE, or skip it with --no-report") from None
    console = Console()
    path = demo_path()
    history = load(path)
    console.print(
        f"[bold]refold demo[/]: {history.meta.get('instance_id') or path.name}, a real run of mini-swe-agent 1.15 "
        f"with Gemini 3 Pro on SWE-bench Verified ({len(history)} model calls; attribution: refold/data/ATTRIBUTION.md)"
    )
    shared = "none (no prefix cache)" if cache == "none" else f"{cache} prefix cache, [italic]simulated[/]"
    console.print(f"Prompt tokens per model call, {tokenizer} tokenizer. Cached share: {shared}.")
    runs = _policy_runs(path, tokenizer, cache)
    table = Table(show_edge=False)
    table.add_column("call", justify="right")
    for label in runs:
        table.add_column(label, justify="right")
    per_call = {label: m["per_call"]["prompt_tokens"] for label, m in runs.items()}
    for i in range(len(history)):
        table.add_row(str(i + 1), *(f"{per_call[label][i]:,}" for label in runs))
    base_total = runs["base"]["prompt_tokens"]
    table.add_section()
    table.add_row("total", *(f"{m['prompt_tokens']:,}" for m in runs.values()))
    table.add_row("vs base", *(_delta(m["prompt_tokens"], base_total) for m in runs.values()))
    table.add_row("cached", *(f"{m['cached_tokens'] / max(1, m['prompt_tokens']):.0%}" for m in runs.values()))
    table.add_row("peak", *(f"{m['peak_prompt_tokens']:,}" for m in runs.values()))
    table.add_row("render ms", *(f"{m['render_ms_median']:.3f}" for m in runs.values()))
    console.print(table)
    console.print(
        "base: the full history as recorded. default: refold's defaults (reversible masking of old outputs "
        "and reasoning, a boundary that moves only when the move pays under the cache profile).\n"
        "refold: the seed's policy (k=3, dedup + fold + chunk) with the "
        "run's own STALE lines; this agent never saw the protocol, so only dedup acts.\n"
        "refold-best: refold plus reversible masking of old outputs behind the boundary (restorable notes).\n"
        "refold cons* / aggr*: refold with STALE marks estimated in hindsight from what later turns used, "
        "conservative and aggressive ([bold]simulated[/]: what an agent following the protocol might mark)."
    )
    if not no_report:
        try:
            from ..lab.viewer import build_report
        except ImportError as e:  # pragma: no cover - the viewer ships with the package
            raise RefoldError(f"the viewer is not available: {e}") from None
        page = build_report(history, title=f"refold demo: {path.name}", tokenizer=tokenizer)
        try:
            output.write_text(page, encoding="utf-8")
        except OSError as e:
            raise RefoldError(f"{output}: cannot write the report ({e.strerror or e})") from None
        console.print(f"Wrote {output} (open it in a browser; it works offline).")
    console.print(  # what a new user tries next: their own sessions
        "Your own runs: refold replay ~/.claude/projects (Claude Code), ~/.codex/sessions (Codex) or a folder "
        "of mini-swe-agent / SWE-agent trajectories; refold view FILE for one of them.",
        highlight=False,
    )


def _delta(value: int, base: int) -> str:
    return "-" if not base else f"{(value - base) / base:+.1%}"


def register(app: typer.Typer) -> None:
    app.command("demo")(demo)

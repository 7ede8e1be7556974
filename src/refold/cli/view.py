"""``refold view RUN -o report.html``: one offline HTML file to scrub through a run's model calls."""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ..errors import PolicyError, RefoldError
from ..lab.replay import POLICIES, STALE_SOURCES, collect_paths, half_written
from ..lab.replay.settings import check_policy_options
from ..lab.viewer import MECHANISMS, write_report
from ..loaders import split_source
from ._output import ProtectOpt, check_apart, check_output


@contextmanager
def _progress(run: Path) -> Iterator[Callable[[int, int, str], None]]:
    """Say what is happening while the report builds (2-11 s on a real run): a bar on a terminal,
    a few plain lines on stderr otherwise (logs, pipes)."""
    err = Console(file=sys.stderr)
    if err.is_terminal:
        with Progress(
            TextColumn("view"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.description}"),
            console=err,
            transient=True,
        ) as bar:
            task = bar.add_task(f"loading {run.name}", total=None)

            def tick(done: int, total: int, what: str) -> None:
                bar.update(task, completed=done, total=total, description=what)

            yield tick
        return
    # nothing before the first rendering is done: a file that fails to load or render leaves
    # its one-line error alone on stderr
    said: set[int] = set()

    def line(done: int, total: int, what: str) -> None:
        quarter = 4 * done // max(1, total)  # at most five lines: the first, 1/4, 1/2, 3/4, all
        if done == 0 or quarter in said:
            return
        if not said:
            print(f"refold view: {run} loaded, {total} renderings to build", file=sys.stderr, flush=True)
        said.add(quarter)
        if done >= total:
            print(
                f"refold view: {total}/{total} renderings done, writing the page", file=sys.stderr, flush=True
            )
        else:
            print(f"refold view: rendering {done + 1}/{total} ({what})", file=sys.stderr, flush=True)

    yield line


def view(
    run: Annotated[
        Path,
        typer.Argument(
            help="A trajectory file (mini-swe-agent 1.x/2.x, SWE-agent .traj, Claude Code session .jsonl, Codex rollout-*.jsonl, refold runs, .gz); "
            "FILE#main, FILE#compact-1, FILE#part2 or FILE#Agent for one session of a file holding several."
        ),
    ],
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="Where to write the HTML (default: RUN name + .html)."),
    ] = None,
    policy: Annotated[
        str,
        typer.Option(
            "--policy",
            help=f"Comma-separated policies to precompute: {', '.join(POLICIES)} (default: all; base is always added).",
        ),
    ] = ",".join(POLICIES),
    mechanisms: Annotated[
        bool,
        typer.Option(help="Also precompute refold with each combination of dedup, fold, chunk, reversible."),
    ] = True,
    stale: Annotated[
        str,
        typer.Option(
            help=f"Where STALE marks come from: {', '.join(STALE_SOURCES)} (all but recorded are simulated)."
        ),
    ] = "recorded",
    tokenizer: Annotated[str, typer.Option(help="qwen3.6 (default), o200k, cl100k or chars4.")] = "qwen3.6",
    budget: Annotated[int, typer.Option(help="Context budget of the compact policies (tokens).")] = 32_768,
    mask_after: Annotated[
        int | None, typer.Option(help="refold-best's mask_after (default: the replay sweep's choice).")
    ] = None,
    protect: ProtectOpt = None,
    title: Annotated[str, typer.Option(help="Page title (default: the instance id or file name).")] = "",
) -> None:
    """Write a single offline HTML report: history vs prompt at every call, charts, mechanism switches."""
    names = [p.strip() for p in policy.split(",") if p.strip()]
    if not names:
        raise PolicyError("no policy selected")
    check_policy_options(budget, mask_after, protect or ())
    file, agent = split_source(run)  # FILE#Agent: one agent of a multi-agent file
    if not Path(file).exists():
        raise PolicyError(f"no such file: {run}")
    if Path(file).is_dir():
        inside = collect_paths([file])
        pick = f" such as {inside[0]}" if inside else " (it holds none)"
        raise PolicyError(f"{run} is a folder; refold view takes one trajectory file{pick} (refold replay takes folders)")
    for note in half_written([file]):
        typer.echo(f"refold: note: {note}", err=True)
    # an agent's name is any text ('Man/ager', '../x'): only safe characters go into the file name
    safe = re.sub(r"[^A-Za-z0-9_-]", "_", agent) if agent else ""
    stem = Path(file).name.removesuffix(".gz").removesuffix(".jsonl").removesuffix(".json") + (f".{safe}" if agent else "")
    out = output or Path(stem + ".html")
    if out.is_dir():
        raise PolicyError(f"--output {out} is a folder; give a file name such as report.html")
    check_apart([str(run)], [("--output", out)])
    check_output(out, "--output")
    start = time.perf_counter()
    try:
        with _progress(run) as tick:
            written = write_report(
                run,
                out,
                variants=[n for n in names if n != MECHANISMS],
                title=title,
                tokenizer=tokenizer,
                stale=stale,
                mechanisms=mechanisms or MECHANISMS in names,
                budget=budget,
                mask_after=mask_after,
                protect=tuple(protect or ()),
                progress=tick,
            )
    except RefoldError:
        raise
    except Exception as e:  # noqa: BLE001 - a malformed file the loader let through: name it, no traceback
        raise RefoldError(f"{run}: cannot render this trajectory ({type(e).__name__}: {e})") from None
    size = written.stat().st_size
    typer.echo(
        f"wrote {written} ({size / 1024:,.0f} KiB, {time.perf_counter() - start:.1f} s); open it in any browser, it works offline"
    )


def register(app: typer.Typer) -> None:
    app.command("view")(view)

"""What the subcommands share: options, usage checks that run before any long work (outputs
writable, inputs found), progress on stderr and the tables they print."""

from __future__ import annotations

import io
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer
from rich import box
from rich.console import Console
from rich.measure import Measurement
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ..errors import PolicyError
from ._plot import Series, check_plot, write_plot

WideOpt = Annotated[
    bool | None,
    typer.Option(
        "--wide/--compact",
        help="Every column, or the 80-column layout (default: every column if it fits the terminal).",
        show_default=False,
    ),
]
PlotOpt = Annotated[
    Path | None,
    typer.Option(help="Write a chart (.png or .svg): per-call prompt size, cumulative tokens, cached vs recomputed."),
]
NoPrefixEstimateOpt = Annotated[
    bool,
    typer.Option(
        "--no-prefix-estimate",
        help="Claude Code / Codex logs: count the messages only, without the ESTIMATED system prompt and tool schemas they leave out.",
    ),
]
"""The ``--wide/--compact``, ``--plot`` and ``--no-prefix-estimate`` options ``replay`` and ``simulate`` share."""
ProtectOpt = Annotated[
    list[str] | None,
    typer.Option(
        help="Never hide outputs of these commands in refold's policies (repeatable): 'tool:NAME', 'path:GLOB' or a command glob."
    ),
]
"""``--protect`` of ``replay`` and ``view``."""


def check_output(path: Path, flag: str) -> None:
    """Fail early (a usage error) when ``path`` cannot be written, before any long work starts."""
    if str(path) == "-":  # the usual name of standard output: it was written to a file named '-'
        raise PolicyError(f"{flag} -: writing to standard output is not supported; give a file name")
    if path.is_dir():
        raise PolicyError(f"{flag} {path} is a folder; give a file name")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise PolicyError(f"cannot write {path}: folder {parent} does not exist")
    if not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise PolicyError(f"cannot write {path}: permission denied")
    existed = path.exists()
    try:  # access() says yes to root everywhere (e.g. /proc): try to open it for writing
        with path.open("a", encoding="utf-8"):
            pass
    except OSError as e:
        raise PolicyError(f"cannot write {path}: {e.strerror or e}") from None
    if not existed:
        path.unlink(missing_ok=True)


def write_output(path: Path, text: str) -> None:
    """Write ``text`` to ``path``; an OSError becomes one usage-error line."""
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as e:
        raise PolicyError(f"cannot write {path}: {e.strerror or e}") from None


Tick = Callable[[float, str], None]
"""Advance a long job by some units of work, naming what was just done."""


@contextmanager
def progress_ticks(console: Console, label: str, total: float, unit: str) -> Iterator[Tick]:
    """A long job's progress on stderr: the bar on a terminal; elsewhere (logs, pipes) a line at
    each quarter, so a job of minutes is not silent. ``unit`` says what ``total`` counts."""
    if console.is_terminal:
        with progress_bar(console, label) as bar:
            task = bar.add_task("", total=total)
            yield lambda n, what: bar.update(task, advance=n, description=what)
        return
    done, said = 0.0, 0

    def tick(n: float, what: str) -> None:
        nonlocal done, said
        done += n
        quarter = min(4, int(4 * done / max(total, 1e-9) + 1e-9))
        if quarter > said:  # the share done, not the quarter crossed (1 of 3 files said "25%")
            said = quarter
            share = min(100, int(100 * done / max(total, 1e-9) + 1e-9))
            print(f"refold {label}: {share}% of {unit} done ({what})", file=sys.stderr, flush=True)

    yield tick


def progress_bar(console: Console, label: str | None = None) -> Progress:
    """The bar every long job shows on stderr, gone when it is done: ``label`` (fixed) or the
    task's description first, then the bar, done/total and the time so far (and, after a fixed
    label, the description: e.g. the file being read)."""
    head = [TextColumn(label)] if label else [TextColumn("{task.description}")]
    tail = [TextColumn("{task.description}")] if label else []
    return Progress(*head, BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), *tail, console=console, transient=True)


def check_apart(inputs: list[str], outputs: list[tuple[str, Path | None]]) -> None:
    """No output overwrites an input run or another output (a report written over the run it
    reports on would lose the run)."""
    from ..loaders import split_source

    runs = {Path(split_source(f)[0]).resolve(): f for f in inputs}
    seen: dict[Path, str] = {}
    for flag, path in outputs:
        if path is None:
            continue
        where = path.resolve()
        if where in runs:
            raise PolicyError(f"{flag} {path} is the input run {runs[where]}; give the output another name")
        if where in seen:
            raise PolicyError(f"{seen[where]} and {flag} both name {path}; give each output its own file")
        seen[where] = flag


def input_runs(paths: Sequence[Path], outputs: list[tuple[str, Path | None]]) -> list[str]:
    """The trajectory files under ``paths`` (folders walked), none of them an output; what was
    left out, repeated or half written is said on stderr, and no file at all is a usage error."""
    from ..lab.replay import collect_paths, half_written, left_out_note, same_runs

    left_out: dict[str, int] = {}
    files = collect_paths([str(p) for p in paths], left_out)
    if not files:
        why = f" ({left_out_note(left_out)})" if left_out else ""
        raise PolicyError(f"no trajectory files found in the given paths{why}")
    check_apart(files, outputs)
    for copy, first in same_runs(files):
        typer.echo(f"refold: note: {copy} holds the same run as {first} (identical content); both are counted", err=True)
    if left_out:
        typer.echo(f"refold: note: {left_out_note(left_out)}", err=True)
    for note in half_written(files):
        typer.echo(f"refold: note: {note}", err=True)
    return files


def check_plot_output(plot: Path | None) -> None:
    """``--plot FILE``: writable, a known format, matplotlib installed (before any long work)."""
    if plot is not None:
        check_output(plot, "--plot")
        check_plot(plot)


def plot_output(err: Console, plot: Path | None, title: str, series: Callable[[], Series]) -> None:
    """Draw ``--plot FILE`` (if given) with a spinner on stderr while matplotlib works."""
    if plot is not None:
        with err.status(f"plotting {plot}"):
            write_plot(plot, title, series())


def plural(n: int, word: str, many: str | None = None) -> str:
    """``1 file``, ``3 files``, ``0 files`` (``many`` for irregular plurals)."""
    return f"{n:,} {word if n == 1 else many or word + 's'}"


@dataclass(frozen=True)
class Column:
    """A table column; ``compact`` columns make the layout that fits 80 columns."""

    name: str
    compact: bool = True
    left: bool = False


def _table(columns: Sequence[Column], rows: Sequence[Sequence[str]], wide: bool) -> Table:
    keep = [i for i, c in enumerate(columns) if wide or c.compact]
    # a one-space column divider plus one space of left padding: two spaces between columns
    t = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 0, 0, 1))
    for i in keep:
        c = columns[i]
        # min_width = the longest cell: rich never cuts a number to fit ("3,609…")
        longest = max([len(c.name), *(len(r[i]) for r in rows)])
        t.add_column(c.name, justify="left" if c.left else "right", no_wrap=True, min_width=longest)
    for r in rows:
        t.add_row(*(r[i] for i in keep))
    return t


def table_width(table: Table) -> int:
    """Columns the table needs at its natural size."""
    probe = Console(width=10_000, file=io.StringIO(), color_system=None)
    return Measurement.get(probe, probe.options, table).maximum


def print_table(
    out: Console, title: str, columns: Sequence[Column], rows: Sequence[Sequence[str]], wide: bool | None
) -> None:
    """Print the whole table (``wide``), the compact one, or (None) the whole one when it fits the
    terminal or the output is a file or pipe, else the compact one. Nothing is ever cut: a table
    wider than the terminal is printed whole and the terminal wraps its lines."""
    whole = _table(columns, rows, True)
    if wide is None:
        wide = not out.is_terminal or table_width(whole) <= out.width
    table = whole if wide else _table(columns, rows, False)
    need = table_width(table)
    if need > out.width:
        out = Console(file=out.file, width=need, force_terminal=out.is_terminal, no_color=out.no_color)
    out.print(title, highlight=False)
    out.print(table)

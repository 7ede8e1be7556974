"""``--plot FILE.png|svg`` of ``refold replay`` and ``refold simulate``: one figure per run.

Three panels: the prompt size of every call per policy (tasks one after another), the cumulative
prompt tokens per policy, and cached vs recomputed prompt tokens (bars; the cache is simulated).
matplotlib is the optional ``plot`` extra; without it ``check_plot`` is one usage-error line,
raised before any long work starts.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import accumulate
from pathlib import Path
from typing import Any

from ..errors import PolicyError

FORMATS = (".png", ".svg")


@dataclass
class Series:
    """What one figure shows: per policy, each task's per-call prompt tokens; and the bars."""

    per_call: dict[str, list[list[int]]] = field(default_factory=dict)
    bars: list[tuple[str, int, int]] = field(default_factory=list)  # (label, cached, recomputed)
    bars_title: str = "prompt tokens: cached vs recomputed (simulated prefix cache)"
    note: str = ""
    unit: str = "tasks"  # what the per-call lines are, one after another


def check_plot(path: Path) -> None:
    """A usage error now, not after the replay: a bad suffix, or matplotlib not installed."""
    if path.suffix.lower() not in FORMATS:
        raise PolicyError(f"--plot {path}: give a .png or .svg file name")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise PolicyError("--plot needs matplotlib: pip install 'refold[plot]'") from None


def replay_series(report: dict[str, Any]) -> Series:
    """Per-call prompt tokens of each replayed task (the JSON report's ``per_call``) and totals."""
    note = "prompt sizes measured by re-rendering; cached/recomputed simulated"
    prefix = report.get("unrecorded_prefix")
    if isinstance(prefix, dict):  # a Claude Code / Codex log: part of every prompt is not measured
        lo, hi = int(prefix.get("tokens_per_call_min", 0)), int(prefix.get("tokens_per_call_max", 0))
        size = f"{lo:,}" if lo == hi else f"{lo:,}-{hi:,}"
        note += f"; every prompt includes an ESTIMATED unrecorded prefix ({size} tokens per call: the system prompt and tool schemas the log leaves out)"
    out = Series(note=note)
    totals: dict[str, list[int]] = {}
    for task in report.get("tasks", []):
        if task.get("error") is not None:
            continue
        for name, e in task.get("policies", {}).items():
            calls = (e.get("per_call") or {}).get("prompt_tokens")
            if calls:
                out.per_call.setdefault(name, []).append([int(x) for x in calls])
            cached, recomputed = totals.setdefault(name, [0, 0])
            totals[name] = [cached + int(e.get("cached_tokens", 0)), recomputed + int(e.get("recomputed_tokens", 0))]
    out.bars = [(name, c, r) for name, (c, r) in totals.items()]
    return out


def write_plot(path: Path, title: str, series: Series) -> None:
    """Draw the figure; the file format follows the suffix. An OSError is one usage-error line."""
    import matplotlib
    from matplotlib.figure import Figure

    styles = line_styles(list(series.per_call) or [b[0] for b in series.bars])
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "refold", "font.size": 9}):
        fig = Figure(figsize=(11, 8.5), layout="constrained")
        per, cum, bars = fig.subplots(3, 1, height_ratios=[3, 3, 2])
        fig.suptitle("\n".join([*textwrap.wrap(title, 150), *textwrap.wrap(series.note, 150)]).strip(), fontsize=9)
        starts = _task_starts(series.per_call)
        for name, tasks in series.per_call.items():
            flat = [x for t in tasks for x in t]
            xs = range(1, len(flat) + 1)
            at = 1
            for i, task in enumerate(tasks):  # one line per task: no jump drawn between two tasks
                one = {"marker": "o", "markersize": 3} if len(task) == 1 else {}  # a 1-call task has no line to draw
                per.plot(range(at, at + len(task)), task, label=name if i == 0 else None, linewidth=1, **one, **styles[name])
                at += len(task)
            cum.plot(xs, list(accumulate(flat)), label=name, linewidth=1.2, marker="o" if len(flat) == 1 else None, markersize=3, **styles[name])
        calls = max((sum(len(t) for t in tasks) for tasks in series.per_call.values()), default=1)
        for ax in (per, cum):
            # calls and tokens are whole numbers from 0: a 1-call run's axes said "0.96 ... 1.04" and "9 9 9 9"
            ax.set_xlim(0.5, calls + 0.5)
            ax.set_ylim(bottom=0)
            ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True, min_n_ticks=1))
            ax.yaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
            for x in starts[1:]:
                ax.axvline(x - 0.5, color="0.85", linewidth=0.6, zorder=0)
            ax.grid(axis="y", color="0.92")
            ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(_tokens))
        per.set_title("prompt tokens per call" + (f" ({len(starts)} {series.unit} one after another)" if len(starts) > 1 else ""))
        per.set_xlabel("model call")
        cum.set_title("cumulative prompt tokens")
        cum.set_xlabel("model call")
        if series.per_call:
            per.legend(loc="upper left", fontsize=8, ncols=min(4, len(series.per_call)))
        _bars(bars, series)
        try:
            fig.savefig(path, format=path.suffix.lower()[1:], dpi=110, metadata=_metadata(path))
        except OSError as e:
            raise PolicyError(f"cannot write {path}: {e.strerror or e}") from None


def line_styles(names: Sequence[str]) -> dict[str, dict[str, str]]:
    """A distinct color and dash per policy: the default 11 outrun the 10-color cycle (base and
    compact+self-gc were both blue)."""
    return {n: {"color": f"C{i % 10}", "linestyle": ("-", "--", ":")[i // 10 % 3]} for i, n in enumerate(names)}


def _bars(ax: Any, series: Series) -> None:
    labels = [b[0] for b in series.bars]
    ys = range(len(labels))
    cached = [b[1] for b in series.bars]
    recomputed = [b[2] for b in series.bars]
    ax.barh(ys, cached, color="0.75", label="cached")
    ax.barh(ys, recomputed, left=cached, color="C3", label="recomputed")
    ax.set_yticks(list(ys), labels)
    ax.set_xlim(0, 1.22 * max([c + r for c, r in zip(cached, recomputed, strict=True)] or [1]) or 1)
    ax.invert_yaxis()
    ax.xaxis.set_major_formatter(_formatter())
    ax.set_title(f"{series.bars_title}: grey cached, red recomputed")  # a legend box hid the last bar's label
    for y, c, r in zip(ys, cached, recomputed, strict=True):
        share = f"{c / (c + r):.0%} cached" if c + r else ""
        ax.text(c + r, y, f"  {_tokens(c + r)} ({share})", va="center", fontsize=7)


def _formatter() -> Any:
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(_tokens)


def _tokens(x: float, _pos: object = None) -> str:
    """A tick label that keeps the tick's value (2.5k, not 2k): up to 3 significant digits."""
    for scale, unit in ((1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            label = f"{x / scale:.3g}"
            return f"{label if 'e' not in label else f'{x / scale:.0f}'}{unit}"
    return f"{x:.0f}"


def _task_starts(per_call: dict[str, list[list[int]]]) -> list[int]:
    """1-based call number where each task starts (from the first policy)."""
    first: Sequence[list[int]] = next(iter(per_call.values()), [])
    starts, at = [], 1
    for task in first:
        starts.append(at)
        at += len(task)
    return starts


def _metadata(path: Path) -> dict[str, Any]:
    # no creation date: the same run gives the same file
    return {"Date": None} if path.suffix.lower() == ".svg" else {"Software": "refold"}

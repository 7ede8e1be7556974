"""The replay lab: re-render recorded runs under several policies and measure them side by side.

POLICIES        policy name -> factory(Options) -> Projector (refold configurations, peer models)
iter_prompts    every call's prompt (messages + origins) of a history under a named policy
replay_paths    replay files under many policies (multiprocessing), one TaskResult per file
build_report    the versioned JSON report (``refold-replay-1``); ``write_csv`` for a flat table
"""

from __future__ import annotations

from .metrics import PolicyMetrics, measure
from .paths import collect_paths, half_written, left_out_note, same_runs
from .policies import POLICIES, STALE_POLICIES, make_projector
from .projectors import BEST_MASK_AFTER, Compaction, Options, Projector, Prompt
from .report import FORMAT, build_report, summarize, write_csv
from .runner import TaskResult, iter_prompts, replay_file, replay_paths
from .settings import Settings
from .stale import STALE_SOURCES, hindsight_marks, with_stale

__all__ = [
    "BEST_MASK_AFTER",
    "FORMAT",
    "POLICIES",
    "STALE_POLICIES",
    "STALE_SOURCES",
    "Compaction",
    "Options",
    "PolicyMetrics",
    "Projector",
    "Prompt",
    "Settings",
    "TaskResult",
    "build_report",
    "collect_paths",
    "half_written",
    "left_out_note",
    "same_runs",
    "hindsight_marks",
    "iter_prompts",
    "make_projector",
    "measure",
    "replay_file",
    "replay_paths",
    "summarize",
    "with_stale",
    "write_csv",
]

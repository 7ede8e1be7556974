"""Replay many recorded runs under many policies, one task per worker, deterministically."""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...errors import RefoldError, TrajectoryError
from ...history import History
from ...json_file import read_json
from ...loaders import AGENT_SEP, agent_names, load, load_all, split_source
from ...tokens import get_tokenizer
from ..cache import (
    REPLAYED,
    cost_usd,
    count_calibration,
)
from .metrics import measure, step_tokens
from .needed import NeededIndex, NeededTap
from .policies import STALE_POLICIES, make_projector
from .prefix import request_prefix
from .projectors import Prompt
from .recorded import CacheValidation, RecordedAsOf
from .settings import Settings, request_tools
from .stale import with_stale
from .unrecorded import unrecorded_calls

__all__ = [
    "TaskResult",
    "iter_prompts",
    "replay_file",
    "replay_history",
    "replay_paths",
    "replay_sessions",
]


@dataclass(slots=True)
class TaskResult:
    file: str
    """The session: the file, or ``FILE#Agent`` for one agent of a multi-agent file."""
    format: str | None = None
    path: str = ""
    """The file the session came from (per-file totals group on it)."""
    agent: str | None = None
    sessions: int = 1
    """How many sessions (agents) its file holds."""
    price: str | None = None
    file_stats: dict[str, Any] = field(default_factory=dict)
    """The file's own recorded totals (``info.model_stats``: api_calls, tokens_sent, instance_cost)."""
    calls: int = 0
    policies: dict[str, dict[str, Any]] = field(default_factory=dict)
    reported: dict[str, int | None] = field(
        default_factory=lambda: {"prompt_tokens": None, "cached_tokens": None}
    )
    validation: dict[str, Any] | None = None
    stale_marks: int = 0
    error: str | None = None
    seconds: float = 0.0
    unrecorded: dict[str, Any] | None = None
    """On a file's first session: the ESTIMATED calls its totals count but it does not hold
    (replay/unrecorded.py); per-file totals add them."""
    prefix: dict[str, Any] | None = None
    """The ESTIMATED request prefix every call of this session starts with (replay/prefix.py)."""
    model: str | None = None
    """The model its log recorded (``--price auto`` prices by it)."""
    models: dict[str, int] = field(default_factory=dict)
    """Every model its calls name, when more than one (lines per model)."""
    subagents: list[str] = field(default_factory=list)
    """Subagents its log names that ran in their own ``agent-<id>.jsonl`` (Claude Code 2.1.x)."""
    not_read: dict[str, int] = field(default_factory=dict)
    """What its log holds that the loader did not read (a newer version's line or block kinds)."""
    partial: list[str] = field(default_factory=list)
    """What its file lacks that such a file always holds (a rollout without its first line)."""

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"file": self.file, "format": self.format, "calls": self.calls}
        if self.agent is not None:
            d.update(path=self.path, agent=self.agent)
        if self.error is not None:
            d["error"] = self.error
            return d
        d.update(policies=self.policies, reported=self.reported, stale_marks=self.stale_marks, price=self.price)
        if self.file_stats:
            d["file_stats"] = self.file_stats
        if self.validation is not None:
            d["cache_validation"] = self.validation
        if self.unrecorded is not None:
            d["unrecorded_calls_estimated"] = self.unrecorded
        if self.prefix is not None:
            d["unrecorded_prefix"] = self.prefix
        if self.not_read:
            d["not_read"] = self.not_read
        if self.partial:
            d["partial"] = self.partial
        return d


def _reported(history: History) -> dict[str, int | None]:
    usage = [s.meta.get("usage") or {} for s in history.steps]
    out: dict[str, int | None] = {}
    for key in ("prompt_tokens", "cached_tokens", "completion_tokens"):
        vals = [u.get(key) for u in usage]
        out[key] = (
            sum(v for v in vals if isinstance(v, int))
            if vals and all(isinstance(v, int) for v in vals)
            else None
        )
    return out


PolicyDone = Callable[[TaskResult, str], None]
"""Called after each policy of a session is replayed (a long run takes minutes per file)."""


def replay_history(history: History, settings: Settings, result: TaskResult, on_policy: PolicyDone | None = None) -> None:
    """Fill ``result`` with every selected policy's metrics for one loaded history."""
    opts = settings.options()
    tok = opts.tokenizer
    model = history.meta.get("model")
    price = settings.price_table(model if isinstance(model, str) else None)
    result.price = settings.price_name(model if isinstance(model, str) else None)
    result.model = model if isinstance(model, str) else None
    models = history.meta.get("models")
    result.models = dict(models) if isinstance(models, dict) else {}
    agents = history.meta.get("subagents")
    result.subagents = [a for a in agents if isinstance(a, str)] if isinstance(agents, list) else []
    result.path = str(history.meta.get("path") or result.path or history.source)
    agent = history.meta.get("agent")
    result.agent = agent if isinstance(agent, str) else None
    stats = history.meta.get("file_stats")
    result.file_stats = dict(stats) if isinstance(stats, dict) else {}
    marked = with_stale(history, settings.stale)
    result.stale_marks = sum(len(s.stale) for s in marked.steps)
    result.calls = len(history) + len(history.meta.get("unreplied") or [])
    result.format = str(history.meta.get("format") or "messages")
    unread = history.meta.get("not_read")
    result.not_read = dict(unread) if isinstance(unread, dict) else {}
    partial = history.meta.get("partial")
    result.partial = [str(x) for x in partial] if isinstance(partial, list) else []
    result.reported = _reported(history)
    base_tokens = step_tokens(history, tok)
    needed = NeededIndex(history, tok)
    prefix: list[int] = []
    if settings.prefix_estimate:  # a format whose log leaves out part of each request
        prefix, est = request_prefix(history, tok, request_tools(history, "base"))
        result.prefix = est.to_dict() if est is not None else None
        if est is not None:  # the policies' budget lines count it (what `refold serve` counts: the whole request)
            opts = dataclasses.replace(opts, unrecorded_tokens=est.provider_tokens)
    as_of: list[int | None] | None = None
    if settings.cache in REPLAYED:  # the state each call met, from base's calls and the record
        states = RecordedAsOf(history, settings.cache)  # fed call by call (no call's ids held)
        tools = request_tools(history, "base")
        measure(history, make_projector("base", opts), tok, cache_name="none", keep_ids=states, tools=tools, prefix=prefix)
        as_of = states.result()
    for name in settings.policies:
        h = marked if name in STALE_POLICIES else history
        # base's calls feed the cache validation as they are made (never all held at once)
        keep = CacheValidation(history) if name == "base" and settings.validate else None
        tap = NeededTap(make_projector(name, opts), needed)
        m = measure(
            h,
            tap,
            tok,
            cache_name=settings.cache,
            price=price,
            kv_model=settings.kv_model,
            base_step_tokens=base_tokens,
            keep_ids=keep,
            tools=request_tools(history, name),
            as_of=as_of,
            calibration=count_calibration(result.price, settings.tokenizer) if settings.count_calibration else None,
            prefix=prefix,
        )
        m.hidden_needed_calls = tap.totals.needed_calls
        m.hidden_needed_restore_tokens = tap.totals.restore_tokens
        result.policies[name] = m.to_dict(per_call=settings.per_call)
        if prefix:  # of prompt_tokens: what the ESTIMATED prefix adds (calls x its length)
            result.policies[name]["unrecorded_prefix_tokens"] = len(prefix) * m.calls
        if keep is not None and m.calls:
            result.validation = keep.result()
        if on_policy:
            on_policy(result, name)


def _error(e: Exception) -> str:
    if isinstance(e, TrajectoryError):
        return e.reason
    return f"{type(e).__name__}: {e}" if isinstance(e, RefoldError) or str(e) else type(e).__name__


def replay_file(path: str, settings: Settings, on_policy: PolicyDone | None = None) -> TaskResult:
    """Replay one session (a file, or ``FILE#Agent``); a file that cannot be read becomes a
    result with ``error`` set (a multi-agent file without ``#Agent`` is such an error)."""
    start = time.perf_counter()
    result = TaskResult(file=path, path=split_source(path)[0])
    try:
        history = load(path)
        replay_history(history, settings, result, on_policy)
    except Exception as e:  # noqa: BLE001 - one odd file must not end the whole replay
        result.error = _error(e)
    result.seconds = time.perf_counter() - start
    return result


def replay_sessions(path: str, settings: Settings, on_policy: PolicyDone | None = None) -> list[TaskResult]:
    """Replay every session of a file: one result per agent of a multi-agent file, named
    ``FILE#Agent``, each its own conversation with its own cache; else one result."""
    start = time.perf_counter()
    try:
        histories = load_all(path)
    except Exception as e:  # noqa: BLE001 - one odd file must not end the whole replay
        agents = _agents(path)
        if agents:  # one agent's conversation that cannot be read must not hide the others'
            each = [replay_file(f"{split_source(path)[0]}{AGENT_SEP}{a}", settings, on_policy) for a in agents]
            for r in each:
                r.sessions = len(agents)
            return each
        where = e.path if isinstance(e, TrajectoryError) else path  # FILE#Agent when it was one agent
        failed = TaskResult(file=where, path=split_source(path)[0], error=_error(e))
        failed.seconds = time.perf_counter() - start
        return [failed]
    out: list[TaskResult] = []
    for history in histories:
        t0 = time.perf_counter()
        result = TaskResult(file=history.source, path=split_source(path)[0], sessions=len(histories))
        try:
            replay_history(history, settings, result, on_policy)
        except Exception as e:  # noqa: BLE001
            result.error = _error(e)
        result.seconds = time.perf_counter() - t0
        out.append(result)
    _estimate_unrecorded(out, histories, settings)
    return out


def _agents(path: str) -> list[str]:
    """The agents of a multi-agent file named without ``#Agent`` (none for any other path)."""
    file, agent = split_source(path)
    if agent is not None:
        return []
    try:
        return agent_names(read_json(file))
    except TrajectoryError:
        return []


def _estimate_unrecorded(out: list[TaskResult], histories: Sequence[History], settings: Settings) -> None:
    """SWE-agent files: calls ``info.model_stats`` counts that no session holds (requeries)."""
    if not out or any(r.error for r in out) or histories[0].meta.get("format") != "swe-agent":
        return
    model = histories[0].meta.get("model")
    price = settings.price_table(model if isinstance(model, str) else None)
    out[0].unrecorded = unrecorded_calls(
        out[0].file_stats,
        [r.policies for r in out],
        get_tokenizer(settings.tokenizer),
        lambda n, cached, o: cost_usd(price, n, cached, 0, o),
    )


def _worker(args: tuple[str, Settings]) -> list[TaskResult]:
    return replay_sessions(*args)


def replay_paths(
    files: Sequence[str],
    settings: Settings,
    *,
    jobs: int = 1,
    on_result: Callable[[TaskResult], None] | None = None,
    on_policy: PolicyDone | None = None,
) -> list[TaskResult]:
    """Replay ``files`` (in this order in the output, whatever ``jobs`` is): one result per
    session, so a multi-agent file gives one per agent (``FILE#Agent``). ``on_policy`` is called
    only when the files are replayed in this process (``jobs`` 1, or one file)."""
    settings.check()
    results: list[TaskResult] = []
    jobs = max(1, min(jobs, len(files) or 1, os.cpu_count() or 1))
    if jobs == 1:
        for f in files:
            for r in replay_sessions(f, settings, on_policy):
                results.append(r)
                if on_result:
                    on_result(r)
        return results
    ctx = multiprocessing.get_context("spawn" if os.name == "nt" else "fork")
    with ctx.Pool(jobs) as pool:
        for rs in pool.imap(_worker, [(f, settings) for f in files]):
            for r in rs:
                results.append(r)
                if on_result:
                    on_result(r)
    return results


def iter_prompts(
    history: History,
    policy_name: str,
    stale: str = "recorded",
    *,
    tokenizer: str = "qwen3.6",
    budget: int = 32_768,
    mask_after: int | None = None,
    final: bool = False,
    cache: str = "vllm",
    unrecorded_tokens: int = 0,
) -> Iterator[Prompt]:
    """Every model call's prompt (messages + origins) of ``history`` under a named policy.

    For viewers: call t+1's prompt is the t-th item. STALE-dependent policies see the marks of
    ``stale`` (``recorded``, ``none``, ``hindsight[-produced|-conservative|-aggressive]``);
    ``cache`` is the simulator whose prices ``default`` renders with (``replay --cache``).
    ``final``: then the prompt after the last step (``Projector.prompts``). ``unrecorded_tokens``:
    the ESTIMATED request prefix its log leaves out (``request_prefix``), which a budget line counts.
    """
    settings = Settings(
        policies=(policy_name,), stale=stale, tokenizer=tokenizer, budget=budget, mask_after=mask_after, cache=cache
    )
    settings.check()
    h = with_stale(history, stale) if policy_name in STALE_POLICIES else history
    opts = dataclasses.replace(settings.options(), unrecorded_tokens=unrecorded_tokens)
    yield from make_projector(policy_name, opts).prompts(h, final)

"""Replay many recorded runs under many policies, one task per worker, deterministically."""

from __future__ import annotations

import multiprocessing
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..cache import CACHE_NAMES, DEFAULT_PRICES, Price, kv_spec, load_prices
from ..errors import PolicyError, RefoldError, TrajectoryError
from ..history import History, load
from ..tokens import TOKENIZER_NAMES, get_tokenizer
from .metrics import default_price, measure, step_tokens, validate_cache
from .policies import POLICIES, STALE_POLICIES, Options, Prompt, make_projector
from .stale import STALE_SOURCES, with_stale

__all__ = ["Settings", "TaskResult", "collect_paths", "iter_prompts", "replay_file", "replay_paths"]

TRAJECTORY_SUFFIXES = (".json", ".traj", ".jsonl", ".gz")


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything a replay depends on (picklable, so workers rebuild tokenizers themselves)."""

    policies: tuple[str, ...] = tuple(POLICIES)
    stale: str = "recorded"
    tokenizer: str = "qwen3.6"
    cache: str = "vllm"
    price: str | None = None
    prices_file: str | None = None
    kv_model: str = "qwen3.6-27b"
    budget: int = 32_768
    mask_after: int | None = None
    validate: bool = True
    per_call: bool = True

    def check(self) -> None:
        """Raise PolicyError (a usage error) for any unknown name."""
        for p in self.policies:
            if p not in POLICIES:
                raise PolicyError(f"unknown policy {p!r}; valid choices: {', '.join(POLICIES)}")
        if not self.policies:
            raise PolicyError("no policy selected")
        if self.stale not in STALE_SOURCES:
            raise PolicyError(f"unknown --stale {self.stale!r}; valid choices: {', '.join(STALE_SOURCES)}")
        if self.tokenizer not in TOKENIZER_NAMES:
            raise PolicyError(
                f"unknown tokenizer {self.tokenizer!r}; valid choices: {', '.join(TOKENIZER_NAMES)}"
            )
        if self.cache not in CACHE_NAMES:
            raise PolicyError(f"unknown cache {self.cache!r}; valid choices: {', '.join(CACHE_NAMES)}")
        if self.budget < 1024:
            raise PolicyError(f"--budget must be at least 1024 tokens, got {self.budget}")
        try:
            kv_spec(self.kv_model)
        except ValueError as e:
            raise PolicyError(f"--kv-model: {e}") from None
        self.price_table()

    def price_name(self) -> str:
        return self.price or default_price(self.cache)

    def price_table(self) -> Price:
        table = dict(DEFAULT_PRICES)
        if self.prices_file:
            try:
                table.update(load_prices(self.prices_file))
            except ValueError as e:
                raise PolicyError(str(e)) from None
        name = self.price_name()
        if name not in table:
            raise PolicyError(f"unknown price {name!r}; known: {', '.join(sorted(table))}")
        return table[name]

    def options(self) -> Options:
        extra: dict[str, Any] = {} if self.mask_after is None else {"mask_after": self.mask_after}
        return Options(tokenizer=get_tokenizer(self.tokenizer), budget=self.budget, cache=self.cache, **extra)


@dataclass(slots=True)
class TaskResult:
    file: str
    format: str | None = None
    calls: int = 0
    policies: dict[str, dict[str, Any]] = field(default_factory=dict)
    reported: dict[str, int | None] = field(
        default_factory=lambda: {"prompt_tokens": None, "cached_tokens": None}
    )
    validation: dict[str, Any] | None = None
    stale_marks: int = 0
    error: str | None = None
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"file": self.file, "format": self.format, "calls": self.calls}
        if self.error is not None:
            d["error"] = self.error
            return d
        d.update(policies=self.policies, reported=self.reported, stale_marks=self.stale_marks)
        if self.validation is not None:
            d["cache_validation"] = self.validation
        return d


def _reported(history: History) -> dict[str, int | None]:
    usage = [s.meta.get("usage") or {} for s in history.steps]
    out: dict[str, int | None] = {}
    for key in ("prompt_tokens", "cached_tokens"):
        vals = [u.get(key) for u in usage]
        out[key] = (
            sum(v for v in vals if isinstance(v, int))
            if vals and all(isinstance(v, int) for v in vals)
            else None
        )
    return out


def replay_history(history: History, settings: Settings, result: TaskResult) -> None:
    """Fill ``result`` with every selected policy's metrics for one loaded history."""
    opts = settings.options()
    tok = opts.tokenizer
    price = settings.price_table()
    marked = with_stale(history, settings.stale)
    result.stale_marks = sum(len(s.stale) for s in marked.steps)
    result.calls = len(history)
    result.format = str(history.meta.get("format") or "messages")
    result.reported = _reported(history)
    base_tokens = step_tokens(history, tok)
    for name in settings.policies:
        h = marked if name in STALE_POLICIES else history
        keep: list[list[int]] | None = [] if name == "base" and settings.validate else None
        m = measure(
            h,
            make_projector(name, opts),
            tok,
            cache_name=settings.cache,
            price=price,
            kv_model=settings.kv_model,
            base_step_tokens=base_tokens,
            keep_ids=keep,
        )
        result.policies[name] = m.to_dict(per_call=settings.per_call)
        if keep:
            result.validation = validate_cache(history, keep, tok)


def replay_file(path: str, settings: Settings) -> TaskResult:
    """Replay one file; a file that cannot be read becomes a result with ``error`` set."""
    start = time.perf_counter()
    result = TaskResult(file=path)
    try:
        history = load(path)
        replay_history(history, settings, result)
    except TrajectoryError as e:
        result.error = e.reason
    except Exception as e:  # noqa: BLE001 - one odd file must not end the whole replay
        result.error = f"{type(e).__name__}: {e}" if isinstance(e, RefoldError) or str(e) else type(e).__name__
    result.seconds = time.perf_counter() - start
    return result


def _worker(args: tuple[str, Settings]) -> TaskResult:
    return replay_file(*args)


def collect_paths(paths: Sequence[str | Path]) -> list[str]:
    """Files as given, and the trajectory files inside folders (recursively, sorted)."""
    out: list[str] = []
    for p in paths:
        path = Path(p)
        if path.is_dir():
            found = sorted(
                str(f)
                for f in path.rglob("*")
                if f.is_file() and f.name.endswith(TRAJECTORY_SUFFIXES) and not f.name.startswith(".")
            )
            out.extend(found)
        elif path.exists():
            out.append(str(path))
        else:
            raise PolicyError(f"no such file or folder: {p}")
    return list(dict.fromkeys(out))


def replay_paths(
    files: Sequence[str],
    settings: Settings,
    *,
    jobs: int = 1,
    on_result: Callable[[TaskResult], None] | None = None,
) -> list[TaskResult]:
    """Replay ``files`` (in this order in the output, whatever ``jobs`` is)."""
    settings.check()
    results: list[TaskResult] = []
    jobs = max(1, min(jobs, len(files) or 1, os.cpu_count() or 1))
    if jobs == 1:
        for f in files:
            r = replay_file(f, settings)
            results.append(r)
            if on_result:
                on_result(r)
        return results
    ctx = multiprocessing.get_context("spawn" if os.name == "nt" else "fork")
    with ctx.Pool(jobs) as pool:
        for r in pool.imap(_worker, [(f, settings) for f in files]):
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
) -> Iterator[Prompt]:
    """Every model call's prompt (messages + origins) of ``history`` under a named policy.

    For viewers: call t+1's prompt is the t-th item. STALE-dependent policies see the marks of
    ``stale`` (``recorded``, ``none``, ``hindsight[-conservative|-aggressive]``).
    """
    settings = Settings(
        policies=(policy_name,), stale=stale, tokenizer=tokenizer, budget=budget, mask_after=mask_after
    )
    settings.check()
    h = with_stale(history, stale) if policy_name in STALE_POLICIES else history
    yield from make_projector(policy_name, settings.options()).prompts(h)

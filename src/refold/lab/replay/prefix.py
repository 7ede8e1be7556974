"""The request prefix a harness's log does not hold, ESTIMATED from the usage it recorded.

A Claude Code log never holds the system prompt and tool schemas sent with every call (~15-25k
tokens); a Codex rollout holds the base instructions but not the tool schemas. The provider's
usage of each stored call counts them, so per session (each compacted context and subagent is
its own) refold fits

    recorded prompt tokens of call k  ~  a + s * n_k

with ``n_k`` base's count of call k's messages, in the provider's tokenizer where refold has it
(o200k for OpenAI's models; the slope ``s`` is then 1 and ``a`` the median of recorded - n_k),
else in the replay tokenizer (Claude's is not public): ``s`` is then the Theil-Sen slope (the
median of the pairwise slopes) when at least ``MIN_FIT_CALLS`` calls spread it and it lies in
``SLOPE_RANGE`` (else 1), and ``a`` the median of recorded - s * n_k. Why not the first call's
difference or the plain median (benchmarks/results/prefix_estimate.txt, synthetic sessions): with
equal tokenizers the median is best (0-2% off; the first call is 55-65% off when that one call
carried something unlogged), but with a 1.2x tokenizer gap the median takes 0.2 x the median
message count as prefix (29% off at 3 calls, 220% at 60) and the first call is ~22% off, while
the fit is within 3% from 3 calls on, and from 5 calls on when some calls carry something
unlogged (at 3 calls one such call puts it 13% off, 79% if it is the first). A prefix that
grows mid-session (an MCP server connecting) is averaged: 3-37% off whichever figure is taken
but the first call's. ``a`` is clipped to [0, the smallest recorded prompt] and converted to
replay-tokenizer tokens (a / the provider's tokens per replay token of the messages): every
policy's every call starts with that many tokens, the same at each call, so a cache simulator
holds them as one shared prefix.
"""

from __future__ import annotations

import statistics
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ...history import History
from ...prompt_tokens import PromptTokens
from ...tokens import TOKENIZER_NAMES, Tokenizer, get_tokenizer
from .policies import make_projector
from .projectors import Options, Prompt

__all__ = [
    "MIN_FIT_CALLS",
    "PREFIX_FORMATS",
    "SLOPE_RANGE",
    "PrefixEstimate",
    "estimate_prefix",
    "fit_prefix",
    "prefix_ids",
    "provider_tokenizer",
    "request_prefix",
    "theil_sen_slope",
]

PREFIX_FORMATS = frozenset({"claude-code", "codex"})
"""Formats whose files leave out part of what each request sent (the others send their whole prompt)."""
MIN_FIT_CALLS = 3
SLOPE_RANGE = (0.5, 2.0)
"""Provider tokens per counted token a fitted slope may take (tokenizers differ by far less)."""
_MAX_PAIRS_POINTS = 200  # Theil-Sen over at most this many calls (evenly spaced): 19,900 pairs
_MAX_PREFIX = 1 << 20  # no provider takes a request prefix this long


@dataclass(frozen=True, slots=True)
class PrefixEstimate:
    """One session's ESTIMATED unrecorded request prefix."""

    tokens: int
    """Replay-tokenizer tokens put first in every call's prompt."""
    provider_tokens: int
    """The prefix in the provider's own count (the fit's intercept ``a``)."""
    ratio: float
    """Provider tokens per replay-tokenizer token of the messages (1.0: taken as equal)."""
    calls: int
    """Stored calls with recorded usage the fit used."""
    counted_with: str
    """The tokenizer base's message counts were taken in (the provider's, or the replay's)."""
    method: str
    """``median`` (slope 1: recorded - counted) or ``fit`` (Theil-Sen slope, then the median)."""
    residual: int
    """Median absolute residual per call (provider tokens): how far one constant explains the calls."""
    recorded: int = 0
    """Median recorded prompt per call (provider tokens): what ``residual`` is weighed against."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "estimated": True,
            "tokens_per_call": self.tokens,
            "provider_tokens_per_call": self.provider_tokens,
            "provider_tokens_per_replay_token": round(self.ratio, 4),
            "calls_fitted": self.calls,
            "counted_with": self.counted_with,
            "method": self.method,
            "residual_median": self.residual,
            "recorded_median": self.recorded,
        }


def provider_tokenizer(model: object) -> str | None:
    """The shipped tokenizer of a model's family (None: not shipped, e.g. Claude's)."""
    name = str(model or "").lower().rsplit("/", 1)[-1]
    if name.startswith(("gpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "o1", "o3", "o4", "codex", "gpt-oss", "chatgpt-4o")):
        return "o200k"
    if name.startswith(("gpt-4", "gpt-3.5")):
        return "cl100k"
    if name.startswith(("qwen3.5", "qwen3.6")):
        return "qwen3.6"
    return None


def theil_sen_slope(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """The median of the pairwise slopes (None when no two x differ)."""
    n = len(xs)
    if n > _MAX_PAIRS_POINTS:
        pick = [round(i * (n - 1) / (_MAX_PAIRS_POINTS - 1)) for i in range(_MAX_PAIRS_POINTS)]
        xs, ys = [xs[i] for i in pick], [ys[i] for i in pick]
        n = _MAX_PAIRS_POINTS
    slopes = [(ys[j] - ys[i]) / (xs[j] - xs[i]) for i in range(n) for j in range(i + 1, n) if xs[j] != xs[i]]
    return statistics.median(slopes) if slopes else None


def fit_prefix(counts: Sequence[int], recorded: Sequence[int], *, same_tokenizer: bool) -> tuple[float, float, str, float]:
    """``(a, s, method, residual)`` of recorded ~ a + s * counts (see the module docstring)."""
    if not counts or len(counts) != len(recorded):
        raise ValueError("fit_prefix needs one recorded count per counted call")
    slope, method = 1.0, "median"
    if not same_tokenizer and len({*counts}) >= MIN_FIT_CALLS:
        s = theil_sen_slope(counts, recorded)
        if s is not None and SLOPE_RANGE[0] <= s <= SLOPE_RANGE[1]:
            slope, method = s, "fit"
    diffs = [r - slope * c for c, r in zip(counts, recorded, strict=True)]
    a = statistics.median(diffs)
    return a, slope, method, statistics.median(abs(d - a) for d in diffs)


def _recorded_prompts(history: History) -> dict[int, int]:
    out: dict[int, int] = {}
    for s in history.steps:
        v = (s.meta.get("usage") or {}).get("prompt_tokens")
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            out[s.index] = v
    return out


def estimate_prefix(
    history: History,
    base_prompts: Iterable[Prompt],
    tok: Tokenizer,
    tools: Sequence[Mapping[str, Any]] | None = None,
) -> PrefixEstimate | None:
    """The session's unrecorded prefix from its recorded usage and ``base_prompts`` (base's
    prompts of ``history``); None for a format that records its whole prompt or a session
    without usage."""
    if str(history.meta.get("format") or "") not in PREFIX_FORMATS:
        return None
    recorded = _recorded_prompts(history)
    if not recorded:
        return None
    family = provider_tokenizer(history.meta.get("model"))
    own = PromptTokens(tok, tools=tools)
    other = None
    if family is not None and family in TOKENIZER_NAMES and family != tok.name:
        other = PromptTokens(get_tokenizer(family), tools=tools)
    replay_n: list[int] = []
    counted: list[int] = []
    rec: list[int] = []
    for p in base_prompts:
        r = recorded.get(p.t + 1)
        if r is None:
            continue
        n = own.count(p.messages)
        replay_n.append(n)
        counted.append(other.count(p.messages) if other is not None else n)
        rec.append(r)
    if not rec:
        return None
    a, slope, method, residual = fit_prefix(counted, rec, same_tokenizer=family is not None)
    per_replay = (sum(counted) / sum(replay_n) if sum(replay_n) else 1.0) * slope
    a = min(max(0.0, a), float(min(rec)), float(_MAX_PREFIX))
    return PrefixEstimate(
        tokens=min(_MAX_PREFIX, round(a / per_replay)) if per_replay > 0 else round(a),
        provider_tokens=round(a),
        ratio=per_replay,
        calls=len(rec),
        counted_with=family if family is not None else tok.name,
        method=method,
        residual=round(residual),
        recorded=round(statistics.median(rec)),
    )


def request_prefix(
    history: History, tok: Tokenizer, tools: Sequence[Mapping[str, Any]] | None = None
) -> tuple[list[int], PrefixEstimate | None]:
    """The ids every request of ``history`` starts with that its log does not hold, and the
    estimate; ``([], None)`` for any other run or one without usage. ``tools``: the function
    schemas base's requests carried (``settings.request_tools``)."""
    base = make_projector("base", Options(tokenizer=tok))
    est = estimate_prefix(history, base.prompts(history), tok, tools)
    return (prefix_ids(est.tokens, history.source), est) if est is not None else ([], None)


def prefix_ids(n: int, key: str) -> list[int]:
    """``n`` placeholder ids standing for the prefix: negative (no tokenizer's), the same for one
    ``key`` (a session), distinct between keys (no two sessions are assumed to share it)."""
    base = -(1 << 44) - (zlib.crc32(key.encode("utf-8", "surrogatepass")) << 21)
    return list(range(base, base - n, -1))

"""Hosted-API prompt-cache profiles (cache_spec.md §3), each one cache namespace (org/key/route).

Eviction TTLs (minutes) are ignored: every entry is assumed to be alive when the next request
arrives (true for agent loops with turns well under 5 minutes; the recorded gpt-5-mini runs show
no idle-gap effect).  Output tokens are cached only where stated.  The profiles fitted on recorded
usage (``openai``, ``gemini-openrouter``) are in :mod:`.calibrated`.
"""

from __future__ import annotations

import random
from collections.abc import Hashable, Sequence

from .base import CacheResult, generated_ids, grid_hit
from .radix import RadixTree

__all__ = [
    "ANTHROPIC_MIN_CACHEABLE",
    "AnthropicCache",
    "DeepSeekCache",
    "OpenAICache",
]


class OpenAICache:
    """OpenAI automatic prompt caching, models before GPT-5.6 (cache_spec.md §3.2 ``openai_legacy``).

    Hit = longest prefix shared with any earlier prompt ``L``; zero if the prompt or ``L`` is below
    ``min_tokens`` (1024 [DOC]); otherwise ``1024 + 128 * floor((L - 1024) / 128)`` (128-token
    increments: Prompt Caching 201 cookbook [DOC], no longer on the main guide page [UNVERIFIED]).
    Not capped at ``P - 1``: a repeated prompt of 1024 + 128k tokens hits in full [UNVERIFIED].
    Best-effort routing is modelled by ``route_hit_rate``: the probability that a request reaches a
    machine holding the prefix (default 1.0; the real rate is [UNVERIFIED], overflow above ~15
    req/min per prefix).  Writes are free; ``written_tokens`` = prompt tokens not stored before.
    GPT-5.6+ breakpoint mode is not modelled.
    """

    name = "openai"

    def __init__(
        self, min_tokens: int = 1024, increment: int = 128, route_hit_rate: float = 1.0, seed: int = 0
    ) -> None:
        if not 0.0 <= route_hit_rate <= 1.0:
            raise ValueError(f"route_hit_rate must be in [0, 1], got {route_hit_rate}")
        self.min_tokens = min_tokens
        self.increment = increment
        self.route_hit_rate = route_hit_rate
        self._rng = random.Random(seed)
        self.tree = RadixTree()

    def request(
        self,
        tokens: Sequence[int],
        *,
        generated: Sequence[int] | int = (),
        session: Hashable = None,
        breakpoints: Sequence[int] = (),
        boundaries: Sequence[int] = (),
    ) -> CacheResult:
        toks = list(tokens)
        p = len(toks)
        lcp, _, _ = self.tree.match(toks, p)
        hit = grid_hit(lcp, self.min_tokens, self.increment)  # lcp <= p: a short prompt hits nothing
        if self.route_hit_rate < 1.0 and self._rng.random() >= self.route_hit_rate:
            hit = 0
        written = self.tree.insert(toks)
        return CacheResult(p, hit, written)


# Minimum cacheable prompt length per model (cache_spec.md §3.1): [DOC] for models up to Opus 4.5 /
# Haiku 4.5, [UNVERIFIED] (third-party compilation, 2026-07) for newer ones.
ANTHROPIC_MIN_CACHEABLE: dict[str, int] = {
    "claude-opus-5": 512,
    "claude-fable-5": 512,
    "claude-mythos-5": 512,
    "claude-opus-4.8": 1024,
    "claude-sonnet-5": 1024,
    "claude-sonnet-4": 1024,
    "claude-sonnet-4.5": 1024,
    "claude-sonnet-4.6": 1024,
    "claude-opus-4": 1024,
    "claude-opus-4.1": 1024,
    "claude-opus-4.7": 2048,
    "claude-haiku-3.5": 2048,
    "claude-haiku-3": 2048,
    "claude-opus-4.5": 4096,
    "claude-opus-4.6": 4096,
    "claude-haiku-4.5": 4096,
}


class AnthropicCache:
    """Anthropic explicit prompt caching (cache_spec.md §3.2 ``anthropic``).

    ``breakpoints`` are prefix lengths (token offsets) carrying ``cache_control``, at most
    ``max_breakpoints`` (4 [DOC]; more raises ValueError like the API).  With none given and
    ``auto_breakpoint`` set, one breakpoint is put at the end of the prompt (the "automatic"
    top-level mode [3P]).  ``boundaries`` are content-block ends; breakpoints are added to them.
    Each boundary ``j`` has a cumulative hash of ``tokens[:boundary_j]``.  Read: for each
    breakpoint, walk back over at most ``lookback_blocks`` boundaries (20 [DOC], counting the
    breakpoint itself [UNVERIFIED]) and take the first cached one; ``cached`` = the largest such
    prefix.  Write: ``C - cached`` with ``C`` the last breakpoint; afterwards every boundary up to
    each breakpoint is cached (the doc's example implies earlier block boundaries inside a written
    entry are hittable; mechanism [UNVERIFIED]).  A breakpoint shorter than the model's minimum is
    ignored (per-breakpoint rule [UNVERIFIED]; the spec states it for the last breakpoint).
    Output tokens are never written.  Reads cost 0.1x and 5-minute writes 1.25x (see pricing).
    """

    name = "anthropic"

    def __init__(
        self,
        model: str = "claude-sonnet-4.5",
        *,
        min_tokens: int | None = None,
        lookback_blocks: int = 20,
        max_breakpoints: int = 4,
        auto_breakpoint: bool = True,
    ) -> None:
        if min_tokens is None:
            if model not in ANTHROPIC_MIN_CACHEABLE:
                known = ", ".join(sorted(ANTHROPIC_MIN_CACHEABLE))
                raise ValueError(f"unknown Anthropic model {model!r}; pass min_tokens or use one of: {known}")
            min_tokens = ANTHROPIC_MIN_CACHEABLE[model]
        self.model = model
        self.min_tokens = min_tokens
        self.lookback_blocks = lookback_blocks
        self.max_breakpoints = max_breakpoints
        self.auto_breakpoint = auto_breakpoint
        self._entries: set[int] = set()

    def request(
        self,
        tokens: Sequence[int],
        *,
        generated: Sequence[int] | int = (),
        session: Hashable = None,
        breakpoints: Sequence[int] = (),
        boundaries: Sequence[int] = (),
    ) -> CacheResult:
        toks = tokens if isinstance(tokens, list) else list(tokens)
        p = len(toks)
        bps = sorted(set(breakpoints))
        if len(bps) > self.max_breakpoints:
            raise ValueError(f"at most {self.max_breakpoints} cache breakpoints allowed, got {len(bps)}")
        if any(not 0 < bp <= p for bp in bps):
            raise ValueError(f"breakpoints must be in 1..{p} (prompt length), got {bps}")
        if not bps and self.auto_breakpoint and p:
            bps = [p]
        bps = [bp for bp in bps if bp >= self.min_tokens]
        if not bps:
            return CacheResult(p, 0, 0)
        last = bps[-1]
        bounds = sorted({b for b in boundaries if 0 < b <= last} | set(bps))
        hashes: list[int] = []
        h, start = 0, 0
        for end in bounds:
            h = hash((h, tuple(toks[start:end])))
            hashes.append(h)
            start = end
        index = {b: j for j, b in enumerate(bounds)}
        cached = 0
        for bp in bps:
            j0 = index[bp]
            for j in range(j0, max(j0 - self.lookback_blocks, -1), -1):
                if hashes[j] in self._entries:
                    cached = max(cached, bounds[j])
                    break
        self._entries.update(hashes)  # all boundaries up to the last breakpoint
        return CacheResult(p, cached, last - cached)


class DeepSeekCache:
    """DeepSeek context caching on disk (cache_spec.md §3.1/§3.2).

    ``mode="legacy"`` (2024-08 rule [DOC news0802]): prompts are stored in ``unit``-token units
    (64) from token 0; hit = the longest stored unit-aligned prefix = ``64 * floor(L / 64)`` with
    ``L`` the longest prefix shared with any earlier prompt.  Outputs are not stored [UNVERIFIED].

    ``mode="v4"`` (current "cache prefix units" [DOC kv_cache guide]): units persist at the end of
    each prompt, at each ``boundaries`` offset (pass the ends of user inputs), at the end of the
    model output when ``generated`` ids are given, and at the common prefix detected with earlier
    requests (usable from the next request on [UNVERIFIED]); with ``interval`` set, also every
    ``interval`` tokens (the real interval is unpublished [UNVERIFIED]).  A hit must match a whole
    unit.  Writes are free; reads cost ~0.02x (V4-Flash, volatile).
    """

    name = "deepseek"

    def __init__(self, mode: str = "legacy", *, unit: int = 64, interval: int | None = None) -> None:
        if mode not in ("legacy", "v4"):
            raise ValueError(f"DeepSeek mode must be 'legacy' or 'v4', got {mode!r}")
        self.mode = mode
        self.unit = unit
        self.interval = interval
        self.tree = RadixTree()

    def request(
        self,
        tokens: Sequence[int],
        *,
        generated: Sequence[int] | int = (),
        session: Hashable = None,
        breakpoints: Sequence[int] = (),
        boundaries: Sequence[int] = (),
    ) -> CacheResult:
        toks = list(tokens)
        p = len(toks)
        lcp, _, unit_depth = self.tree.match(toks, p)
        if self.mode == "legacy":
            hit = self.unit * (lcp // self.unit)
            written = self.tree.insert(toks[: p - p % self.unit])
            return CacheResult(p, hit, written)
        hit = unit_depth
        if self.interval:
            hit = max(hit, self.interval * (lcp // self.interval))
        written = self.tree.insert(toks)
        marks = {p, lcp, *(b for b in boundaries if 0 < b <= p)}
        _, ids = generated_ids(generated)
        if ids:
            toks.extend(ids)
            self.tree.insert(toks)
            marks.add(len(toks))
        for m in marks:
            self.tree.mark_unit(toks, m)
        return CacheResult(p, hit, written)

"""Prefix-cache and KV-memory simulators for the replay lab (spec: cache_spec.md).

Every simulator implements :class:`PrefixCacheSim`: ``request(tokens, *, generated=(),
session=None, breakpoints=(), boundaries=()) -> CacheResult``.  Build one by name with
:func:`make_cache`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .base import CacheResult, NoCache, PrefixCacheSim, common_prefix_len
from .calibrated import CALIBRATED, CalibratedCache, calibrated
from .kv import KV_MODELS, KvSpec, kv_bytes, kv_gib, kv_spec, session_peak_kv_bytes
from .pricing import (
    COUNT_CALIBRATIONS,
    DEFAULT_PRICES,
    MODEL_ALIASES,
    CountCalibration,
    Price,
    cost_usd,
    count_calibration,
    load_prices,
    price_for_model,
)
from .providers import ANTHROPIC_MIN_CACHEABLE, AnthropicCache, DeepSeekCache, OpenAICache
from .radix import RadixTree, SglangRadixCache
from .replayed import REPLAYED, ReplayedCache, replayed
from .vllm import VllmPrefixCache, VllmRunning

__all__ = [
    "ANTHROPIC_MIN_CACHEABLE",
    "CALIBRATED",
    "CACHE_NAMES",
    "COUNT_CALIBRATIONS",
    "ROUTED_CACHES",
    "DEFAULT_PRICES",
    "REPLAYED",
    "KV_MODELS",
    "MODEL_ALIASES",
    "AnthropicCache",
    "CalibratedCache",
    "CacheResult",
    "CountCalibration",
    "DeepSeekCache",
    "KvSpec",
    "NoCache",
    "OpenAICache",
    "PrefixCacheSim",
    "Price",
    "RadixTree",
    "ReplayedCache",
    "SglangRadixCache",
    "VllmPrefixCache",
    "VllmRunning",
    "common_prefix_len",
    "calibrated",
    "cost_usd",
    "count_calibration",
    "kv_bytes",
    "kv_gib",
    "kv_spec",
    "load_prices",
    "make_cache",
    "price_for_model",
    "replayed",
    "session_peak_kv_bytes",
]

_FACTORIES: dict[str, Callable[..., PrefixCacheSim]] = {
    "vllm": VllmPrefixCache,
    "sglang": SglangRadixCache,
    # fitted on recorded usage (CALIBRATED; benchmarks/results/cache_calibration.md)
    "openai": lambda **o: calibrated("openai", **o),
    "gemini-openrouter": lambda **o: calibrated("gemini-openrouter", **o),
    # the expected-value mode: totals unbiased (hits scaled by the fitted miss rate)
    "openai-expected": lambda **o: calibrated("openai-expected", **o),
    "gemini-openrouter-expected": lambda **o: calibrated("gemini-openrouter-expected", **o),
    # the same grids, each call's staleness replayed from the run's recorded cached tokens
    "openai-replayed": lambda: replayed("openai-replayed"),
    "gemini-openrouter-replayed": lambda: replayed("gemini-openrouter-replayed"),
    # the documented rule alone (1,024 + 128k, one namespace, no misses)
    "openai-exact": OpenAICache,
    "anthropic": AnthropicCache,
    "deepseek": DeepSeekCache,
    "none": NoCache,
}
CACHE_NAMES: tuple[str, ...] = tuple(_FACTORIES)
ROUTED_CACHES = frozenset({"gemini-openrouter", "gemini-openrouter-expected", "gemini-openrouter-replayed"})
"""Profiles with one cache per route: replay passes each call's recorded endpoint as ``session``."""


def make_cache(name: str, **options: Any) -> PrefixCacheSim:
    """Build a simulator by name; ``options`` go to its constructor (e.g. ``capacity_blocks``)."""
    factory = _FACTORIES.get(name.strip().lower())
    if factory is None:
        raise ValueError(f"unknown cache simulator {name!r}; valid choices: {', '.join(CACHE_NAMES)}")
    return factory(**options)

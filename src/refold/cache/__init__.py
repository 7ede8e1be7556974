"""Prefix-cache and KV-memory simulators for the replay lab (spec: cache_spec.md).

Every simulator implements :class:`PrefixCacheSim`: ``request(tokens, *, generated=(),
session=None, breakpoints=(), boundaries=()) -> CacheResult``.  Build one by name with
:func:`make_cache`.
"""

from __future__ import annotations

from typing import Any

from .base import CacheResult, NoCache, PrefixCacheSim, common_prefix_len
from .kv import KV_MODELS, KvSpec, kv_bytes, kv_gib, kv_spec, session_peak_kv_bytes
from .pricing import DEFAULT_PRICES, Price, cost_usd, load_prices
from .providers import ANTHROPIC_MIN_CACHEABLE, AnthropicCache, DeepSeekCache, OpenAICache
from .radix import RadixTree, SglangRadixCache
from .vllm import VllmPrefixCache, VllmRunning

__all__ = [
    "ANTHROPIC_MIN_CACHEABLE",
    "CACHE_NAMES",
    "DEFAULT_PRICES",
    "KV_MODELS",
    "AnthropicCache",
    "CacheResult",
    "DeepSeekCache",
    "KvSpec",
    "NoCache",
    "OpenAICache",
    "PrefixCacheSim",
    "Price",
    "RadixTree",
    "SglangRadixCache",
    "VllmPrefixCache",
    "VllmRunning",
    "common_prefix_len",
    "cost_usd",
    "kv_bytes",
    "kv_gib",
    "kv_spec",
    "load_prices",
    "make_cache",
    "session_peak_kv_bytes",
]

_FACTORIES: dict[str, Any] = {
    "vllm": VllmPrefixCache,
    "sglang": SglangRadixCache,
    "openai": OpenAICache,
    "anthropic": AnthropicCache,
    "deepseek": DeepSeekCache,
    "none": NoCache,
}
CACHE_NAMES: tuple[str, ...] = tuple(_FACTORIES)


def make_cache(name: str, **options: Any) -> PrefixCacheSim:
    """Build a simulator by name; ``options`` go to its constructor (e.g. ``capacity_blocks``)."""
    factory = _FACTORIES.get(name.strip().lower())
    if factory is None:
        raise ValueError(f"unknown cache simulator {name!r}; valid choices: {', '.join(CACHE_NAMES)}")
    sim: PrefixCacheSim = factory(**options)
    return sim

"""KV-cache memory per token and per session (cache_spec.md §4).

``kv_bytes_per_token = 2 (K,V) x kv_layers x kv_heads x head_dim x dtype_bytes``; hybrid
Gated-DeltaNet models (Qwen3.5/3.6, Qwen3-Next) add a fixed per-sequence state
``L_lin x [(2 nk dk + nv dv)(kernel - 1) conv_bytes + nv dv dk ssm_bytes]``.  Configs are from
cache_spec.md §4 (HF configs via third-party copies; transformers defaults for the hybrids).
No tensor-parallel split: these are whole-model bytes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = [
    "KV_MODELS",
    "KvSpec",
    "hybrid_block_size",
    "kv_bytes",
    "kv_gib",
    "kv_spec",
    "session_peak_kv_bytes",
    "state_blocks",
]

GIB = 1 << 30


@dataclass(frozen=True, slots=True)
class KvSpec:
    kv_layers: int
    kv_heads: int
    head_dim: int
    linear_layers: int = 0
    lin_k_heads: int = 0
    lin_v_heads: int = 0
    lin_k_dim: int = 0
    lin_v_dim: int = 0
    conv_kernel: int = 4
    ssm_bytes: int = 4  # published Qwen3.5 configs keep the recurrent state in fp32 [3P]

    def bytes_per_token(self, dtype_bytes: int = 2) -> int:
        return 2 * self.kv_layers * self.kv_heads * self.head_dim * dtype_bytes

    def state_bytes(self, dtype_bytes: int = 2) -> int:
        """Fixed per-sequence linear-attention state (0 for full-attention models)."""
        conv = (
            (2 * self.lin_k_heads * self.lin_k_dim + self.lin_v_heads * self.lin_v_dim)
            * (self.conv_kernel - 1)
            * dtype_bytes
        )
        ssm = self.lin_v_heads * self.lin_v_dim * self.lin_k_dim * self.ssm_bytes
        return self.linear_layers * (conv + ssm)


_QWEN35_27B = KvSpec(16, 4, 256, 48, 16, 48, 128, 128)
_QWEN35_35B = KvSpec(10, 2, 256, 30, 16, 32, 128, 128)

KV_MODELS: dict[str, KvSpec] = {
    "llama-3.1-8b": KvSpec(32, 8, 128),  # 128 KiB/token
    "llama-3.1-70b": KvSpec(80, 8, 128),  # 320 KiB/token
    "qwen3-8b": KvSpec(36, 8, 128),  # 144 KiB/token
    "qwen3-32b": KvSpec(64, 8, 128),  # 256 KiB/token
    "qwen3-30b-a3b": KvSpec(48, 4, 128),  # 96 KiB/token
    "qwen3-235b-a22b": KvSpec(94, 4, 128),  # 188 KiB/token
    "qwen3.5-27b": _QWEN35_27B,  # 64 KiB/token + 146.8 MiB state (fp32 SSM)
    "qwen3.6-27b": _QWEN35_27B,  # same architecture [3P]
    "qwen3.5-35b-a3b": _QWEN35_35B,  # 20 KiB/token + 61.4 MiB state
    "qwen3.6-35b-a3b": _QWEN35_35B,  # same topology [3P]
    "qwen3-next-80b-a3b": KvSpec(12, 2, 256, 36, 16, 32, 128, 128, ssm_bytes=2),  # 24 KiB + 37.7 MiB
}


def kv_spec(model: str) -> KvSpec:
    key = model.lower().rsplit("/", 1)[-1]
    for suffix in ("-instruct", "-thinking"):
        key = key.removesuffix(suffix)
    try:
        return KV_MODELS[key]
    except KeyError:
        raise ValueError(f"unknown model {model!r} for KV sizing; known: {', '.join(KV_MODELS)}") from None


def kv_bytes(model: str, tokens: int, *, dtype_bytes: int = 2, sequences: int = 1) -> int:
    """KV bytes for ``tokens`` tokens of context spread over ``sequences`` sequences (bf16 default).

    Hybrid models add their fixed state once per sequence (only if ``sequences`` > 0).
    """
    spec = kv_spec(model)
    return tokens * spec.bytes_per_token(dtype_bytes) + sequences * spec.state_bytes(dtype_bytes)


def kv_gib(model: str, tokens: int, *, dtype_bytes: int = 2, sequences: int = 1) -> float:
    return kv_bytes(model, tokens, dtype_bytes=dtype_bytes, sequences=sequences) / GIB


def session_peak_kv_bytes(model: str, requests: Iterable[tuple[int, int]], *, dtype_bytes: int = 2) -> int:
    """Peak KV a session pins: the largest ``prompt + generated`` over its ``(prompt, generated)``."""
    peak = max((p + o for p, o in requests), default=0)
    return kv_bytes(model, peak, dtype_bytes=dtype_bytes, sequences=1 if peak else 0)


def hybrid_block_size(model: str, *, align: int = 16, dtype_bytes: int = 2) -> int | None:
    """vLLM's attention block size for a hybrid model (``_align_hybrid_block_size``, §1.9): raised
    until one attention page (all KV layers) holds one layer's linear-attention state, in steps of
    ``align`` (FlashAttention's 16). None for full-attention models.

    Qwen3.5/3.6-27B: 784 (fp32 SSM state), 35B-A3B: 1056, Qwen3-Next-80B (bf16 state): 544.
    """
    spec = kv_spec(model)
    if not spec.linear_layers:
        return None
    per_layer_state = spec.state_bytes(dtype_bytes) / spec.linear_layers
    per_layer_token = spec.bytes_per_token(dtype_bytes) // spec.kv_layers
    return align * math.ceil(per_layer_state / (align * per_layer_token))


def state_blocks(model: str, block_size: int, *, dtype_bytes: int = 2) -> int:
    """Blocks of ``block_size`` tokens one running sequence's fixed state takes (0 if none)."""
    spec = kv_spec(model)
    state = spec.state_bytes(dtype_bytes)
    return math.ceil(state / (block_size * spec.bytes_per_token(dtype_bytes))) if state else 0

"""Step-time models (cache_spec.md §5.2) and KV capacity from GPU memory (§1.10, §4).

Every number here is a prior, not a measurement: no GPU was used.

* ``dynamo``: NVIDIA Dynamo mocker's polynomials [3P]: prefill
  ``ms = 4.209989e-7 T^2 + 1.518344e-2 T + 16.50`` (``T`` new prefill tokens in the step) and
  decode ``ms = -25.74 p^2 + 54.01 p + 5.74`` (``p`` = pinned KV / total KV).  Calibration model
  and GPU unknown.  A step that mixes prefill and decode costs the sum (our assumption).
* ``roofline``: ``max(FLOPs / (peak x MFU), bytes / (HBM x eff)) + overhead`` for a named model
  on a named GPU.  FLOPs = ``2 N_active`` per scheduled token + ``4 L_attn d_q ctx`` attention per
  token; bytes = all weights once per step + the KV of every scheduled request's context.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ...errors import PolicyError
from ..cache import kv_spec
from .engine import StepPlan

__all__ = [
    "GPUS",
    "MODELS",
    "STEP_MODELS",
    "Gpu",
    "ModelCompute",
    "StepTime",
    "capacity_blocks_for",
    "dynamo_step",
    "gpu",
    "make_step_time",
    "roofline_step",
]

GIB = 1 << 30

StepTime = Callable[[StepPlan], float]
"""Seconds one engine step takes."""


@dataclass(frozen=True, slots=True)
class ModelCompute:
    """What the roofline needs: active/total parameters and the attention width (§4 configs)."""

    active_params: float
    total_params: float
    attn_layers: int  # layers with full attention (KV)
    q_dim: int  # n_heads x head_dim of those layers


MODELS: dict[str, ModelCompute] = {
    # Qwen3.6-27B: hybrid, 16 of 64 layers full attention, 24 q heads x 256 [3P config copy]
    "qwen3.6-27b": ModelCompute(27e9, 27e9, 16, 24 * 256),
    # Qwen3.6-35B-A3B: MoE, 3B active, 10 of 40 layers full attention, 16 q heads x 256 [3P]
    "qwen3.6-35b-a3b": ModelCompute(3e9, 35e9, 10, 16 * 256),
    "qwen3-32b": ModelCompute(32.8e9, 32.8e9, 64, 64 * 128),
    "llama-3.1-8b": ModelCompute(8e9, 8e9, 32, 32 * 128),
    "llama-3.1-70b": ModelCompute(70.6e9, 70.6e9, 80, 64 * 128),
}


@dataclass(frozen=True, slots=True)
class Gpu:
    flops: float  # dense bf16 peak
    hbm_bytes_s: float
    memory_gib: float


GPUS: dict[str, Gpu] = {  # vendor specs, not re-verified (§5.2)
    "h100": Gpu(989e12, 3.35e12, 79.6),
    # memory as nvidia-smi reports it: H100 SXM 81,559 MiB, H200 143,771 MiB ("141 GB")
    "h200": Gpu(989e12, 4.8e12, 140.4),
    "a100": Gpu(312e12, 2.0e12, 79.2),
}

MFU = 0.5  # prefill MFU prior [UNVERIFIED]
HBM_EFF = 0.8  # achievable fraction of HBM bandwidth [UNVERIFIED]
OVERHEAD_S = 0.002  # per-step scheduling/launch overhead [UNVERIFIED]
GPU_MEMORY_UTILIZATION = 0.92  # vLLM 0.33.0 default
ACTIVATION_RESERVE_GIB = 4.0  # activations + CUDA graphs [UNVERIFIED magnitude]


def model_compute(model: str) -> ModelCompute:
    try:
        return MODELS[model.lower()]
    except KeyError:
        raise PolicyError(f"unknown model {model!r}; known: {', '.join(MODELS)}") from None


def gpu(name: str) -> Gpu:
    try:
        return GPUS[name.lower()]
    except KeyError:
        raise PolicyError(f"unknown GPU {name!r}; known: {', '.join(GPUS)}") from None


def dynamo_step(plan: StepPlan) -> float:
    """Dynamo mocker polynomial (ms -> s); prefill + decode when a step has both."""
    ms = 0.0
    t = plan.prefill_tokens
    if t:
        ms += 4.209989e-7 * t * t + 1.518344e-2 * t + 16.50
    if plan.decode_seqs:
        p = plan.kv_used_blocks / plan.kv_total_blocks if plan.kv_total_blocks else 0.0
        ms += -25.74 * p * p + 54.01 * p + 5.74
    return ms / 1000.0


def roofline_step(model: str, gpu_name: str = "h100", *, dtype_bytes: int = 2) -> StepTime:
    """A roofline step-time function for ``model`` on one ``gpu_name``."""
    mc = model_compute(model)
    g = gpu(gpu_name)
    kv_per_token = kv_spec(model).bytes_per_token(dtype_bytes)
    weights = mc.total_params * dtype_bytes
    per_token_flops = 2 * mc.active_params
    attn = 4 * mc.attn_layers * mc.q_dim

    def step(plan: StepPlan) -> float:
        tokens = plan.prefill_tokens + plan.decode_seqs
        flops = per_token_flops * tokens + attn * (plan.prefill_attn + plan.decode_ctx)
        ctx = plan.decode_ctx + sum(r.num_computed for r, n in plan.scheduled if n > 1)
        bytes_ = weights + kv_per_token * ctx
        return max(flops / (g.flops * MFU), bytes_ / (g.hbm_bytes_s * HBM_EFF)) + OVERHEAD_S

    return step


STEP_MODELS = ("roofline", "dynamo")


def make_step_time(name: str, model: str = "qwen3.6-27b", gpu_name: str = "h100") -> StepTime:
    if name == "dynamo":
        return dynamo_step
    if name == "roofline":
        return roofline_step(model, gpu_name)
    raise PolicyError(f"unknown step-time model {name!r}; valid choices: {', '.join(STEP_MODELS)}")


def capacity_blocks_for(
    model: str,
    gpu_gib: float,
    *,
    block_size: int = 16,
    dtype_bytes: int = 2,
    reserve_gib: float = ACTIVATION_RESERVE_GIB,
    utilization: float = GPU_MEMORY_UTILIZATION,
) -> int:
    """KV blocks left on a ``gpu_gib`` GPU after weights and a reserve (§1.10).

    ``gpu_gib * utilization - weights - reserve``, divided by ``block_size`` tokens of KV.
    Hybrid models' per-sequence linear-attention state is not subtracted here: the simulator pins
    it per running sequence (``ServerConfig.state_blocks``).
    """
    mc = model_compute(model)
    per_block = block_size * kv_spec(model).bytes_per_token(dtype_bytes)
    avail = gpu_gib * GIB * utilization - mc.total_params * dtype_bytes - reserve_gib * GIB
    blocks = int(avail // per_block)
    if blocks < 1:
        raise PolicyError(
            f"{model} does not fit on {gpu_gib:g} GiB: weights {mc.total_params * dtype_bytes / GIB:.1f} GiB "
            f"+ reserve {reserve_gib:g} GiB exceed {utilization:.0%} of the memory"
        )
    return blocks

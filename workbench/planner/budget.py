"""How much memory vLLM gives the KV cache.

Exact when the launch fixes it: VLLM_CPU_KVCACHE_SPACE on the CPU engine, or
--kv-cache-memory-bytes. Otherwise vLLM profiles at start-up (v1/worker/gpu_worker.py,
determine_available_memory):

    requested = ceil(total x --gpu-memory-utilization)
    available = requested - (weights + activation peak + non-torch memory) - CUDA graphs

The planner cannot run a profile, so the held-back part is an estimate, said as
one: the activation peak of a dummy batch of max_num_batched_tokens (the widest
per-token tensors of a layer, in the model dtype) plus the sampler's fp32 logits
for max_num_seqs, the non-torch memory the profile run adds on a GPU (cuBLAS's
handle and workspace, measured on an H200: planner/gpu_overhead.py; the CUDA
context is made before vLLM's snapshot, so it is outside the budget), and an
allowance for CUDA graphs unless --enforce-eager.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from math import ceil
from typing import Any

from workbench.planner.architecture import Architecture
from workbench.planner.gpu_overhead import CUBLAS_WORKSPACE_BYTES, MEASURED_ON
from workbench.planner.settings import GIB, ServingSettings
from workbench.planner.weights import DTYPE_BYTES, WeightEstimate

__all__ = ["CUDA_GRAPH_ALLOWANCE_GIB", "KVBudget", "activation_peak_bytes", "kv_budget"]

# An assumption of this planner, not vLLM's number: vLLM measures it at start-up.
CUDA_GRAPH_ALLOWANCE_GIB = 1.0


@dataclass(frozen=True)
class KVBudget:
    available_bytes: int
    exact: bool
    how: str
    total_bytes: int | None = None
    requested_bytes: int | None = None
    weight_bytes: int | None = None
    activation_bytes: int = 0
    non_torch_bytes: int = 0
    cuda_graph_bytes: int = 0
    non_torch_why: str = ""

    @property
    def held_back_bytes(self) -> int:
        """What vLLM keeps out of the KV cache besides the weights (estimated)."""
        return self.activation_bytes + self.non_torch_bytes + self.cuda_graph_bytes

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["held_back_bytes"] = self.held_back_bytes
        return d


def activation_peak_bytes(arch: Architecture, settings: ServingSettings) -> int:
    """Estimate of the profile run's transient peak: the widest tensors one token makes
    in a layer (hidden in and out, plus the widest projection), for a full batch, and
    the sampler's fp32 logits for every sequence."""
    widths = [arch.num_attention_heads * arch.head_dim + 2 * arch.num_kv_heads * arch.head_dim]
    if arch.mamba:
        widths.append(arch.mamba.intermediate_size + arch.mamba.conv_dim + arch.mamba.num_heads)
    if arch.moe:
        # Routed tokens are copied per chosen expert before the expert GEMMs.
        e = arch.moe
        widths.append(e.experts_per_token * (e.intermediate_size + (e.latent_size or arch.hidden_size)))
    if arch.mlp_intermediate_size:
        widths.append(2 * arch.mlp_intermediate_size)
    element = DTYPE_BYTES.get(arch.model_dtype, 2)
    per_token = (2 * arch.hidden_size + max(widths)) * element // settings.tensor_parallel_size
    logits = settings.max_num_seqs * arch.vocab_size * 4
    return settings.max_num_batched_tokens * per_token + logits


def kv_budget(arch: Architecture, settings: ServingSettings, memory_gib: float,
              weights: WeightEstimate | None, overhead_gib: float | None = None) -> KVBudget:
    """The KV budget of one rank; `overhead_gib` replaces the held-back estimate."""
    if settings.kv_cache_memory_bytes:
        return KVBudget(settings.kv_cache_memory_bytes, True, f"{settings.kv_cache_memory_why} sets it")
    total = int(memory_gib * GIB)
    requested = ceil(total * settings.gpu_memory_utilization)
    weight = (weights.bytes // settings.tensor_parallel_size) if weights else 0
    if overhead_gib is not None:
        activation, non_torch, graphs = int(overhead_gib * GIB), 0, 0
        how = f"{memory_gib:g} GiB x {settings.gpu_memory_utilization:g}, less the weights and {overhead_gib:g} GiB given"
    else:
        activation = activation_peak_bytes(arch, settings)
        # The CPU engine has no cuBLAS; on a GPU, the first cuBLAS matmul's cost as measured.
        non_torch = 0 if settings.platform == "cpu" else CUBLAS_WORKSPACE_BYTES
        graphs = 0 if settings.enforce_eager or settings.platform == "cpu" else int(CUDA_GRAPH_ALLOWANCE_GIB * GIB)
        how = (f"estimate: {memory_gib:g} GiB x {settings.gpu_memory_utilization:g}, less the weights and what "
               "vLLM's start-up profile holds back (estimated here; vLLM logs the real figure as "
               "'Available KV cache memory')")
    available = requested - weight - activation - non_torch - graphs
    why = f"cuBLAS handle and workspace, {MEASURED_ON}" if non_torch else ""
    return KVBudget(available, False, how, total, requested, weight, activation, non_torch, graphs, why)

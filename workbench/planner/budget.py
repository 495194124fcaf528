"""How much memory vLLM gives the KV cache.

Exact when the launch fixes it: VLLM_CPU_KVCACHE_SPACE on the CPU engine, or
--kv-cache-memory-bytes. Otherwise vLLM profiles at start-up (v1/worker/gpu_worker.py,
determine_available_memory; 0.26.0 logs the parts as "Actual usage is ..."):

    requested = ceil(CUDA-visible total x --gpu-memory-utilization)
    available = requested - weights - activation peak - non-torch memory - CUDA graphs

The planner cannot run a profile, so the held-back parts are estimates, said as such:

- activation peak: the larger of the dummy forward pass (max_num_batched_tokens tokens
  through the widest per-token tensors of a layer) and the dummy sampler run, which
  dominates small models. vLLM samples max_num_seqs dummy requests over the whole
  vocabulary (GPUModelRunner._dummy_sampler_run): the logits in the model dtype, their
  fp32 copy, the probabilities and the exponential noise live at once (d + 12 bytes per
  request and token of the vocabulary, d the model dtype's size); with speculative
  decoding the rejection sampler's dummy run peaks higher (3d + 24: twice the rows of
  logits, the bonus rows' copy and fp32 logits kept for logprobs, the target rows in fp32
  and their clone, probabilities, noise and its reciprocal). Add Triton's top-k/top-p
  buffer (one vocabulary row per SM) and the forward pass's hidden states, still held.
- non-torch memory and CUDA graphs: as vLLM 0.26.0 reported them on an H100
  (planner/gpu_overhead.py); CUDA graphs counted as vLLM counts the graphs it captures.
  The CUDA context is made before vLLM's snapshot, so it is outside the budget.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from math import ceil
from typing import Any

from workbench.planner.architecture import Architecture
from workbench.planner.gpu_overhead import (
    CUDA_GRAPH_BYTES_PER_GRAPH, VLLM_NON_TORCH_BYTES, VLLM_PROFILE_MEASURED_ON, GpuMemory,
)
from workbench.planner.settings import GIB, ServingSettings
from workbench.planner.weights import DTYPE_BYTES, WeightEstimate

__all__ = ["DEFAULT_SM_COUNT", "KVBudget", "activation_peak_bytes", "cuda_graph_count", "forward_peak_bytes",
           "kv_budget", "sampler_peak_bytes"]

# Where the GPU is not one of GPU_MEMORY's: Hopper's 132 SMs (the buffer is a few MiB per SM).
DEFAULT_SM_COUNT = 132
# vLLM's default capture sizes stop at 512 tokens (VllmConfig._set_cudagraph_sizes).
_MAX_CAPTURE_SIZE = 512


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
    total_why: str = ""
    activation_why: str = ""
    cuda_graphs: int = 0  # how many graphs vLLM captures (0: eager or CPU)

    @property
    def held_back_bytes(self) -> int:
        """What vLLM keeps out of the KV cache besides the weights (estimated)."""
        return self.activation_bytes + self.non_torch_bytes + self.cuda_graph_bytes

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["held_back_bytes"] = self.held_back_bytes
        return d


def _element(arch: Architecture) -> int:
    return DTYPE_BYTES.get(arch.model_dtype, 2)


def forward_peak_bytes(arch: Architecture, settings: ServingSettings) -> int:
    """The dummy forward pass: the widest tensors one token makes in a layer (hidden in and
    out, plus the widest projection), for a full batch of max_num_batched_tokens."""
    widths = [arch.num_attention_heads * arch.head_dim + 2 * arch.num_kv_heads * arch.head_dim]
    if arch.mamba:
        widths.append(arch.mamba.intermediate_size + arch.mamba.conv_dim + arch.mamba.num_heads)
    if arch.moe:
        # Routed tokens are copied per chosen expert before the expert GEMMs.
        e = arch.moe
        widths.append(e.experts_per_token * (e.intermediate_size + (e.latent_size or arch.hidden_size)))
    if arch.mlp_intermediate_size:
        widths.append(2 * arch.mlp_intermediate_size)
    per_token = (2 * arch.hidden_size + max(widths)) * _element(arch) // settings.tensor_parallel_size
    return settings.max_num_batched_tokens * per_token


def sampler_peak_bytes(arch: Architecture, settings: ServingSettings, sm_count: int = DEFAULT_SM_COUNT) -> int:
    """The dummy sampler run after the forward pass (see the module's docstring)."""
    d = _element(arch)
    requests = min(settings.max_num_seqs, settings.max_num_batched_tokens)
    per_entry = 3 * d + 24 if settings.num_speculative_tokens else d + 12
    logits = per_entry * requests * arch.vocab_size
    topk_topp_buffer = min(sm_count, requests) * arch.vocab_size * 4
    hidden_states = settings.max_num_batched_tokens * arch.hidden_size * d
    return logits + topk_topp_buffer + hidden_states


def activation_peak_bytes(arch: Architecture, settings: ServingSettings, sm_count: int = DEFAULT_SM_COUNT) -> int:
    """Estimate of the profile run's peak of torch allocations above the weights."""
    return max(forward_peak_bytes(arch, settings), sampler_peak_bytes(arch, settings, sm_count))


def cuda_graph_count(settings: ServingSettings) -> int:
    """Graphs vLLM captures with its default sizes and FULL_AND_PIECEWISE mode: one piecewise
    graph per capture size, one full graph per size a batch of decodes fills
    (VllmConfig._set_cudagraph_sizes, CudagraphDispatcher.initialize_cudagraph_keys). An
    attention backend that cannot run full graphs captures fewer; the count is then high."""
    if settings.enforce_eager or settings.platform == "cpu":
        return 0
    query = 1 + settings.num_speculative_tokens
    largest = min(settings.max_num_seqs * query * 2, _MAX_CAPTURE_SIZE, settings.max_num_batched_tokens)
    sizes = {s for s in (1, 2, 4) if s <= largest}
    sizes.update(range(8, min(largest + 1, 256), 8))
    if largest >= 256:
        sizes.update(range(256, largest + 1, 16))
    if settings.max_num_batched_tokens <= largest:
        sizes.add(settings.max_num_batched_tokens)
    if query > 1:
        # Full decode graphs with speculative tokens: sizes rounded up to whole decode batches
        # (CompilationConfig.adjust_cudagraph_sizes_for_spec_decode, the V1 model runner's).
        sizes = {r for r in (-(-s // query) * query for s in sizes) if r <= largest}
    full = [s for s in sizes if query <= s <= query * settings.max_num_seqs]
    return len(sizes) + len(full)


def kv_budget(arch: Architecture, settings: ServingSettings, total_bytes: int, weights: WeightEstimate | None,
              overhead_gib: float | None = None, gpu: GpuMemory | None = None, total_why: str = "") -> KVBudget:
    """The KV budget of one rank with `total_bytes` of memory; `overhead_gib` replaces the
    held-back estimate; `gpu` (when known) sizes the sampler's buffer."""
    if settings.kv_cache_memory_bytes:
        return KVBudget(settings.kv_cache_memory_bytes, True, f"{settings.kv_cache_memory_why} sets it")
    memory_gib = total_bytes / GIB
    requested = ceil(total_bytes * settings.gpu_memory_utilization)
    weight = (weights.bytes // settings.tensor_parallel_size) if weights else 0
    graphs = 0
    activation_why = non_torch_why = ""
    if overhead_gib is not None:
        activation, non_torch, graph_bytes = int(overhead_gib * GIB), 0, 0
        how = (f"{round(memory_gib, 2):g} GiB x {settings.gpu_memory_utilization:g}, less the weights and "
               f"{overhead_gib:g} GiB given")
    else:
        sm_count = gpu.sm_count if gpu else DEFAULT_SM_COUNT
        forward, sampler = forward_peak_bytes(arch, settings), sampler_peak_bytes(arch, settings, sm_count)
        activation = max(forward, sampler)
        activation_why = (f"the sampler's dummy run over {min(settings.max_num_seqs, settings.max_num_batched_tokens):,}"
                          f" requests x {arch.vocab_size:,} tokens" if sampler >= forward else
                          f"the dummy forward pass of {settings.max_num_batched_tokens:,} tokens")
        on_gpu = settings.platform != "cpu"
        non_torch = VLLM_NON_TORCH_BYTES if on_gpu else 0
        non_torch_why = VLLM_PROFILE_MEASURED_ON if on_gpu else ""
        graphs = cuda_graph_count(settings)
        graph_bytes = graphs * CUDA_GRAPH_BYTES_PER_GRAPH
        how = (f"estimate: {round(memory_gib, 2):g} GiB x {settings.gpu_memory_utilization:g}, less the weights and what "
               "vLLM's start-up profile holds back (estimated here; vLLM logs the real figure as "
               "'Available KV cache memory')")
    available = requested - weight - activation - non_torch - graph_bytes
    return KVBudget(available, False, how, total_bytes, requested, weight, activation, non_torch, graph_bytes,
                    non_torch_why, total_why, activation_why, graphs)

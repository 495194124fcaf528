"""What a CUDA process takes of a GPU before and besides its tensors: measured, not guessed.

Measured on one H200 SXM (driver 580.159.04, CUDA 13.0, torch 2.11.0+cu130) by
benchmarks/gpu_probe.py in a fresh process; the raw figures are
tests/fixtures/nvidia-h200-telemetry/context-cublas.json (tests/test_planner_overhead.py
derives these constants from it again):

- the driver keeps DRIVER_RESERVE_BYTES out of every process's reach (NVML "used" before any
  CUDA; `nvidia-smi -q` shows it as "Reserved: 616 MiB"); torch's and vLLM's "total" exclude it;
- creating the CUDA context takes CUDA_CONTEXT_BYTES (torch.cuda.mem_get_info: total - free);
- the first cuBLAS matmul takes CUBLAS_WORKSPACE_BYTES beyond its operands (32 MiB of it is
  cuBLAS's workspace in torch's allocator, the rest the cuBLAS handle and its kernels).

How vLLM 0.32 counts them (v1/worker/gpu_worker.py): its start-up snapshot is taken after the
context, so the KV budget, ceil(total x --gpu-memory-utilization) less what the profile run
adds, holds back the cuBLAS part but not the context; the context must instead be free beside
that share when vLLM starts.

What vLLM 0.26.0 itself reported at start-up on an H100 80GB HBM3 (its
"Free memory on device ... Actual usage is ..." line, 0.01 GiB steps;
tests/fixtures/vllm-0.26.0-cuda-h100/, re-derived by tests/test_planner_gpu_replay.py):

- non-torch memory of the start-up profile (cuBLAS, loaded kernels, NCCL): 0.22 GiB
  serving SmolLM2-135M eager, 0.23 GiB serving a tiny Nemotron-H MoE with CUDA graphs;
  VLLM_NON_TORCH_BYTES is the larger. The cuBLAS part alone is the H200 figure above.
- CUDA graph memory as vLLM estimates it before capture: 0.18 GiB for 86 graphs (51
  piecewise, 35 full) of the 8-layer Nemotron-H; CUDA_GRAPH_BYTES_PER_GRAPH is that
  per graph. One recording of a small model: larger models may take more per graph.

GPU_MEMORY holds each lent GPU's CUDA-visible total (what vLLM multiplies by
--gpu-memory-utilization): NVML's total less the driver's reserve.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CUBLAS_WORKSPACE_BYTES", "CUDA_CONTEXT_BYTES", "CUDA_GRAPH_BYTES_PER_GRAPH", "DRIVER_RESERVE_BYTES",
           "GPU_MEMORY", "GpuMemory", "MEASURED_ON", "VLLM_NON_TORCH_BYTES", "VLLM_PROFILE_MEASURED_ON"]

MEASURED_ON = "measured on an H200 (driver 580.159.04, torch 2.11.0+cu130; benchmarks/gpu_probe.py)"
DRIVER_RESERVE_BYTES = 644_939_776
CUDA_CONTEXT_BYTES = 552_402_944
CUBLAS_WORKSPACE_BYTES = 102_760_448

VLLM_PROFILE_MEASURED_ON = "as vLLM 0.26.0 reported it on an H100 80GB HBM3 (tests/fixtures/vllm-0.26.0-cuda-h100)"
VLLM_NON_TORCH_BYTES = 246_960_620  # 0.23 GiB
CUDA_GRAPH_BYTES_PER_GRAPH = 2_247_367  # 0.18 GiB / 86 graphs


@dataclass(frozen=True)
class GpuMemory:
    """One GPU model's memory as a CUDA process sees it."""

    name: str  # as NVML names it
    cuda_total_bytes: int  # torch.cuda.mem_get_info()'s total: NVML total less the driver's reserve
    sm_count: int  # streaming multiprocessors (NVIDIA's datasheet): sizes the sampler's top-k/top-p buffer
    source: str


GPU_MEMORY = {
    "h100": GpuMemory("NVIDIA H100 80GB HBM3", 85_017_493_504, 132,
                      "NVML's total less its reserved memory on the lent H100 (driver 580.159.04); vLLM 0.26.0 "
                      "logged the same 79.18 GiB"),
    "h200": GpuMemory("NVIDIA H200", 150_109_880_320, 132,
                      f"torch.cuda.mem_get_info's total, {MEASURED_ON}"),
}

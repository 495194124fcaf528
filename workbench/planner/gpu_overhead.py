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
"""

from __future__ import annotations

__all__ = ["CUBLAS_WORKSPACE_BYTES", "CUDA_CONTEXT_BYTES", "DRIVER_RESERVE_BYTES", "MEASURED_ON"]

MEASURED_ON = "measured on an H200 (driver 580.159.04, torch 2.11.0+cu130; benchmarks/gpu_probe.py)"
DRIVER_RESERVE_BYTES = 644_939_776
CUDA_CONTEXT_BYTES = 552_402_944
CUBLAS_WORKSPACE_BYTES = 102_760_448

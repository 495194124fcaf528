"""The planner's GPU holdback comes from what was measured on real GPUs (an H200, and vLLM
0.26.0's own report on an H100), and says so."""

from __future__ import annotations

import json
from pathlib import Path

from workbench.planner import plan_memory
from workbench.planner.gpu_overhead import (
    CUBLAS_WORKSPACE_BYTES, CUDA_CONTEXT_BYTES, DRIVER_RESERVE_BYTES, GPU_MEMORY, MEASURED_ON, VLLM_NON_TORCH_BYTES,
    VLLM_PROFILE_MEASURED_ON,
)
from workbench.recipes import Selection, load_catalog, render

FIXTURES = Path(__file__).parent / "fixtures"
MEASURED = json.loads((FIXTURES / "nvidia-h200-telemetry" / "context-cublas.json").read_text())
NANO_CONFIG = FIXTURES / "public-configs" / "nemotron-3-nano-30b-a3b.config.json"


def test_the_constants_are_the_recordings_arithmetic():
    assert DRIVER_RESERVE_BYTES == MEASURED["nvml_before_cuda"]["used"]
    ctx = MEASURED["after_context"]
    assert CUDA_CONTEXT_BYTES == ctx["total"] - ctx["free"]
    # torch's total is NVML's less the driver's reserve
    assert ctx["total"] == MEASURED["nvml_before_cuda"]["total"] - DRIVER_RESERVE_BYTES
    before, after = MEASURED["after_operands"], MEASURED["after_first_matmul"]
    assert CUBLAS_WORKSPACE_BYTES == before["free"] - after["free"]
    # of which 32 MiB is cuBLAS's workspace in torch's allocator; the operands were allocated before
    assert after["reserved"] - before["reserved"] == 32 * 1024 * 1024
    # the per-process figure NVML gives agrees with the context to within 2 %
    assert abs(ctx["processes"][0]["used"] - CUDA_CONTEXT_BYTES) / CUDA_CONTEXT_BYTES < 0.02
    # nvidia-smi -q of the same GPU shows the reserve as 616 MiB
    assert round(DRIVER_RESERVE_BYTES / 2**20) == 615 and "Reserved                                       : 616 MiB" in \
        (FIXTURES / "nvidia-h200-telemetry" / "nvidia-smi-q.txt").read_text()


def test_a_gpu_plan_holds_back_the_measured_figures_and_names_them():
    catalog = load_catalog()
    memory = plan_memory(render(Selection(hardware="h200"), catalog), catalog, config_path=NANO_CONFIG)
    b = memory.budget
    # The GPU's memory is the H200's CUDA-visible total measured here, not the taxonomy's 141 GB.
    assert b.total_bytes == GPU_MEMORY["h200"].cuda_total_bytes == MEASURED["after_context"]["total"]
    assert MEASURED_ON in b.total_why and not any("taxonomy" in n for n in memory.notes)
    # Non-torch memory is what vLLM's own profile reported (cuBLAS is part of it), and says so.
    assert b.non_torch_bytes == VLLM_NON_TORCH_BYTES > CUBLAS_WORKSPACE_BYTES
    assert VLLM_PROFILE_MEASURED_ON in b.non_torch_why
    text = memory.describe().splitlines()
    assert any(f"non-torch 0.23 GiB [{VLLM_PROFILE_MEASURED_ON}]" in line for line in text)
    assert any(line.startswith("GPU memory: 139.80 GiB (one NVIDIA H200 as CUDA sees it") for line in text)


def test_the_cpu_engine_holds_back_no_cublas():
    catalog = load_catalog()
    memory = plan_memory(render(Selection(hardware="cpu"), catalog), catalog)
    assert memory.budget.non_torch_bytes == 0

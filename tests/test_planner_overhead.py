"""The planner's GPU holdback comes from what was measured on a real H200, and says so."""

from __future__ import annotations

import json
from pathlib import Path

from workbench.planner import plan_memory
from workbench.planner.gpu_overhead import (
    CUBLAS_WORKSPACE_BYTES, CUDA_CONTEXT_BYTES, DRIVER_RESERVE_BYTES, MEASURED_ON,
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


def test_a_gpu_plan_holds_back_the_measured_figure_and_names_it():
    catalog = load_catalog()
    memory = plan_memory(render(Selection(hardware="h200"), catalog), catalog, config_path=NANO_CONFIG)
    assert memory.budget.non_torch_bytes == CUBLAS_WORKSPACE_BYTES
    assert MEASURED_ON in memory.budget.non_torch_why
    assert any("non-torch 0.10 GiB [cuBLAS handle and workspace, measured on an H200" in line
               for line in memory.describe().splitlines())


def test_the_cpu_engine_holds_back_no_cublas():
    catalog = load_catalog()
    memory = plan_memory(render(Selection(hardware="cpu"), catalog), catalog)
    assert memory.budget.non_torch_bytes == 0

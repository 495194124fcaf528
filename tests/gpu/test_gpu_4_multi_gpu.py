"""Several GPUs of one host: the rehearsal model with tensor, expert and data parallel 2.

Runs where two or more NVIDIA GPUs are present (a lent nvidia-h100-x2 / nvidia-h200-x2),
skipped elsewhere with the reason. NVLink multicast stays off in every server the
workbench starts (NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1,
NVSHMEM_DISABLE_NVLS=1, carried from the suite's environment: scripts/gpu_suite.sh sets them).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import psutil
import pytest

from tests.gpu.harness import (
    Report, gpu_memory_used_gib, process_tree, read_gpus, serve_cli, stop_cli, wait_for,
)
from workbench.demo.models import cache_dir
from workbench.demo.rehearsal import REHEARSAL_NAME
from workbench.planner import planner_vs_log
from workbench.server import free_port
from workbench.server.command import CARRIED_ENV
from workbench.server.hardware import Detection

pytestmark = pytest.mark.gpu

STRATEGIES = {
    "tensor parallel 2": ["--extra", "--tensor-parallel-size 2"],
    "tensor + expert parallel 2 (single_node_tep)": ["--strategy", "single_node_tep",
                                                     "--extra", "--tensor-parallel-size 2"],
    "data parallel 2": ["--extra", "--data-parallel-size 2"],
}


@pytest.fixture(scope="module")
def two_gpus(gpu_machine: Detection) -> Detection:
    if len(gpu_machine.gpus) < 2:
        pytest.skip(f"needs 2 or more GPUs; this machine has {len(gpu_machine.gpus)} ({gpu_machine.reason})")
    missing = [k for k in CARRIED_ENV if k not in os.environ]
    if missing:
        pytest.skip(f"NVLink multicast must stay off here: set {', '.join(missing)} (scripts/gpu_suite.sh does)")
    return gpu_machine


def test_detection_counts_every_gpu(two_gpus: Detection, report: Report) -> None:
    reading = read_gpus()
    report.section("Detection, several GPUs", f"{two_gpus.reason}; NVML lists {len(reading.gpus)} GPUs")
    assert len(reading.gpus) == len(two_gpus.gpus) >= 2


@pytest.mark.parametrize("name", list(STRATEGIES))
def test_rehearsal_across_two_gpus(name: str, two_gpus: Detection, gpu_state_dir: Path, report: Report) -> None:
    served = serve_cli("--hardware", two_gpus.hardware_id, "--rehearsal", *STRATEGIES[name], port=free_port(),
                       state_dir=gpu_state_dir)
    report.section(f"Rehearsal, {name}", served.transcript())
    try:
        assert served.returncode == 0 and served.handle is not None, served.stderr[-3000:]
        report.keep(f"rehearsal_{name.split()[0]}_{len(two_gpus.gpus)}gpu.log", served.log_text)
        tree = process_tree(served.handle.pid or 0)
        env = psutil.Process(served.handle.pid or 0).environ()
        assert all(env.get(k) == os.environ[k] for k in CARRIED_ENV)
        reading = read_gpus()
        used = gpu_memory_used_gib(reading)
        on_gpu = [sorted({p.pid for p in g.processes or ()} & tree) for g in reading.gpus]
        comparison = planner_vs_log(served.log_text, model_dir=cache_dir() / REHEARSAL_NAME,
                                    hardware=two_gpus.hardware_id)
        report.section(f"Planner vs vLLM, {name}", comparison.describe() + f"\nGPU memory in use per GPU: "
                       + ", ".join(f"{u:.1f} GiB" for u in used) + f"; the server's processes per GPU: {on_gpu}")
        report.keep(f"planner_{name.split()[0]}.json", json.dumps(comparison.to_dict(), indent=1, default=str))
        assert all(u > 1.0 for u in used[:2]), "both GPUs hold the model"
        assert all(on_gpu[:2]), "NVML lists the server's processes on both GPUs"
        assert comparison.tokens_pct is not None and abs(comparison.tokens_pct) <= 2.0
    finally:
        stop_cli(served.port, gpu_state_dir)
    assert wait_for(lambda: all(u < 1.0 for u in gpu_memory_used_gib(read_gpus())), timeout=60), \
        "every GPU's memory is released at stop"

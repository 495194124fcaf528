"""The GPU suite's fixtures: skipped, with the reason, where there is no NVIDIA GPU or no CUDA vLLM.

Run it on a GPU machine with `bash scripts/gpu_suite.sh` (or `pytest tests/gpu -m gpu`);
CI has no GPU and skips it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import pytest

from tests.gpu.harness import Report, report_dir
from workbench.server.hardware import Detection, detect_hardware


def _cuda_vllm() -> str | None:
    """Why there is no CUDA vLLM here, or None when there is one."""
    try:
        version = metadata.version("vllm")
    except metadata.PackageNotFoundError:
        return "vLLM is not installed"
    if version.endswith("+cpu"):
        return f"the installed vLLM is the CPU build ({version})"
    return None


@pytest.fixture(scope="session")
def gpu_machine() -> Detection:
    """The GPUs here, as the workbench names them; the suite is skipped without a GPU and a CUDA vLLM."""
    detection = detect_hardware()
    if detection.hardware_id == "cpu":
        pytest.skip(f"no CUDA GPU: {detection.reason}")
    missing = _cuda_vllm()
    if missing:
        pytest.skip(f"no CUDA vLLM: {missing}")
    return detection


@pytest.fixture(scope="session")
def report() -> Report:
    return Report(report_dir())


@pytest.fixture(scope="session")
def gpu_state_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The suite's own server records, apart from any the user has."""
    path = tmp_path_factory.mktemp("gpu-servers")
    old = os.environ.get("WORKBENCH_STATE_DIR")
    os.environ["WORKBENCH_STATE_DIR"] = str(path)
    yield path
    if old is None:
        os.environ.pop("WORKBENCH_STATE_DIR", None)
    else:
        os.environ["WORKBENCH_STATE_DIR"] = old

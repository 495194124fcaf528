"""Is this machine ready for a launch: what a DGX Spark launch needs, and whether a plan's image is pulled.

Each check reports what it found and what to do when it fails (`EnvironmentCheck`, checks.py); none raises.
The other checks of a launch are where their job is: the weights (hub.py), the memory free now
(headroom.py); a room's day-of checks compose them (workbench.workshop.day_of).
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from workbench.server import hardware
from workbench.server.checks import EnvironmentCheck
from workbench.server.command import docker_engine_problem
from workbench.server.hub import hf_cache_dir, model_cache_folder

__all__ = ["docker_image_check", "environment_checks"]

def environment_checks(model_id: str, *, min_memory_gb: float = 100.0, min_disk_gb: float = 80.0,
                       meminfo: Path = Path("/proc/meminfo"), model_in_cache: bool = True) -> list[EnvironmentCheck]:
    """GPU, memory, Docker, the model in the Hugging Face cache (unless `model_in_cache` is False:
    a caller that checks the weights more closely), free disk. Reports; never raises.

    GB10's memory is unified with the CPU's and nvidia-smi reports it as "Not
    Supported", so memory is read from /proc/meminfo (workbench.server.hardware)."""
    checks: list[EnvironmentCheck] = []
    detection = hardware.detect_hardware()
    if detection.gpus:
        gpu = detection.gpus[0]
        ok = detection.hardware_id == "dgx_spark_gb10"
        checks.append(EnvironmentCheck(
            "GPU", "ok" if ok else "warning", f"{detection.reason} → hardware id {detection.hardware_id}",
            "" if ok else f"{gpu.name} is not a GB10: the notebook still works, with the command for "
            f"{detection.hardware_id}."))
    else:
        checks.append(EnvironmentCheck(
            "GPU", "missing", f"no NVIDIA GPU ({detection.reason})",
            "On a DGX Spark, `nvidia-smi` lists an NVIDIA GB10. If it fails there, the NVIDIA driver "
            "is not loaded: install the pending DGX OS updates (`sudo apt update && sudo apt full-upgrade`) "
            "and reboot. On a machine without a GPU, the GPU steps below only render their commands."))
    try:
        memory_gb = hardware.parse_meminfo_gb(meminfo.read_text())
    except OSError:
        memory_gb = None
    if memory_gb is None:
        checks.append(EnvironmentCheck("memory", "missing", f"could not read {meminfo}", "Run on Linux."))
    else:
        enough = memory_gb >= min_memory_gb
        checks.append(EnvironmentCheck(
            "memory (unified, /proc/meminfo)", "ok" if enough else "warning", f"{memory_gb:.0f} GB MemTotal",
            "" if enough else f"The DGX Spark recipe gives vLLM 70% of a GB10's 128 GB; {memory_gb:.0f} GB "
            "here is too little for the NVFP4 checkpoint (18 GB of weights plus KV cache). Close other "
            "programs, or lower --gpu-memory-utilization and --max-model-len."))
    problem = docker_engine_problem()
    checks.append(EnvironmentCheck(
        "docker", "ok" if problem is None else "missing", "the Docker engine answers" if problem is None else problem,
        "" if problem is None else "DGX OS ships Docker with the NVIDIA runtime: `sudo systemctl start docker`, "
        "and add yourself to the docker group (`sudo usermod -aG docker $USER`, then log in again). "
        "Without Docker, install vLLM with pip instead (the plan's install steps)."))
    cache = hf_cache_dir()
    cached = model_cache_folder(model_id, cache)
    if model_in_cache:
        checks.append(EnvironmentCheck(
            "model in the Hugging Face cache", "ok" if cached.is_dir() else "missing",
            f"{cached}" if cached.is_dir() else f"{model_id} is not in {cache}",
            "" if cached.is_dir() else f"Download it once (about 18 GB): `huggingface-cli download {model_id}`; "
            "the first launch also downloads it, which takes long on a slow link."))
    probe = cache if cache.exists() else Path.home()
    free_gb = shutil.disk_usage(probe).free / 1e9
    enough_disk = cached.is_dir() or free_gb >= min_disk_gb
    checks.append(EnvironmentCheck(
        f"free disk ({probe})", "ok" if enough_disk else "warning", f"{free_gb:.0f} GB free",
        "" if enough_disk else f"The checkpoint, a draft model and the image need about {min_disk_gb:.0f} GB: "
        "free space, or point HF_HOME at a bigger disk."))
    return checks


def docker_image_check(image: str, *, runner: Callable[[list[str]], str] | None = None) -> EnvironmentCheck:
    """Is the plan's image already pulled? (Pulling the vLLM image takes many minutes.)"""
    name = f"docker image {image}"
    if runner is None:
        problem = docker_engine_problem()
        if problem is not None:
            return EnvironmentCheck(name, "missing", problem,
                                    "Start Docker (`sudo systemctl start docker`), then "
                                    f"`docker pull {image}` before the room arrives.")
        runner = hardware.run_command
    try:
        found = runner(["docker", "image", "inspect", "--format", "{{.Id}} {{.Size}}", image]).split()
    except subprocess.CalledProcessError:
        return EnvironmentCheck(name, "missing", f"{image} is not pulled on this machine",
                                f"`docker pull {image}` now: it is several GB, too slow to fetch while the room waits.")
    except (OSError, subprocess.SubprocessError) as exc:
        return EnvironmentCheck(name, "missing", f"`docker image inspect` failed: {exc}", "Check that Docker answers.")
    size = f", {int(found[1]) / 1e9:.1f} GB" if len(found) > 1 and found[1].isdigit() else ""
    return EnvironmentCheck(name, "ok", f"{image} ({found[0][:19] if found else '?'}{size})")

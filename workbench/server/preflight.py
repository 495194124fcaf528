"""What a DGX Spark launch needs, checked on this machine before the room arrives.

Each check reports what it found and what to do when it fails; none raises.
"""

from __future__ import annotations

import dataclasses
from functools import partial
import logging
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from workbench.planner.gpu_overhead import CUDA_CONTEXT_BYTES, MEASURED_ON
from workbench.server import hardware
from workbench.telemetry import MEMORY_DEVICE, GpuSource, read_gpus
from workbench.server.command import docker_engine_problem, vllm_executable

__all__ = ["CheckStatus", "EnvironmentCheck", "agent_endpoint_checks", "day_of_checks", "docker_image_check", "download_weights",
           "environment_checks", "hf_cache_dir", "memory_headroom_check", "warm_up_check", "weights_check"]

CheckStatus = Literal["ok", "missing", "warning"]


@dataclass
class EnvironmentCheck:
    """One thing a DGX Spark launch needs: what was found here, and what to do if it is missing."""

    name: str
    status: CheckStatus
    found: str
    fix: str = ""
    settings: tuple[str, ...] = ()  # the workbench settings `fix` is about (see workbench.errors)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def hf_cache_dir() -> Path:
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    return Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface")) / "hub"


def environment_checks(model_id: str, *, min_memory_gb: float = 100.0, min_disk_gb: float = 80.0,
                       meminfo: Path = Path("/proc/meminfo")) -> list[EnvironmentCheck]:
    """GPU, memory, Docker, the model in the Hugging Face cache, free disk. Reports; never raises.

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
    cached = cache / ("models--" + model_id.replace("/", "--"))
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



# ── day-of checks for a workshop room (python -m workbench workshop --check) ──

DEFAULT_GPU_MEMORY_UTILIZATION = 0.92  # vLLM 0.32's default (`vllm serve --help=all`)
MEMORY_QUERY_ARGS = ["nvidia-smi", "--query-gpu=index,name,memory.total,memory.used,compute_cap,driver_version",
                     "--format=csv"]
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt")
MIB = 1024 * 1024
GIB = 1024 * MIB


def _meminfo_kb(text: str, key: str) -> int | None:
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        if name.strip() == key and rest.split():
            return int(rest.split()[0])
    return None


def parse_gpu_memory_used(text: str) -> list[tuple[int, int]]:
    """(total MiB, used MiB) per GPU from MEMORY_QUERY_ARGS' CSV; GPUs whose memory is
    "Not Supported" (GB10: unified memory) are left out."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return []
    header = [c.strip().split(" ")[0].lower() for c in lines[0].split(",")]
    if "memory.total" not in header or "memory.used" not in header:
        return []
    out = []
    for line in lines[1:]:
        row = dict(zip(header, (c.strip() for c in line.split(","))))
        total, used = row.get("memory.total", ""), row.get("memory.used", "")
        if total.split()[:1] and total.split()[0].isdigit() and used.split()[:1] and used.split()[0].isdigit():
            out.append((int(total.split()[0]), int(used.split()[0])))
    return out


def weights_check(model_id: str, *, cache_dir: Path | None = None) -> EnvironmentCheck:
    """Are the model's weights complete in the Hugging Face cache (every shard its index names)?"""
    from huggingface_hub import scan_cache_dir
    from huggingface_hub.errors import CacheNotFound

    cache = cache_dir or hf_cache_dir()
    fix = (f"Download it before the room arrives (the NVFP4 checkpoint is about 18 GB) with the workshop's "
           f"download, which shows progress, or `hf download {model_id}`. vLLM downloads it at the first "
           "launch otherwise, which on a shared workshop network can take most of the session.")
    missing = partial(EnvironmentCheck, "weights in the Hugging Face cache", "missing", fix=fix,
                      settings=("download",))
    try:
        info = scan_cache_dir(cache)
    except CacheNotFound:
        return missing(f"no cache at {cache}")
    repo = next((r for r in info.repos if r.repo_id == model_id and r.repo_type == "model"), None)
    if repo is None:
        return missing(f"{model_id} is not in {cache}")
    best: tuple[int, int, int] = (0, 0, 0)  # (weight files, expected, bytes)
    for revision in repo.revisions:
        names = {f.file_name for f in revision.files}
        weights = [f for f in revision.files if f.file_name.endswith(WEIGHT_SUFFIXES)]
        expected = len(weights)
        index = next((f for f in revision.files if f.file_name.endswith(".safetensors.index.json")), None)
        if index is not None:
            import json

            try:
                shards = set(json.loads(Path(index.file_path).read_text()).get("weight_map", {}).values())
            except (OSError, ValueError):
                shards = set()
            expected = len(shards)
            weights = [f for f in weights if f.file_name in shards]
            if not shards <= names:
                expected = max(expected, 1)
        size = sum(f.size_on_disk for f in weights)
        best = max(best, (len(weights), expected, size))
    present, expected, size = best
    if present and present >= expected:
        return EnvironmentCheck("weights in the Hugging Face cache", "ok",
                                f"{model_id}: {present} weight file(s), {size / 1e9:.1f} GB in {cache}")
    return missing(f"{model_id} is only partly in {cache} ({present} of {expected or '?'} weight files)")


def download_weights(model_id: str, *, progress: Callable[[str], None] | None = None,
                     cache_dir: Path | None = None) -> Path:
    """Download the model into the Hugging Face cache with huggingface_hub, reporting progress
    (default: the `workbench.server` logger); a LaunchError says what to do when it cannot
    (offline, no access, no space)."""
    say = progress or logging.getLogger("workbench.server").info
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError
    from tqdm.auto import tqdm

    class Reported(tqdm):  # type: ignore[misc]
        """tqdm that also tells `progress` at each 10 % of the bytes."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs.setdefault("disable", False)
            super().__init__(*args, **kwargs)
            self._told = -1

        def update(self, n: float | None = 1) -> bool | None:
            out: bool | None = super().update(n)
            if self.total and self.unit == "B":
                tenth = int(10 * self.n / self.total)
                if tenth != self._told:
                    self._told = tenth
                    say(f"{model_id}: {self.n / 1e9:.1f} of {self.total / 1e9:.1f} GB")
            return out

    say(f"Downloading {model_id} into {cache_dir or hf_cache_dir()} ...")
    try:
        path = snapshot_download(model_id, cache_dir=cache_dir, tqdm_class=Reported)
    except LocalEntryNotFoundError as exc:
        offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes")
        from workbench.errors import LaunchError

        raise LaunchError(
            f"Cannot download {model_id}: " + ("downloads are disabled (HF_HUB_OFFLINE=1)." if offline
                                               else "the Hugging Face Hub cannot be reached."),
            hint="Connect this machine to the network (and unset HF_HUB_OFFLINE), or copy the model's "
            f"folder models--{model_id.replace('/', '--')} from a machine that has it into {cache_dir or hf_cache_dir()}.",
        ) from exc
    except HfHubHTTPError as exc:
        from workbench.errors import LaunchError

        raise LaunchError(f"The Hugging Face Hub refused the download of {model_id}: {exc}",
                          hint="Log in with `hf auth login` if the model needs accepting its licence, "
                          "and check the model id.") from exc
    say(f"{model_id} is in the cache: {path}")
    return Path(path)


def memory_headroom_check(gpu_memory_utilization: float | None, *, meminfo: Path = Path("/proc/meminfo"),
                          runner: Callable[[list[str]], str] | None = None,
                          source: GpuSource | None = None) -> EnvironmentCheck:
    """Is enough memory free now for vLLM's --gpu-memory-utilization share?

    vLLM refuses to start when the device's free memory, read after it has made its
    CUDA context, is below utilization x total: so the context (measured on an H200:
    planner/gpu_overhead.py) must be free beside the share. The GPU is read through
    the telemetry source (NVML; `runner` reads recorded nvidia-smi text instead). On a
    GB10 the GPU's memory is the machine's (unified), so it is read from /proc/meminfo:
    memory the page cache holds is reclaimable but not free at that moment."""
    share = gpu_memory_utilization or DEFAULT_GPU_MEMORY_UTILIZATION
    name = f"free memory for --gpu-memory-utilization {share:g}"
    gpus: list[tuple[int, int]] = []  # (total, free) bytes of each GPU with its own memory
    if runner is not None:
        try:
            gpus = [(total * MIB, (total - used) * MIB) for total, used in parse_gpu_memory_used(runner(MEMORY_QUERY_ARGS))]
        except (OSError, subprocess.SubprocessError) as exc:
            return EnvironmentCheck(name, "warning", f"nvidia-smi failed: {exc}", "Check the NVIDIA driver (nvidia-smi).")
    else:
        reading = source.read() if source is not None else read_gpus()
        for g in reading.gpus:
            left = g.memory_free_bytes
            if g.memory_source == MEMORY_DEVICE and g.memory_total_bytes and left is not None:
                # vLLM's total (torch's) leaves out the driver's reserve.
                gpus.append((g.memory_total_bytes - (g.memory_reserved_bytes or 0), left))
    if gpus:
        total, free_b = gpus[0]
        gib_ = float(GIB)
        need_share = share * total / gib_
        context = CUDA_CONTEXT_BYTES / gib_
        need, gpu_free = need_share + context, free_b / gib_
        found = (f"GPU 0: {gpu_free:.1f} GiB free of {total / gib_:.1f} GiB; vLLM wants {need_share:.1f} GiB "
                 f"+ {context:.2f} GiB for its CUDA context ({MEASURED_ON})")
        if gpu_free >= need:
            return EnvironmentCheck(name, "ok", found)
        return EnvironmentCheck(name, "missing", found,
                                f"Stop what holds GPU memory (`python -m workbench gpu` or `nvidia-smi` shows it), or "
                                f"lower --gpu-memory-utilization to {max(0.05, (gpu_free - context) / (total / gib_) - 0.02):.2f}.")
    try:
        text = meminfo.read_text()
    except OSError:
        return EnvironmentCheck(name, "warning", f"could not read {meminfo}", "Run on Linux.")
    total_kb, free_kb = _meminfo_kb(text, "MemTotal"), _meminfo_kb(text, "MemFree")
    available_kb = _meminfo_kb(text, "MemAvailable") or free_kb
    if not total_kb or free_kb is None or available_kb is None:
        return EnvironmentCheck(name, "warning", f"{meminfo} has no MemTotal/MemFree", "Run on Linux.")
    gib = 1024 * 1024
    need, free, available = share * total_kb / gib, free_kb / gib, available_kb / gib
    found = (f"unified memory: {free:.1f} GiB free, {available:.1f} GiB available of {total_kb / gib:.1f} GiB; "
             f"vLLM wants {need:.1f} GiB")
    if free >= need:
        return EnvironmentCheck(name, "ok", found)
    def lower(kb: int) -> str:
        return f"lower --gpu-memory-utilization to {max(0.05, kb / total_kb - 0.03):.2f}"

    if available >= need:
        return EnvironmentCheck(name, "warning", found,
                                "The page cache holds the difference: free it right before launching with "
                                "`sudo sh -c 'sync; echo 3 > /proc/sys/vm/drop_caches'`, or " + lower(free_kb) + ".")
    return EnvironmentCheck(name, "missing", found,
                            "Close what uses memory (another vLLM, a notebook kernel holding a model, "
                            f"containers: `docker ps`), or {lower(available_kb)}.")


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


def warm_up_check(base_url: str, model: str, *, api_key: str | None = None, requests: int = 2,
                  max_tokens: int = 16, timeout: float = 900.0) -> EnvironmentCheck:
    """Send short requests right after ready: the first pays for JIT compilation on a
    DGX Spark (CUDA graphs, kernels); the room should not be the one paying."""
    import httpx

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    body = {"model": model, "max_tokens": max_tokens, "temperature": 0,
            "messages": [{"role": "user", "content": "Say hello to the workshop in five words."}]}
    seconds: list[float] = []
    try:
        with httpx.Client(timeout=timeout) as client:
            for _ in range(requests):
                started = time.monotonic()
                answer = client.post(f"{base_url.rstrip('/')}/v1/chat/completions", json=body, headers=headers)
                answer.raise_for_status()
                seconds.append(time.monotonic() - started)
    except httpx.HTTPError as exc:
        return EnvironmentCheck("warm-up request", "missing", f"{base_url} did not answer: {exc}",
                                "Check the Server tab's log (or `python -m workbench status --log 40`); "
                                "if the server is still starting, run the warm-up again once it is ready.")
    found = "first request {:.2f} s".format(seconds[0]) + "".join(f", then {s:.2f} s" for s in seconds[1:])
    return EnvironmentCheck("warm-up request", "ok", found + " (the first one compiled what the rest reuse)")


def agent_endpoint_checks(base_url: str, model: str | None = None, *, plan_argv: list[str] | None = None,
                          api_key: str | None = None) -> list[EnvironmentCheck]:
    """The day-of form of `python -m workbench verify`: what attendees' agents depend on
    (reasoning apart from the answer, native tool calls, a multi-step call), each as a check.
    Not applicable is "ok" with its reason: a server without a parser is not broken."""
    from workbench.agents.verify import ExpectedParsers, verify_endpoint

    expected = ExpectedParsers.from_argv(plan_argv) if plan_argv else None
    report = verify_endpoint(base_url, model=model, api_key=api_key, expected=expected)
    status: dict[str, CheckStatus] = {"pass": "ok", "fail": "missing", "not_applicable": "ok"}
    return [EnvironmentCheck(f"agents: {c.title}", status[c.outcome],
                             ("not applicable: " if c.outcome == "not_applicable" else "") + c.found, c.change)
            for c in report.checks]


def day_of_checks(plan: Any, *, mode: str = "auto", meminfo: Path = Path("/proc/meminfo"),
                  runner: Callable[[list[str]], str] | None = None) -> list[EnvironmentCheck]:
    """The workshop's checks for a rendered plan (a LaunchPlan or its dict): the
    machine (environment_checks), then the plan's weights, memory share and image."""
    data = plan.to_dict() if hasattr(plan, "to_dict") else dict(plan)
    model_id = data.get("model_id") or data["argv"][2]
    checks = [c for c in environment_checks(model_id, meminfo=meminfo) if not c.name.startswith("model in")]
    if data.get("local_build"):
        from workbench.demo import models

        built = models.cache_dir() / data["local_build"]
        checks.append(EnvironmentCheck("weights (built locally)", "ok" if built.is_dir() else "missing", str(built),
                                       "" if built.is_dir() else "`python -m workbench demo-model` builds it (about 40 s)."))
    else:
        checks.append(weights_check(model_id))
    argv = data.get("argv") or []
    share = next((float(argv[i + 1]) for i, t in enumerate(argv[:-1]) if t == "--gpu-memory-utilization"), None)
    if data.get("hardware") != "cpu":
        checks.append(memory_headroom_check(share, meminfo=meminfo, runner=runner))
    image = data.get("docker_image")
    if image and (mode == "docker" or (mode == "auto" and not _vllm_installed())):
        checks.append(docker_image_check(image, runner=runner))
    return checks


def _vllm_installed() -> bool:
    return vllm_executable() is not None

"""Is enough memory free now for vLLM's --gpu-memory-utilization share (a GPU's own memory, or a
GB10's unified memory from /proc/meminfo)? Read through the telemetry source, or from recorded
nvidia-smi text."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

from workbench.planner.gpu_overhead import CUDA_CONTEXT_BYTES, MEASURED_ON
from workbench.server.checks import EnvironmentCheck
from workbench.telemetry import MEMORY_DEVICE, GpuSource, read_gpus

__all__ = ["DEFAULT_GPU_MEMORY_UTILIZATION", "MEMORY_QUERY_ARGS", "memory_headroom_check", "parse_gpu_memory_used"]

DEFAULT_GPU_MEMORY_UTILIZATION = 0.92  # vLLM 0.32's default (`vllm serve --help=all`)
MEMORY_QUERY_ARGS = ["nvidia-smi", "--query-gpu=index,name,memory.total,memory.used,compute_cap,driver_version",
                     "--format=csv"]
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

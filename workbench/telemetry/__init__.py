"""The GPUs beside the server: live telemetry through NVML (nvidia-ml-py), nvidia-smi as the fallback.

    GpuSource().read()  -> GpuReading (per GPU: utilization, memory, power and limit, SM clock,
                           temperature, throttle reasons; source "none" and a reason with no NVIDIA GPU)
    GpuPoller           -> a time series of readings; summarize(start, end) for a benchmark run
    nvml.RecordedNvml   -> replays NVML's raw answers recorded on a real GPU (the tests' fixtures)

Imports only the standard library and, lazily, `pynvml`: `python -m workbench gpu` runs
on a GPU box with the core dependencies alone.
"""

from workbench.telemetry.display import format_gpu_lines, format_gpu_strip, format_gpu_table, gpu_rows
from workbench.telemetry.nvml import NvmlApi, NvmlUnavailable, PynvmlApi, RecordedNvml, record_nvml
from workbench.telemetry.poller import (
    GpuPoller, GpuRunFigures, GpuSpan, series_rows, shared_gpu_poller, summarize_readings,
)
from workbench.telemetry.sample import MEMORY_DEVICE, MEMORY_UNIFIED, NO_GPU, GpuProcess, GpuReading, GpuSample
from workbench.telemetry.source import GpuSource, read_gpus

__all__ = ["MEMORY_DEVICE", "MEMORY_UNIFIED", "NO_GPU", "GpuPoller", "GpuProcess", "GpuReading", "GpuRunFigures", "GpuSample",
           "GpuSource", "GpuSpan", "NvmlApi", "NvmlUnavailable", "PynvmlApi", "RecordedNvml", "format_gpu_lines",
           "format_gpu_strip", "format_gpu_table",
           "gpu_rows", "read_gpus", "record_nvml", "series_rows", "shared_gpu_poller", "summarize_readings"]

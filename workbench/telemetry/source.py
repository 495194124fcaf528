"""Read the machine's NVIDIA GPUs: NVML first, `nvidia-smi` where NVML cannot load, else "no NVIDIA GPU".

One GpuSource is kept open (NVML is started once) and asked for a reading as
often as a view needs; every view, hardware detection and the day-of checks
read through it.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

from workbench.telemetry.nvml import NvmlApi, NvmlUnavailable, PynvmlApi, sample_from_nvml
from workbench.telemetry.sample import GpuReading
from workbench.telemetry.smi import SMI_QUERY_ARGS, parse_smi_csv

__all__ = ["GpuSource", "read_gpus", "run_nvidia_smi"]

log = logging.getLogger("workbench.telemetry")

Runner = Callable[[list[str]], str]


def run_nvidia_smi(argv: list[str]) -> str:
    return subprocess.run(argv, capture_output=True, text=True, timeout=10, check=True).stdout


class GpuSource:
    """The machine's GPUs, read on demand.

    `nvml` opens the NVML interface (default: the real library; tests pass a
    recording's replay); `runner` runs nvidia-smi (the fallback); `which` finds it."""

    def __init__(self, *, nvml: Callable[[], NvmlApi] | None = None, runner: Runner | None = None,
                 which: Callable[[str], str | None] | None = None,
                 meminfo: Path = Path("/proc/meminfo")) -> None:
        self._open_nvml = nvml or PynvmlApi
        self._runner = runner
        self._which = which or (lambda name: shutil.which(name))
        self._meminfo = meminfo
        self._api: NvmlApi | None = None
        self._nvml_problem: str | None = None
        self._lock = threading.Lock()

    def _nvml(self) -> NvmlApi | None:
        if self._api is None and self._nvml_problem is None:
            try:
                self._api = self._open_nvml()
            except NvmlUnavailable as exc:
                self._nvml_problem = str(exc)
                log.debug("NVML unavailable: %s", exc)
        return self._api

    def _meminfo_text(self) -> str | None:
        try:
            return self._meminfo.read_text()
        except OSError:
            return None

    def read(self) -> GpuReading:
        """Every GPU now. Never raises: a machine with no NVIDIA GPU gets source "none" and the reason."""
        with self._lock:
            started = time.perf_counter()
            api = self._nvml()
            if api is not None:
                try:
                    count = api.device_count()
                    driver = api.driver_version()
                    samples = [sample_from_nvml(api, index, self._meminfo_text) for index in range(count)]
                except Exception as exc:  # a driver that dies mid-read: fall back, say why
                    self._nvml_problem = f"NVML failed while reading: {exc}"
                    self._api = None
                    log.warning("%s", self._nvml_problem)
                else:
                    took = (time.perf_counter() - started) * 1000
                    if not samples:
                        return GpuReading(time.time(), "none", (), driver, "NVML found no GPU", read_ms=took)
                    return GpuReading(time.time(), "nvml", tuple(samples), driver, read_ms=took)
            return self._read_smi(started)

    def _read_smi(self, started: float) -> GpuReading:
        nvml_why = self._nvml_problem or "NVML unavailable"
        runner = self._runner
        if runner is None:
            if self._which("nvidia-smi") is None:
                return GpuReading(time.time(), "none", (), None, f"{nvml_why}, and nvidia-smi was not found",
                                  read_ms=(time.perf_counter() - started) * 1000)
            runner = run_nvidia_smi
        try:
            text = runner(SMI_QUERY_ARGS)
        except (OSError, subprocess.SubprocessError) as exc:
            return GpuReading(time.time(), "none", (), None, f"{nvml_why}, and nvidia-smi failed: {exc}",
                              read_ms=(time.perf_counter() - started) * 1000)
        samples, driver = parse_smi_csv(text, self._meminfo_text() if "Not Supported" in text or "N/A" in text else None)
        took = (time.perf_counter() - started) * 1000
        if not samples:
            return GpuReading(time.time(), "none", (), driver, f"{nvml_why}; nvidia-smi listed no GPU", read_ms=took)
        return GpuReading(time.time(), "nvidia-smi", tuple(samples), driver,
                          notes=(f"read with nvidia-smi: {nvml_why}",), read_ms=took)

    def close(self) -> None:
        with self._lock:
            close = getattr(self._api, "close", None)
            if callable(close):
                close()
            self._api = None


_default: GpuSource | None = None
_default_lock = threading.Lock()


def read_gpus() -> GpuReading:
    """A reading of this machine's GPUs through one process-wide source (NVML started once)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = GpuSource()
        source = _default
    return source.read()


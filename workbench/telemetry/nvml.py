"""NVML (through nvidia-ml-py's `pynvml`) behind a small interface, so a recording replays.

`NvmlApi` returns the raw values NVML answers (milliwatts, bytes, a bit mask);
`PynvmlApi` asks the real library, `RecordedNvml` answers from a recording of
those values (tests/fixtures/nvidia-h200-*/), and `sample_from_nvml` turns
either into a GpuSample with the same arithmetic. One full sample costs well
under a millisecond on an H200 (an `nvidia-smi` process costs tens).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from workbench.telemetry.sample import MEMORY_DEVICE, MEMORY_UNIFIED, GpuProcess, GpuSample

__all__ = ["FIELDS", "NvmlApi", "NvmlFieldUnavailable", "NvmlUnavailable", "PynvmlApi", "RecordedNvml", "RecordedSeries",
           "record_nvml", "sample_from_nvml", "throttle_reason_names"]

log = logging.getLogger("workbench.telemetry")

# The raw fields one sample reads, each one NVML call.
FIELDS = ("name", "uuid", "memory", "utilization", "power_mw", "power_limit_mw", "sm_clock_mhz",
          "temperature_c", "clocks_event_reasons", "compute_capability", "processes")

# nvmlClocksEventReason* bits (nvml.h), in NVML's own names.
_REASON_BITS: Sequence[tuple[int, str]] = (
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
)


class NvmlUnavailable(Exception):
    """NVML cannot be used here at all (no library, no driver, no GPU); str() says which."""


# nvmlErrorString(NVML_ERROR_NOT_SUPPORTED): how a recording (str of pynvml's NVMLError) keeps that answer.
NOT_SUPPORTED_TEXT = "Not Supported"


class NvmlFieldUnavailable(Exception):
    """One figure NVML does not give for this device; `not_supported` when NVML says the device has
    no such figure (a GB10's memory, say), rather than that reading it failed."""

    def __init__(self, message: str, *, not_supported: bool = False) -> None:
        super().__init__(message)
        self.not_supported = not_supported


class NvmlApi(Protocol):
    """The NVML calls a sample needs, answering NVML's raw values."""

    def driver_version(self) -> str: ...

    def device_count(self) -> int: ...

    def read(self, index: int, field: str) -> Any:
        """The raw value of FIELDS[field] for GPU `index`; raises NvmlFieldUnavailable."""
        ...


def throttle_reason_names(mask: int) -> tuple[str, ...]:
    """NVML's clock event reasons bit mask, as names."""
    return tuple(name for bit, name in _REASON_BITS if mask & bit)


class PynvmlApi:
    """The real NVML, through nvidia-ml-py. Raises NvmlUnavailable when it cannot start."""

    def __init__(self) -> None:
        try:  # optional where no NVIDIA driver is: said, not raised
            import pynvml
        except ImportError as exc:
            raise NvmlUnavailable("nvidia-ml-py (pynvml) is not installed") from exc
        self._nvml = pynvml
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            raise NvmlUnavailable(f"NVML did not start: {exc}") from exc
        self._handles: dict[int, Any] = {}

    def close(self) -> None:
        try:
            self._nvml.nvmlShutdown()
        except self._nvml.NVMLError:
            pass

    def driver_version(self) -> str:
        return _text(self._nvml.nvmlSystemGetDriverVersion())

    def device_count(self) -> int:
        return int(self._nvml.nvmlDeviceGetCount())

    def _handle(self, index: int) -> Any:
        if index not in self._handles:
            self._handles[index] = self._nvml.nvmlDeviceGetHandleByIndex(index)
        return self._handles[index]

    def read(self, index: int, field: str) -> Any:
        nv = self._nvml
        try:
            h = self._handle(index)
            if field == "name":
                return _text(nv.nvmlDeviceGetName(h))
            if field == "uuid":
                return _text(nv.nvmlDeviceGetUUID(h))
            if field == "memory":
                # Version 2 splits the driver's reserve out of "used" (as nvidia-smi shows it).
                try:
                    m = nv.nvmlDeviceGetMemoryInfo(h, version=nv.nvmlMemory_v2)
                    return {"total": int(m.total), "reserved": int(m.reserved), "free": int(m.free),
                            "used": int(m.used)}
                except (nv.NVMLError, AttributeError, TypeError):
                    m = nv.nvmlDeviceGetMemoryInfo(h)
                    return {"total": int(m.total), "free": int(m.free), "used": int(m.used)}
            if field == "utilization":
                u = nv.nvmlDeviceGetUtilizationRates(h)
                return {"gpu": int(u.gpu), "memory": int(u.memory)}
            if field == "power_mw":
                return int(nv.nvmlDeviceGetPowerUsage(h))
            if field == "power_limit_mw":
                return int(nv.nvmlDeviceGetEnforcedPowerLimit(h))
            if field == "sm_clock_mhz":
                return int(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM))
            if field == "temperature_c":
                return int(nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU))
            if field == "clocks_event_reasons":
                getter = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
                    nv.nvmlDeviceGetCurrentClocksThrottleReasons
                return int(getter(h))
            if field == "compute_capability":
                major, minor = nv.nvmlDeviceGetCudaComputeCapability(h)
                return [int(major), int(minor)]
            if field == "processes":
                # usedGpuMemory is None where the driver does not account per process (some VMs).
                return [{"pid": int(p.pid), "used_memory": None if p.usedGpuMemory is None else int(p.usedGpuMemory)}
                        for p in nv.nvmlDeviceGetComputeRunningProcesses(h)]
        except nv.NVMLError as exc:
            raise NvmlFieldUnavailable(str(exc), not_supported=exc.value == nv.NVML_ERROR_NOT_SUPPORTED) from exc
        raise KeyError(field)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class RecordedNvml:
    """Answers from a recording made by `record_nvml` on a real GPU.

    A recorded field is its raw value, or {"unavailable": "<NVML's message>"}."""

    def __init__(self, recording: dict[str, Any]) -> None:
        self.recording = recording

    def driver_version(self) -> str:
        return str(self.recording["driver_version"])

    def device_count(self) -> int:
        return len(self.recording["devices"])

    def read(self, index: int, field: str) -> Any:
        value = self.recording["devices"][index].get(field, {"unavailable": "not recorded"})
        if isinstance(value, dict) and "unavailable" in value:
            said = str(value["unavailable"])
            raise NvmlFieldUnavailable(said, not_supported=said == NOT_SUPPORTED_TEXT)
        return value


class RecordedSeries(RecordedNvml):
    """Replays recordings one after another: each reading (which starts by counting the
    devices) answers from the next; the last one repeats."""

    def __init__(self, recordings: Sequence[dict[str, Any]]) -> None:
        super().__init__(recordings[0])
        self._recordings = list(recordings)
        self._next = 0

    def device_count(self) -> int:
        self.recording = self._recordings[min(self._next, len(self._recordings) - 1)]
        self._next += 1
        return super().device_count()


def record_nvml(api: NvmlApi) -> dict[str, Any]:
    """Every raw value a sample reads, as JSON-ready data RecordedNvml replays."""
    devices = []
    for index in range(api.device_count()):
        device: dict[str, Any] = {}
        for field in FIELDS:
            try:
                device[field] = api.read(index, field)
            except NvmlFieldUnavailable as exc:
                device[field] = {"unavailable": str(exc)}
        devices.append(device)
    return {"taken_at": time.time(), "driver_version": api.driver_version(), "devices": devices}


def _optional(api: NvmlApi, index: int, field: str) -> Any:
    try:
        return api.read(index, field)
    except NvmlFieldUnavailable as exc:
        log.debug("GPU %d: NVML gives no %s (%s)", index, field, exc)
        return None


def sample_from_nvml(api: NvmlApi, index: int, meminfo: Callable[[], str | None] | None = None) -> GpuSample:
    """One GPU's sample from NVML's raw answers. Where NVML says memory is "Not Supported"
    (unified memory: DGX Spark GB10), it comes from /proc/meminfo (`meminfo` reads its text), labelled so."""
    name = _optional(api, index, "name") or f"GPU {index}"
    used = total = reserved = None
    source = MEMORY_DEVICE
    try:
        memory = api.read(index, "memory")
    except NvmlFieldUnavailable as exc:
        memory = None
        text = meminfo() if meminfo is not None and exc.not_supported else None
        unified = unified_memory(text) if text else None
        if unified:
            used, total = unified
            source = MEMORY_UNIFIED
    if memory and memory.get("total"):
        used, total = int(memory["used"]), int(memory["total"])
        reserved = int(memory["reserved"]) if "reserved" in memory else None
    util = _optional(api, index, "utilization")
    power = _optional(api, index, "power_mw")
    limit = _optional(api, index, "power_limit_mw")
    reasons = _optional(api, index, "clocks_event_reasons")
    cap = _optional(api, index, "compute_capability")
    procs = _optional(api, index, "processes")
    return GpuSample(
        index=index, name=name,
        utilization_pct=float(util["gpu"]) if util is not None else None,
        memory_used_bytes=used, memory_total_bytes=total, memory_source=source, memory_reserved_bytes=reserved,
        power_w=power / 1000 if power is not None else None,
        power_limit_w=limit / 1000 if limit is not None else None,
        sm_clock_mhz=_optional(api, index, "sm_clock_mhz"),
        temperature_c=_optional(api, index, "temperature_c"),
        throttle_reasons=throttle_reason_names(reasons) if reasons is not None else (),
        compute_capability=f"{cap[0]}.{cap[1]}" if cap else None,
        uuid=_optional(api, index, "uuid"),
        processes=None if procs is None else tuple(GpuProcess(int(p["pid"]), p.get("used_memory")) for p in procs),
    )


def unified_memory(meminfo_text: str) -> tuple[int, int] | None:
    """(used, total) bytes from /proc/meminfo: used is what is not available (MemTotal - MemAvailable)."""
    values: dict[str, int] = {}
    for line in meminfo_text.splitlines():
        key, _, rest = line.partition(":")
        if key in ("MemTotal", "MemAvailable") and rest.split():
            values[key] = int(rest.split()[0]) * 1024
    if "MemTotal" not in values:
        return None
    total = values["MemTotal"]
    return total - values.get("MemAvailable", total), total

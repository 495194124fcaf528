"""What one look at the machine's NVIDIA GPUs found: a sample per GPU, and the reading around them.

Units are the ones a person reads: percent, watts, MHz, °C, bytes. A figure the
GPU does not report is None, never 0 (an idle GPU really reports 0 %).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

__all__ = ["MEMORY_DEVICE", "MEMORY_UNIFIED", "NO_GPU", "GpuProcess", "GpuReading", "GpuSample", "SourceName"]

SourceName = Literal["nvml", "nvidia-smi", "none"]

# Where a sample's memory figures come from.
MEMORY_DEVICE = "device"
MEMORY_UNIFIED = "unified (/proc/meminfo)"

NO_GPU = "no NVIDIA GPU"


@dataclass(frozen=True)
class GpuProcess:
    """A process with a CUDA context on a GPU, and the GPU memory it holds (None where NVML does not say)."""

    pid: int
    used_memory_bytes: int | None = None


@dataclass(frozen=True)
class GpuSample:
    """One GPU at one moment."""

    index: int
    name: str
    utilization_pct: float | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    # MEMORY_DEVICE, or MEMORY_UNIFIED where the GPU shares the CPU's memory (DGX Spark GB10).
    memory_source: str = MEMORY_DEVICE
    # What the driver keeps for itself, outside "used" (NVML's memory info v2); None where not reported.
    memory_reserved_bytes: int | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    sm_clock_mhz: int | None = None
    temperature_c: int | None = None
    # Why the clocks are held down now, in NVML's words ("sw_power_cap", "hw_thermal_slowdown", ...).
    throttle_reasons: tuple[str, ...] = ()
    compute_capability: str | None = None
    uuid: str | None = None
    # The compute processes on this GPU; None where they were not read (nvidia-smi, old recordings).
    processes: tuple[GpuProcess, ...] | None = None

    @property
    def memory_used_pct(self) -> float | None:
        if self.memory_used_bytes is None or not self.memory_total_bytes:
            return None
        return 100.0 * self.memory_used_bytes / self.memory_total_bytes

    @property
    def memory_free_bytes(self) -> int | None:
        """What a new process can still allocate: total less used and the driver's reserve."""
        if self.memory_used_bytes is None or self.memory_total_bytes is None:
            return None
        return self.memory_total_bytes - self.memory_used_bytes - (self.memory_reserved_bytes or 0)

    @property
    def power_pct_of_limit(self) -> float | None:
        if self.power_w is None or not self.power_limit_w:
            return None
        return 100.0 * self.power_w / self.power_limit_w

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["throttle_reasons"] = list(self.throttle_reasons)
        d["memory_used_pct"] = self.memory_used_pct
        d["processes"] = None if self.processes is None else [asdict(p) for p in self.processes]
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GpuSample:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        known["throttle_reasons"] = tuple(known.get("throttle_reasons") or ())
        if known.get("processes") is not None:
            known["processes"] = tuple(GpuProcess(**p) for p in known["processes"])
        return cls(**known)


@dataclass(frozen=True)
class GpuReading:
    """Every NVIDIA GPU of the machine at one moment, and how they were read.

    `source` is "none" when there is no NVIDIA GPU (or nothing could read one);
    `reason` then says why, in words a person can act on."""

    taken_at: float
    source: SourceName
    gpus: tuple[GpuSample, ...] = ()
    driver_version: str | None = None
    reason: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)
    # How long the read took (NVML: well under a millisecond; nvidia-smi: tens of ms).
    read_ms: float | None = None

    @property
    def has_gpu(self) -> bool:
        return bool(self.gpus)

    def to_dict(self) -> dict[str, Any]:
        return {
            "taken_at": self.taken_at,
            "source": self.source,
            "driver_version": self.driver_version,
            "reason": self.reason,
            "notes": list(self.notes),
            "read_ms": self.read_ms,
            "gpus": [g.to_dict() for g in self.gpus],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GpuReading:
        return cls(
            taken_at=float(data["taken_at"]), source=data["source"],
            gpus=tuple(GpuSample.from_dict(g) for g in data.get("gpus", ())),
            driver_version=data.get("driver_version"), reason=data.get("reason", ""),
            notes=tuple(data.get("notes", ())), read_ms=data.get("read_ms"),
        )

"""Sample the GPUs on a schedule and keep a bounded time series; sum a span up for a benchmark run.

`GpuPoller.summarize(start, end)` gives, per GPU, the mean utilization and power,
the peak memory used, and the energy (power integrated over time, trapezoids),
so a run's tokens per joule can be compared across configurations.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from workbench.telemetry.sample import GpuReading
from workbench.telemetry.source import GpuSource

__all__ = ["GpuPoller", "GpuRunFigures", "GpuSpan", "series_rows", "shared_gpu_poller", "summarize_readings"]


@dataclass(frozen=True)
class GpuSpan:
    """One GPU over a span of time."""

    index: int
    name: str
    samples: int
    mean_utilization_pct: float | None
    mean_power_w: float | None
    peak_memory_used_bytes: int | None
    memory_total_bytes: int | None
    energy_j: float | None


@dataclass(frozen=True)
class GpuRunFigures:
    """Every GPU over a span (a benchmark run or one load level); `source` "none" = no NVIDIA GPU."""

    start: float
    end: float
    source: str
    gpus: tuple[GpuSpan, ...] = ()
    reason: str = ""

    @property
    def mean_utilization_pct(self) -> float | None:
        values = [g.mean_utilization_pct for g in self.gpus if g.mean_utilization_pct is not None]
        return sum(values) / len(values) if values else None

    @property
    def mean_power_w(self) -> float | None:
        """Summed over the GPUs (the machine's GPU power)."""
        values = [g.mean_power_w for g in self.gpus if g.mean_power_w is not None]
        return sum(values) if values else None

    @property
    def energy_j(self) -> float | None:
        values = [g.energy_j for g in self.gpus if g.energy_j is not None]
        return sum(values) if values and len(values) == len(self.gpus) else None

    @property
    def peak_memory_used_bytes(self) -> int | None:
        values = [g.peak_memory_used_bytes for g in self.gpus if g.peak_memory_used_bytes is not None]
        return sum(values) if values else None

    def tokens_per_joule(self, tokens: int) -> float | None:
        """Tokens over the GPUs' energy in the span; None where the power is not known."""
        energy = self.energy_j
        return tokens / energy if energy else None

    def describe(self, tokens: int | None = None) -> str:
        """One line: the GPUs' means over the span (and tokens per joule), or plainly no NVIDIA GPU."""
        if not self.gpus:
            return f"GPU: no NVIDIA GPU ({self.reason})" if self.reason else "GPU: no NVIDIA GPU"
        util, power, peak = self.mean_utilization_pct, self.mean_power_w, self.peak_memory_used_bytes
        parts = [f"{len(self.gpus)} GPU{'s' if len(self.gpus) > 1 else ''} ({self.source})",
                 "mean utilization " + ("not reported" if util is None else f"{util:.0f} %"),
                 "mean power " + ("not reported" if power is None else f"{power:.0f} W"),
                 "peak memory used " + ("not reported" if peak is None else f"{peak / 1e9:.1f} GB")]
        if self.energy_j is not None:
            parts.append(f"energy {self.energy_j:.0f} J")
            if tokens:
                parts.append(f"{tokens / self.energy_j:.2f} output tokens per joule")
        return "GPU: " + ", ".join(parts)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GpuRunFigures:
        return cls(float(data["start"]), float(data["end"]), str(data.get("source", "none")),
                   tuple(GpuSpan(**g) for g in data.get("gpus", ())), str(data.get("reason", "")))

    def to_dict(self) -> dict[str, Any]:
        return {
            "start": self.start, "end": self.end, "source": self.source, "reason": self.reason,
            "mean_utilization_pct": self.mean_utilization_pct, "mean_power_w": self.mean_power_w,
            "peak_memory_used_bytes": self.peak_memory_used_bytes, "energy_j": self.energy_j,
            "gpus": [asdict(g) for g in self.gpus],
        }


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def summarize_readings(readings: Sequence[GpuReading], start: float, end: float) -> GpuRunFigures:
    """Sum up the readings taken in [start, end]."""
    inside = [r for r in readings if start <= r.taken_at <= end and r.gpus]
    if not inside:
        last = readings[-1] if readings else None
        reason = last.reason if last is not None and not last.gpus else "no GPU reading in the span"
        return GpuRunFigures(start, end, last.source if last is not None else "none", (), reason)
    spans = []
    for index in sorted({g.index for r in inside for g in r.gpus}):
        points = [(r.taken_at, g) for r in inside for g in r.gpus if g.index == index]
        utils = [g.utilization_pct for _, g in points if g.utilization_pct is not None]
        powers = [(t, g.power_w) for t, g in points if g.power_w is not None]
        used = [g.memory_used_bytes for _, g in points if g.memory_used_bytes is not None]
        energy = None
        if len(powers) >= 2:
            energy = sum((t1 - t0) * (p0 + p1) / 2 for (t0, p0), (t1, p1) in zip(powers, powers[1:]))
        spans.append(GpuSpan(
            index=index, name=points[-1][1].name, samples=len(points), mean_utilization_pct=_mean(utils),
            mean_power_w=_mean([p for _, p in powers]), peak_memory_used_bytes=max(used) if used else None,
            memory_total_bytes=points[-1][1].memory_total_bytes, energy_j=energy,
        ))
    return GpuRunFigures(start, end, inside[-1].source, tuple(spans))


def series_rows(readings: Sequence[GpuReading]) -> list[dict[str, Any]]:
    """Long-form rows for a plot, one per GPU per reading: time, gpu, utilization %, power W,
    memory used GB, SM clock MHz, temperature °C."""
    rows = []
    for r in readings:
        for g in r.gpus:
            rows.append({
                "time": r.taken_at, "gpu": f"GPU{g.index}", "utilization_pct": g.utilization_pct,
                "power_w": g.power_w,
                "memory_used_gb": g.memory_used_bytes / 1e9 if g.memory_used_bytes is not None else None,
                "sm_clock_mhz": g.sm_clock_mhz, "temperature_c": g.temperature_c,
            })
    return rows


class GpuPoller:
    """Reads the GPUs every `interval` seconds (a daemon thread, or `sample_once` from a timer)
    and keeps the last `history` readings."""

    def __init__(self, source: GpuSource | None = None, *, interval: float = 1.0, history: int = 900) -> None:
        if not interval > 0:
            raise ValueError(f"interval must be a positive number of seconds, not {interval!r}")
        self.source = source or GpuSource()
        self.interval = interval
        self._readings: deque[GpuReading] = deque(maxlen=max(2, history))
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample_once(self) -> GpuReading:
        reading = self.source.read()
        with self._lock:
            self._readings.append(reading)
        return reading

    def tick(self) -> GpuReading:
        """Read now if the newest reading is older than most of an interval (several views,
        each on its own timer, share one series without multiplying the reads)."""
        latest = self.latest
        if latest is not None and time.time() - latest.taken_at < self.interval * 0.8:
            return latest
        return self.sample_once()

    @property
    def latest(self) -> GpuReading | None:
        with self._lock:
            return self._readings[-1] if self._readings else None

    def readings(self) -> list[GpuReading]:
        with self._lock:
            return list(self._readings)

    def series_rows(self) -> list[dict[str, Any]]:
        return series_rows(self.readings())

    def summarize(self, start: float, end: float | None = None) -> GpuRunFigures:
        return summarize_readings(self.readings(), start, time.time() if end is None else end)

    def start(self) -> None:
        if self._thread and self._thread.is_alive():
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="gpu-poller", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(self.interval + 5)
            self._thread = None

    def __enter__(self) -> GpuPoller:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _run(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            self.sample_once()
            next_at = max(next_at + self.interval, time.monotonic())
            self._stop.wait(next_at - time.monotonic())


_shared: GpuPoller | None = None
_shared_lock = threading.Lock()


def shared_gpu_poller() -> GpuPoller:
    """One GPU series for the whole process (the web UI's tabs, the room), read on `tick()`."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = GpuPoller(interval=1.0, history=900)
        return _shared

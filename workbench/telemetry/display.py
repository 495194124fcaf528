"""The GPU reading as text: a table for the terminal (`python -m workbench gpu`, `metrics`) and the notebook."""

from __future__ import annotations

from datetime import datetime

from workbench.telemetry.sample import MEMORY_UNIFIED, NO_GPU, GpuReading, GpuSample

__all__ = ["format_gpu_lines", "format_gpu_strip", "format_gpu_table", "gpu_rows"]

_HEADER = ("GPU", "name", "util", "memory used / total", "power / limit", "SM clock", "temp", "throttle")


def _memory(g: GpuSample) -> str:
    if g.memory_total_bytes is None:
        return "not reported"
    used = "?" if g.memory_used_bytes is None else f"{g.memory_used_bytes / 1e9:.1f}"
    text = f"{used} / {g.memory_total_bytes / 1e9:.1f} GB"
    return text + " (unified, /proc/meminfo)" if g.memory_source == MEMORY_UNIFIED else text


def _power(g: GpuSample) -> str:
    if g.power_w is None:
        return "not reported"
    limit = f" / {g.power_limit_w:.0f} W" if g.power_limit_w else " W"
    return f"{g.power_w:.0f}{limit}"


def gpu_rows(reading: GpuReading) -> list[list[str]]:
    """One row of display strings per GPU (the columns of _HEADER); empty with no GPU."""
    rows = []
    for g in reading.gpus:
        rows.append([
            str(g.index), g.name,
            "?" if g.utilization_pct is None else f"{g.utilization_pct:.0f} %",
            _memory(g), _power(g),
            "?" if g.sm_clock_mhz is None else f"{g.sm_clock_mhz} MHz",
            "?" if g.temperature_c is None else f"{g.temperature_c} °C",
            ", ".join(r for r in g.throttle_reasons) or "-",
        ])
    return rows


def format_gpu_table(reading: GpuReading, *, title: str = "GPU") -> str:
    """A compact table, or one plain line saying there is no NVIDIA GPU and why."""
    when = datetime.fromtimestamp(reading.taken_at).strftime("%H:%M:%S.%f")[:-4]
    if not reading.gpus:
        return f"{title}  {when}  {NO_GPU} on this machine ({reading.reason})" if reading.reason else \
            f"{title}  {when}  {NO_GPU} on this machine"
    driver = f"driver {reading.driver_version}  " if reading.driver_version else ""
    read = f"  read in {reading.read_ms:.2f} ms" if reading.read_ms is not None else ""
    lines = [f"{title}  {when}  {driver}via {reading.source}{read}"]
    rows = [list(_HEADER), *gpu_rows(reading)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(_HEADER))]
    for row in rows:
        lines.append("  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
    for g in reading.gpus:
        if g.processes:
            held = ", ".join(f"pid {p.pid}" + (f" {p.used_memory_bytes / 2**30:.1f} GiB" if p.used_memory_bytes else "")
                             for p in g.processes)
            lines.append(f"  GPU{g.index} processes: {held}")
    lines.extend(f"  note: {n}" for n in reading.notes)
    return "\n".join(lines)


def format_gpu_lines(reading: GpuReading, *, label_width: int = 13) -> list[str]:
    """One line per GPU for a larger table (`python -m workbench metrics`), or one saying there is none."""
    if not reading.gpus:
        why = f" ({reading.reason})" if reading.reason else ""
        return ["  " + "GPU".ljust(label_width) + f"{NO_GPU} on this machine{why}"]
    lines = []
    for row in gpu_rows(reading):
        index, name, util, memory, power, clock, temp, throttle = row
        lines.append("  " + f"GPU{index}".ljust(label_width) + f"util {util}   power {power}   memory {memory}   "
                     f"SM {clock}   {temp}   throttle {throttle}   ({name}, {reading.source})")
    return lines


def format_gpu_strip(reading: GpuReading) -> str:
    """One line for a status strip (the workshop's Room tab): each GPU's utilization, power and memory."""
    if not reading.gpus:
        return f"GPU: {NO_GPU} on this machine" + (f" ({reading.reason})" if reading.reason else "")
    parts = [f"GPU{index} {util} · {power} · {memory}" + (f" · {throttle}" if throttle != "-" else "")
             for index, _name, util, memory, power, _clock, _temp, throttle in gpu_rows(reading)]
    return "GPU (this machine): " + " | ".join(parts)

"""The fallback where NVML cannot be loaded: one `nvidia-smi --query-gpu` process per reading.

The CSV keeps its header, so columns are found by name (a driver that lacks a
column, or a GPU that answers "[Not Supported]" / "[N/A]", leaves that figure None).
"""

from __future__ import annotations

import re

from workbench.telemetry.nvml import unified_memory
from workbench.telemetry.sample import MEMORY_DEVICE, MEMORY_UNIFIED, GpuSample

__all__ = ["SMI_FIELDS", "SMI_QUERY_ARGS", "parse_smi_csv"]

SMI_FIELDS = ("index", "name", "uuid", "utilization.gpu", "memory.used", "memory.total", "power.draw",
              "power.limit", "clocks.sm", "temperature.gpu", "compute_cap", "driver_version")
SMI_QUERY_ARGS = ["nvidia-smi", "--query-gpu=" + ",".join(SMI_FIELDS), "--format=csv,nounits"]

_MIB = 1024 * 1024
# nvidia-smi writes some columns' headers under their long names.
_HEADER_ALIASES = {"clocks.current.sm": "clocks.sm", "power.draw.instant": "power.draw"}


def _number(text: str | None) -> float | None:
    if text is None:
        return None
    m = re.match(r"^\s*(-?\d+(?:\.\d+)?)", text)
    return float(m.group(1)) if m else None


def parse_smi_csv(text: str, meminfo_text: str | None = None) -> tuple[list[GpuSample], str | None]:
    """GPU samples and the driver version from `nvidia-smi --query-gpu=... --format=csv[,nounits]`.

    Memory that nvidia-smi reports as "[Not Supported]" (unified memory) comes
    from /proc/meminfo's text instead, labelled so."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return [], None
    header = [c.strip().split(" ")[0].lower() for c in lines[0].split(",")]
    header = [_HEADER_ALIASES.get(h, h) for h in header]
    if "name" not in header:
        header, body = list(SMI_FIELDS), lines
    else:
        body = lines[1:]
    samples: list[GpuSample] = []
    driver = None
    for position, line in enumerate(body):
        row = dict(zip(header, (c.strip() for c in line.split(","))))
        if not row.get("name"):
            continue
        driver = driver or row.get("driver_version")
        index = _number(row.get("index"))
        used, total = _number(row.get("memory.used")), _number(row.get("memory.total"))
        source = MEMORY_DEVICE
        used_b = int(used * _MIB) if used is not None else None
        total_b = int(total * _MIB) if total is not None else None
        if total_b is None and meminfo_text:
            unified = unified_memory(meminfo_text)
            if unified:
                used_b, total_b = unified
                source = MEMORY_UNIFIED
        clock, temp = _number(row.get("clocks.sm")), _number(row.get("temperature.gpu"))
        cap = row.get("compute_cap")
        samples.append(GpuSample(
            index=int(index) if index is not None else position, name=row["name"],
            utilization_pct=_number(row.get("utilization.gpu")),
            memory_used_bytes=used_b, memory_total_bytes=total_b, memory_source=source,
            power_w=_number(row.get("power.draw")), power_limit_w=_number(row.get("power.limit")),
            sm_clock_mhz=int(clock) if clock is not None else None,
            temperature_c=int(temp) if temp is not None else None,
            compute_capability=cap if cap and re.match(r"^\d+\.\d+$", cap) else None,
            uuid=row.get("uuid") or None,
        ))
    return samples, driver

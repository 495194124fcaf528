"""Detect the local machine and name it with a recipe hardware id.

The GPUs are read through workbench.telemetry (NVML first, `nvidia-smi` where NVML
cannot load), the same source every GPU view reads; parsing is separate from
reading, so every rule is tested on recorded answers. With no NVIDIA GPU the
machine is "cpu". DGX Spark (GB10) reports its memory as "Not Supported" (it is
unified with the CPU's), so its size comes from /proc/meminfo instead.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from workbench.telemetry import GpuReading, GpuSource, read_gpus
from workbench.telemetry.sample import MEMORY_DEVICE

__all__ = [
    "QUERY_ARGS",
    "Detection",
    "GpuInfo",
    "detect",
    "detect_hardware",
    "gpu_infos",
    "hardware_id_for",
    "parse_meminfo_gb",
    "parse_query_gpu",
]

QUERY_ARGS = ["nvidia-smi", "--query-gpu=name,memory.total,compute_cap", "--format=csv,noheader,nounits"]

# Substrings of the GPU name -> hardware id; the first match wins, so the
# more specific names come first (GB300 before B300, GB10 before B10...).
_NAME_RULES: Sequence[tuple[str, str]] = (
    ("GB300", "gb300"),
    ("GB200", "gb200"),
    ("GB10", "dgx_spark_gb10"),
    ("B300", "b300"),
    ("B200", "b200"),
    ("H200", "h200"),
    ("H100", "h100"),
    ("GH200", "h200"),
    ("RTX PRO 6000", "rtx_pro_6000"),
    ("A100", "a100"),
)


@dataclass(frozen=True)
class GpuInfo:
    name: str
    memory_mib: int | None
    compute_cap: str | None


@dataclass(frozen=True)
class Detection:
    hardware_id: str
    gpus: tuple[GpuInfo, ...] = ()
    memory_gb: float | None = None
    reason: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)
    # What read the GPUs: "nvml", "nvidia-smi", or "none" (no NVIDIA GPU).
    source: str = "none"


def _to_int(text: str) -> int | None:
    m = re.search(r"\d+", text)
    return int(m.group()) if m and "not supported" not in text.lower() and "n/a" not in text.lower() else None


def parse_query_gpu(text: str) -> list[GpuInfo]:
    """Parse `nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits]`.

    With a header the columns are found by name (index, name, memory.total,
    compute_cap in any order); without one they are name, memory.total, compute_cap.
    """
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not lines:
        return []
    cols = ["name", "memory.total", "compute_cap"]
    if lines[0].lower().startswith(("index", "name")) and "," in lines[0]:
        cols = [c.strip().split(" ")[0].lower() for c in lines[0].split(",")]
        lines = lines[1:]
    out = []
    for ln in lines:
        cells = [c.strip() for c in ln.split(",")]
        row = dict(zip(cols, cells))
        name = row.get("name", "")
        if not name:
            continue
        mem = row.get("memory.total")
        cap = row.get("compute_cap")
        out.append(GpuInfo(name=name, memory_mib=_to_int(mem) if mem else None,
                           compute_cap=cap if cap and re.match(r"^\d+\.\d+$", cap) else None))
    return out


def parse_meminfo_gb(text: str) -> float | None:
    """MemTotal of /proc/meminfo, in GB (10^9 bytes)."""
    m = re.search(r"^MemTotal:\s+(\d+)\s*kB", text, re.MULTILINE)
    return int(m.group(1)) * 1024 / 1e9 if m else None


def hardware_id_for(gpus: Sequence[GpuInfo], meminfo_text: str | None = None) -> Detection:
    """Map parsed GPUs to a recipe hardware id (the first GPU decides)."""
    if not gpus:
        return Detection("cpu", reason="no NVIDIA GPU found")
    g = gpus[0]
    upper = g.name.upper()
    hw = next((hid for key, hid in _NAME_RULES if key in upper), None)
    notes: list[str] = []
    if hw == "gb300" and len(gpus) == 1:
        hw = "dgx_station_gb300"
    if hw is None:
        major = int(g.compute_cap.split(".")[0]) if g.compute_cap else None
        hw = {8: "a100", 9: "h100", 10: "b200", 12: "rtx_pro_6000"}.get(major or -1, "h100")
        notes.append(f"{g.name} is not in the recipe hardware list; using the closest profile, {hw}")
    memory_gb = g.memory_mib * 1.048576 / 1000 if g.memory_mib else None
    if memory_gb is None and meminfo_text:
        memory_gb = parse_meminfo_gb(meminfo_text)
        if memory_gb:
            notes.append(f"GPU memory is unified with the CPU's: {memory_gb:.0f} GB from /proc/meminfo")
    return Detection(hw, tuple(gpus), memory_gb, f"{len(gpus)}x {g.name}", tuple(notes))


Runner = Callable[[list[str]], str]


def run_command(argv: list[str]) -> str:
    """stdout of `argv` (10 s at most); CalledProcessError/OSError when it fails."""
    return subprocess.run(argv, capture_output=True, text=True, timeout=10, check=True).stdout


def gpu_infos(reading: GpuReading) -> list[GpuInfo]:
    """The detection's view of a telemetry reading: name, device memory (None when it is
    unified with the CPU's), compute capability."""
    return [GpuInfo(g.name, g.memory_total_bytes // (1024 * 1024)
                    if g.memory_total_bytes is not None and g.memory_source == MEMORY_DEVICE else None,
                    g.compute_capability) for g in reading.gpus]


def detect_hardware(*, source: GpuSource | None = None, runner: Runner | None = None,
                    which: Callable[[str], str | None] = shutil.which,
                    meminfo: Path = Path("/proc/meminfo")) -> Detection:
    """Read the GPUs (NVML, else nvidia-smi) and name the machine.

    `source` replaces the machine's telemetry source (a recording's replay);
    `runner` reads the old way, running QUERY_ARGS through nvidia-smi (recorded text)."""
    if runner is None:
        if source is None and which is shutil.which and meminfo == Path("/proc/meminfo"):
            reading = read_gpus()
        else:
            reading = (source or GpuSource(which=which, meminfo=meminfo)).read()
        if not reading.gpus:
            return Detection("cpu", reason=f"no NVIDIA GPU: {reading.reason}")
        text = None
        if any(g.memory_total_bytes is None or g.memory_source != MEMORY_DEVICE for g in reading.gpus[:1]):
            try:
                text = meminfo.read_text()
            except OSError:
                text = None
        return dataclasses.replace(hardware_id_for(gpu_infos(reading), text), source=reading.source)
    try:
        gpus = parse_query_gpu(runner(QUERY_ARGS))
    except (OSError, subprocess.SubprocessError) as exc:
        return Detection("cpu", reason=f"nvidia-smi failed: {exc}")
    text = None
    if gpus and gpus[0].memory_mib is None:
        try:
            text = meminfo.read_text()
        except OSError:
            text = None
    return dataclasses.replace(hardware_id_for(gpus, text), source="nvidia-smi" if gpus else "none")


def detect() -> str:
    """The local machine's recipe hardware id ("cpu" when there is no GPU)."""
    return detect_hardware().hardware_id

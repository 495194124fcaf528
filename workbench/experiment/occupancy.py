"""What already holds this machine before an experiment starts its servers.

An experiment launches a server per configuration, on one port. Before it starts
anything it looks for what is there already: a server the workbench runs (the Server
tab's, `python -m workbench serve`), a process listening on the experiment's port and,
for a GPU experiment, another process holding GPU memory (not readable on unified memory,
DGX Spark's, where only a workbench server and the port are looked for).

On a GPU two servers do not fit one GPU's memory (each takes its
--gpu-memory-utilization share), so a server here or GPU memory in use stops the
experiment before it starts; the way on is to measure the running server
(`--attach URL`) or to stop it. On the CPU engine a second server runs beside the
first (both share the cores, so both are slower): allowed, and said. A process on the
port only moves the experiment's servers to a free port.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from workbench.errors import LaunchError
from workbench.recipes import Catalog, LaunchPlan
from workbench.server import find_running, port_holder
from workbench.telemetry import MEMORY_UNIFIED, GpuReading, read_gpus

__all__ = ["GPU_IN_USE_BYTES", "Holder", "HolderKind", "Occupancy", "check_occupancy"]

# GPU memory in use above this means another process holds the GPU: a CUDA context alone takes
# 0.55 GB (measured on an H200, README "GPU telemetry"); an idle GPU reads 0 to a few MB.
GPU_IN_USE_BYTES = 256 * 2**20
GIB = 2**30


class HolderKind(Enum):
    WORKBENCH_SERVER = "workbench_server"  # a server the workbench started or attached, still alive
    PORT = "port"  # another process listens on the experiment's port
    GPU_MEMORY = "gpu_memory"  # a GPU has memory in use (some process holds it)


@dataclass(frozen=True)
class Holder:
    kind: HolderKind
    description: str
    url: str | None = None  # a server's base URL (one can attach to it)
    here: bool = True  # False: a server attached elsewhere (it holds nothing of this machine)


@dataclass(frozen=True)
class Occupancy:
    """What holds the machine, and what that means for an experiment on `port`."""

    on_gpu: bool
    port: int
    holders: tuple[Holder, ...]

    @property
    def server(self) -> Holder | None:
        """The workbench's running server, if one runs: the one to attach to or stop."""
        return next((h for h in self.holders if h.kind is HolderKind.WORKBENCH_SERVER), None)

    @property
    def blocking(self) -> tuple[Holder, ...]:
        """What stops a GPU experiment: a server here, GPU memory in use. Nothing stops a CPU one."""
        if not self.on_gpu:
            return ()
        return tuple(h for h in self.holders if h.kind is HolderKind.GPU_MEMORY
                     or (h.kind is HolderKind.WORKBENCH_SERVER and h.here))

    def lines(self) -> list[str]:
        """What to tell the person before the experiment starts (nothing when the machine is free)."""
        out = []
        server = self.server
        if server is not None and not self.on_gpu:
            out.append(f"{server.description}: this experiment starts its own vLLM beside it, one configuration "
                       "at a time (the CPU engine allows two; they share the cores, so both run slower). "
                       "To measure that server instead, attach to it; or stop it first.")
        elif server is not None and not server.here:
            out.append(f"{server.description}: it runs elsewhere, so this experiment's servers start here as well.")
        for h in self.holders:
            if h.kind is HolderKind.PORT:
                out.append(f"{h.description}: the experiment's servers listen on a free port instead.")
        if self.blocking:
            out.append(self.error().message)
        return out

    def error(self) -> LaunchError:
        """The refusal of a GPU experiment: what holds the GPU, and the two ways on."""
        what = "; ".join(h.description for h in self.blocking)
        server = self.server
        ways = []
        if server is not None and server.url:
            ways.append(f"measure the running server instead (python -m workbench experiment --attach {server.url}, "
                        "or the Experiment tab's Attach)")
            ways.append("or stop it first (python -m workbench stop, or the Experiment tab's Stop), then start again")
        else:
            ways.append("end the process that holds the GPU (nvidia-smi lists it), then start again")
        return LaunchError(
            f"{what}. An experiment launches its own vLLM server for each configuration, and two servers do not "
            "fit one GPU's memory: nothing was started.",
            hint="To go on, " + ", ".join(ways) + ".")


def _server_holder(state_dir: Path | str | None) -> Holder | None:
    running = find_running(state_dir)
    if running is None:
        return None
    here = running.runtime.owns_processes
    where = f"pid {running.record.pid}, " if here and running.record.pid else ""
    return Holder(HolderKind.WORKBENCH_SERVER,
                  f"A workbench server is {running.status.value} at {running.base_url} ({where}model {running.model}, "
                  f"{running.mode})", running.base_url, here)


def _gpu_holders(reading: GpuReading) -> list[Holder]:
    out = []
    for gpu in reading.gpus:
        if gpu.memory_source == MEMORY_UNIFIED:
            continue  # DGX Spark: "used" is the whole machine's RAM in use, not another process's GPU memory
        used = gpu.memory_used_bytes
        if used is not None and used >= GPU_IN_USE_BYTES:
            total = f" of {gpu.memory_total_bytes / GIB:.1f} GiB" if gpu.memory_total_bytes else ""
            out.append(Holder(HolderKind.GPU_MEMORY,
                              f"GPU {gpu.index} ({gpu.name}) has {used / GIB:.2f} GiB{total} in use by other processes"))
    return out


def check_occupancy(plans: Sequence[LaunchPlan], catalog: Catalog, *, port: int,
                    state_dir: Path | str | None = None,
                    gpus: Callable[[], GpuReading] = read_gpus) -> Occupancy:
    """What holds this machine for an experiment of `plans` whose servers listen on `port`."""
    on_gpu = any(not catalog.hardware[p.hardware].is_cpu for p in plans if p.hardware in catalog.hardware)
    holders: list[Holder] = []
    server = _server_holder(state_dir)
    if server is not None:
        holders.append(server)
    taken = port_holder(port)
    server_port = server is not None and server.url is not None and server.url.rstrip("/").endswith(f":{port}")
    if taken is not None and not (server_port and server is not None and server.here):
        holders.append(Holder(HolderKind.PORT, f"Port {port} is held by {taken.describe()}"))
    if on_gpu:
        holders += _gpu_holders(gpus())
    return Occupancy(on_gpu, port, tuple(holders))

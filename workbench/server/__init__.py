"""Servers: start, watch and stop `vllm serve`; the one place that supervises processes.

    hardware.py   which machine this is (nvidia-smi, /proc/meminfo)
    command.py    prepare(plan) -> ServeCommand: what to run here, or why it cannot run
    process.py    process groups from /proc; the staged stop (SIGTERM, wait, SIGKILL)
    ports.py      who holds a port, a free port
    state.py      one folder per server: state.json and vllm.log
    phases.py     start-up phases from vLLM's own log lines
    diagnosis.py  why a launch failed, and the change that fixes it
    handle.py     ServerProcess: a supervised (or recorded) server
    launch.py     start / launch / attach / find_running / ensure_server
    preflight.py  what a DGX Spark launch needs, checked before the room arrives
    nodes.py      several nodes: what the head and each worker (local, or over ssh) run
    cluster.py    several nodes supervised together: ready, a row per node, stop them all
    node_diagnosis.py  why a worker node failed (ssh, interface, ports, vLLM versions)

Mechanism (process groups, ports, state files) is kept apart from policy (which
way to run a plan, readiness, diagnosis, when to escalate a stop).
"""

from workbench.server.command import DEFAULT_HOST, Mode, ServeCommand, docker_engine_problem, nvidia_gpu_available, prepare
from workbench.server.diagnosis import Diagnosis, diagnose
from workbench.server.handle import STARTUP_TIMEOUT_S, ServerEvent, ServerEventKind, ServerProcess
from workbench.server.launch import (
    EnsuredServer,
    attach,
    ensure_server,
    find_running,
    launch,
    list_servers,
    load_server,
    resolve_server_url,
    start,
)
from workbench.server.phases import PHASE_ORDER, PhaseDetector, PhaseRecord, StartupPhase, Status
from workbench.server.ports import PortHolder, free_port, port_free, port_holder
from workbench.server.process import STOP_TIMEOUT_S, ProcessGroup, StopResult, StopStage, stop_group
from workbench.server.state import state_root

__all__ = [
    "DEFAULT_HOST",
    "PHASE_ORDER",
    "STARTUP_TIMEOUT_S",
    "STOP_TIMEOUT_S",
    "Diagnosis",
    "EnsuredServer",
    "Mode",
    "PhaseDetector",
    "PhaseRecord",
    "PortHolder",
    "ProcessGroup",
    "ServeCommand",
    "ServerEvent",
    "ServerEventKind",
    "ServerProcess",
    "StartupPhase",
    "Status",
    "StopResult",
    "StopStage",
    "attach",
    "diagnose",
    "docker_engine_problem",
    "ensure_server",
    "find_running",
    "free_port",
    "launch",
    "list_servers",
    "load_server",
    "nvidia_gpu_available",
    "port_free",
    "port_holder",
    "prepare",
    "resolve_server_url",
    "start",
    "state_root",
    "stop_group",
]

"""Servers: start, watch and stop `vllm serve`; the one place that supervises processes.

    hardware.py   which machine this is (nvidia-smi, /proc/meminfo)
    command.py    prepare(plan) -> ServeCommand: what to run here, or why it cannot run
    process.py    the one process spawner; process groups (psutil); the staged stop (SIGTERM, wait, SIGKILL)
    ports.py      who holds a port, a free port
    state.py      one folder per server: where state.json and vllm.log live, private files, redaction
    record.py     ServerRecord: state.json's one schema, read and written here only
    phases.py     start-up phases from vLLM's own log lines
    diagnosis.py  why a launch failed, and the change that fixes it
    probe.py      /health and /v1/models (`list_models`)
    events.py     ServerEvent and the event log views subscribe to
    logfile.py    a log's tail, its text, its new lines
    runtime.py    Runtime: the one interface to how a server runs
      runtime_local.py     LocalProcessGroup   runtime_docker.py    DockerContainer
      runtime_attached.py  AttachedURL         runtime_cluster.py   ClusterHead
    handle.py     ServerProcess: the supervisor (readiness, phases, events, watcher, stop) over a Runtime
    launch.py     start / launch / attach: new servers
    servers.py    recorded servers: load_server / list_servers / find_running / ensure_server
    checks.py     EnvironmentCheck: what one check found, and what to do
    environment.py  the machine a launch needs (GPU, memory, Docker, disk), a plan's image pulled
    hub.py        the Hugging Face cache: a model's weights complete in it, a download with progress
    headroom.py   memory free now for --gpu-memory-utilization's share
    nodes.py      several nodes: what the head and each worker (local, or over ssh) run
    cluster.py    several nodes supervised together: ready, a row per node, stop them all
    node_diagnosis.py  why a worker node failed (ssh, interface, ports, vLLM versions)

Mechanism (process groups, ports, state files) is kept apart from policy (which
way to run a plan, readiness, diagnosis, when to escalate a stop). The library
logs to the `workbench.server` logger; the CLI and the UI decide what to show.
"""

from workbench.server.command import DEFAULT_HOST, Mode, ServeCommand, docker_engine_problem, nvidia_gpu_available, prepare
from workbench.server.diagnosis import Diagnosis, diagnose
from workbench.server.handle import STARTUP_TIMEOUT_S, ServerEvent, ServerEventKind, ServerProcess
from workbench.server.launch import attach, launch, start
from workbench.server.probe import list_models
from workbench.server.record import ServerRecord
from workbench.server.runtime import Runtime
from workbench.server.servers import (
    EnsuredServer,
    ensure_server,
    find_running,
    list_servers,
    load_server,
    resolve_server_url,
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
    "ServerRecord",
    "Runtime",
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
    "list_models",
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

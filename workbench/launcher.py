"""Start, watch and stop `vllm serve`: the one module that supervises servers.

    plan ──prepare()──> ServeCommand ──start()──> ServerProcess ──> base_url, phases, status, log
    launch(plan) = start(prepare(plan));  attach(url) for a server started elsewhere

Mechanism and policy are kept apart:

* mechanism — `ProcessGroup` (the server's process group read from /proc:
  members, signal, wait until gone), `port_holder()` (who listens on a port),
  state files (JSON beside the log in a per-server folder);
* policy — `prepare()` (which way to run a plan and the checks that refuse it
  early), the watcher (phases from vLLM's own log lines and from HTTP,
  readiness, failure diagnosis) and the staged stop (SIGTERM to the group,
  wait, SIGKILL) whose `StopStage` is recorded.

A server keeps its folder (`state.json`, `vllm.log`) after it exits, so a
crash keeps its log and another process (`python -m workbench status`, a
restarted UI) can find the server again with `find_running()`.
"""

from __future__ import annotations

import atexit
import enum
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, Protocol

import httpx

from workbench.diagnosis import Diagnosis, diagnose
from workbench.errors import LaunchError

__all__ = [
    "Mode",
    "Phase",
    "PHASE_ORDER",
    "Status",
    "StopStage",
    "ServerEvent",
    "PhaseRecord",
    "StopResult",
    "PortHolder",
    "ServeCommand",
    "ServerProcess",
    "PhaseDetector",
    "ProcessGroup",
    "prepare",
    "start",
    "launch",
    "attach",
    "find_running",
    "list_servers",
    "load_server",
    "state_root",
    "port_holder",
    "nvidia_gpu_available",
    "docker_engine_problem",
]

Mode = Literal["local", "docker", "attach"]
EventKind = Literal["phase", "progress", "status"]

STATE_DIR_ENV = "WORKBENCH_STATE_DIR"
STATE_FILE = "state.json"
LOG_FILE = "vllm.log"
DEFAULT_HOST = "127.0.0.1"
CONTAINER_PORT = 8000  # vLLM's default port inside the official images
STARTUP_TIMEOUT_S = 900.0
STOP_TIMEOUT_S = 30.0
POLL_S = 0.25
HEALTH_EVERY_S = 1.0
WATCH_EVERY_S = 5.0  # after ready: each probe is a line in vLLM's access log


class Phase(str, enum.Enum):
    """Start-up phases, in the order vLLM 0.32 goes through them.

    On the CPU engine with --enforce-eager there is no compiling or graph
    capture; phases that do not happen are simply not reported."""

    STARTED = "started"  # the process exists
    LOADING_WEIGHTS = "loading_weights"  # "Starting to load model ..."
    COMPILING = "compiling"  # torch.compile (GPU, without --enforce-eager)
    KV_CACHE = "kv_cache"  # "<device> KV cache size: N tokens"
    CAPTURING_GRAPHS = "capturing_graphs"  # CUDA graph capture, after the KV cache
    HTTP_UP = "http_up"  # "Starting vLLM server on http://..." / /health answers
    READY = "ready"  # /health 200 and the served model listed in /v1/models


PHASE_ORDER: tuple[Phase, ...] = tuple(Phase)


class Status(str, enum.Enum):
    STARTING = "starting"
    READY = "ready"
    FAILED = "failed"
    STOPPED = "stopped"


class StopStage(str, enum.Enum):
    """How far the staged stop had to go."""

    ALREADY_GONE = "already_gone"  # nothing of the group was running
    TERMINATED = "terminated"  # everything exited after SIGTERM
    KILLED = "killed"  # something outlived SIGTERM's grace period: SIGKILL
    DETACHED = "detached"  # an attached server: forgotten, not signalled


@dataclass(frozen=True)
class ServerEvent:
    """One thing a view can show: a phase entered, progress within it, a status change."""

    kind: EventKind
    phase: Phase | None
    status: Status
    elapsed_s: float  # since the process started
    detail: str = ""
    progress: float | None = None  # 0..1, while loading weights
    diagnosis: Diagnosis | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["phase"] = self.phase.value if self.phase else None
        d["status"] = self.status.value
        d["diagnosis"] = self.diagnosis.to_dict() if self.diagnosis else None
        return d


@dataclass
class PhaseRecord:
    phase: Phase
    started_s: float  # since the process started
    duration_s: float | None = None  # None while it is the current phase
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "phase": self.phase.value}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> PhaseRecord:
        return cls(Phase(d["phase"]), d["started_s"], d.get("duration_s"), d.get("detail", ""))


@dataclass(frozen=True)
class StopResult:
    stage: StopStage
    seconds: float
    signalled_pids: list[int] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "stage": self.stage.value}


@dataclass(frozen=True)
class PortHolder:
    pid: int | None  # None when the socket's owner is not visible (another user)
    command: str

    def describe(self) -> str:
        return f"pid {self.pid} ({self.command})" if self.pid else self.command


class PlanLike(Protocol):
    """What the launcher reads from workbench.recipes.LaunchPlan."""

    argv: list[str]
    env: dict[str, str]
    docker_argv: list[str]
    port: int
    hardware: str
    engine: str
    local_build: str | None
    served_model_name: str

    def to_dict(self) -> dict[str, Any]: ...


# ── mechanism: processes, ports, state files ────────────────────────────────


def _proc_stat(pid: int) -> tuple[str, int, int] | None:
    """(state, pgrp, start time in clock ticks) of a pid, from /proc/<pid>/stat."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name is in parentheses and may hold spaces: split after the last ')'.
    fields = text[text.rfind(")") + 2 :].split()
    return fields[0], int(fields[2]), int(fields[19])


def _cmdline(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "?"
    return " ".join(p.decode(errors="replace") for p in raw.split(b"\0") if p) or "?"


class ProcessGroup:
    """A process group started with start_new_session=True, seen through /proc."""

    def __init__(self, pgid: int, popen: subprocess.Popen | None = None) -> None:
        self.pgid = pgid
        self.popen = popen  # set when this process started it (so it must reap it)

    def members(self) -> list[int]:
        """Live pids in the group; zombies are dead and left out."""
        if self.popen is not None:
            self.popen.poll()  # reap the leader if it exited
        pids = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                stat = _proc_stat(int(entry.name))
                if stat and stat[1] == self.pgid and stat[0] not in ("Z", "X"):
                    pids.append(int(entry.name))
        return sorted(pids)

    def signal(self, sig: signal.Signals) -> bool:
        """Signal every member; False if the group no longer exists."""
        try:
            os.killpg(self.pgid, sig)
            return True
        except ProcessLookupError:
            return False

    def wait_gone(self, timeout: float) -> list[int]:
        """Wait until no member is left; returns the survivors (empty when all gone)."""
        deadline = time.monotonic() + timeout
        while True:
            alive = self.members()
            if not alive or time.monotonic() >= deadline:
                return alive
            time.sleep(0.1)


def stop_group(group: ProcessGroup, timeout: float = STOP_TIMEOUT_S, kill_wait: float = 10.0) -> StopResult:
    """Staged stop: SIGTERM to the whole group, wait `timeout`, then SIGKILL."""
    started = time.monotonic()
    pids = group.members()
    if not pids:
        return StopResult(StopStage.ALREADY_GONE, 0.0, [])
    group.signal(signal.SIGTERM)
    if not group.wait_gone(timeout):
        return StopResult(StopStage.TERMINATED, time.monotonic() - started, pids)
    group.signal(signal.SIGKILL)
    survivors = group.wait_gone(kill_wait)
    if survivors:
        raise LaunchError(
            f"Processes {survivors} of group {group.pgid} survived SIGKILL.",
            hint="They are stuck in the kernel (state D, often a hung GPU driver); "
            "check `ps -o pid,stat,cmd -g " + str(group.pgid) + "`.",
        )
    return StopResult(StopStage.KILLED, time.monotonic() - started, pids)


def _listening_inodes(port: int) -> set[str]:
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            if len(cols) > 9 and cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(cols[9])
    return inodes


def port_holder(port: int) -> PortHolder | None:
    """Who listens on `port`, from /proc/net/tcp{,6} and /proc/*/fd; None if nobody."""
    inodes = _listening_inodes(port)
    if not inodes:
        return None
    targets = {f"socket:[{i}]" for i in inodes}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fds = list((entry / "fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(fd) in targets:
                    return PortHolder(int(entry.name), _cmdline(int(entry.name)))
            except OSError:
                continue
    return PortHolder(None, "a process this user cannot see (another user's, or a container)")


def _port_free(host: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def state_root(override: Path | str | None = None) -> Path:
    """Folder of per-server folders: the argument, $WORKBENCH_STATE_DIR, or
    ~/.cache/nemotron-workbench/servers."""
    if override is not None:
        return Path(override)
    env = os.environ.get(STATE_DIR_ENV)
    return Path(env) if env else Path.home() / ".cache" / "nemotron-workbench" / "servers"


def _write_json(path: Path, data: Mapping[str, Any]) -> None:
    # Write then rename, so a reader never sees half a file. 0600: it may hold an API key.
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=2)
    os.replace(tmp, path)


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


# ── policy: phases from vLLM's log ──────────────────────────────────────────

# (phase, pattern, detail) — vLLM 0.32's own lines. LOADING_WEIGHTS, KV_CACHE and
# HTTP_UP were read from a real CPU start (tests/fixtures/launch-logs/
# startup_cpu_smollm2.log); COMPILING and CAPTURING_GRAPHS only happen on a GPU
# without --enforce-eager, and their patterns are the format strings in vLLM
# 0.32's source (compilation/monitor.py, backends.py, v1/worker/gpu_model_runner.py).
_PHASE_PATTERNS: tuple[tuple[Phase, re.Pattern[str], Callable[[re.Match[str]], str]], ...] = (
    (Phase.LOADING_WEIGHTS, re.compile(r"Starting to load model (\S+?)(?:\.\.\.)?$"),
     lambda m: f"loading {m.group(1)}"),
    (Phase.COMPILING, re.compile(r"Starting torch\.compile|Dynamo bytecode transform time|"
                                 r"Compiling a graph for"), lambda m: "torch.compile"),
    (Phase.KV_CACHE, re.compile(r"(\w+) KV cache size: ([\d,]+) tokens, Maximum concurrency for "
                                r"([\d,]+) tokens per request: ([\d.]+)x"),
     lambda m: f"{m.group(1)} KV cache: {m.group(2)} tokens ({m.group(4)}x requests of {m.group(3)} tokens)"),
    (Phase.CAPTURING_GRAPHS, re.compile(r"Capturing CUDA graphs|Profiling CUDA graph memory"),
     lambda m: "CUDA graph capture"),
    (Phase.HTTP_UP, re.compile(r"Starting vLLM server on (\S+)"), lambda m: m.group(1)),
)
_ENGINE_INIT = re.compile(r"Initializing a V1 LLM engine \((v[^)]+)\)")
_ARCHITECTURE = re.compile(r"Resolved architecture: (\w+)")
_CHECKPOINT_SIZE = re.compile(r"Checkpoint size: ([\d.]+ GiB)")
_SHARDS = re.compile(r"Loading safetensors checkpoint shards:\s+(\d+)% Completed \| (\d+)/(\d+)")
_WEIGHTS_DONE = re.compile(r"Loading weights took ([\d.]+) seconds|Model loading took ([\d.]+) GiB memory")


class PhaseDetector:
    """Turns log lines into (phase, detail, progress) steps. Pure: no clock, no I/O.

    A phase is reported once, when first seen; progress lines while loading
    weights come out as (LOADING_WEIGHTS, detail, fraction)."""

    def __init__(self) -> None:
        self.seen: set[Phase] = set()
        self.checkpoint_size: str | None = None

    def feed(self, line: str) -> list[tuple[Phase, str, float | None]]:
        out: list[tuple[Phase, str, float | None]] = []
        # Before weights load, the engine's set-up is detail of STARTED (it can take a while).
        arch = _ARCHITECTURE.search(line)
        if arch:
            out.append((Phase.STARTED, f"architecture {arch.group(1)}", None))
        engine = _ENGINE_INIT.search(line)
        if engine:
            out.append((Phase.STARTED, f"engine core {engine.group(1)} initializing", None))
        size = _CHECKPOINT_SIZE.search(line)
        if size:
            self.checkpoint_size = size.group(1)
            out.append((Phase.LOADING_WEIGHTS, f"checkpoint {self.checkpoint_size}", None))
        shards = _SHARDS.search(line)
        if shards:
            done, total = int(shards.group(2)), int(shards.group(3))
            out.append((Phase.LOADING_WEIGHTS, f"{done}/{total} shards", done / total if total else None))
        finished = _WEIGHTS_DONE.search(line)
        if finished:
            out.append((Phase.LOADING_WEIGHTS, f"weights loaded in {finished.group(1) or '?'} s", 1.0))
        for phase, pattern, detail in _PHASE_PATTERNS:
            match = pattern.search(line)
            if match and phase not in self.seen:
                self.seen.add(phase)
                out.append((phase, detail(match), None))
        return out


# ── policy: what to run ─────────────────────────────────────────────────────


@dataclass
class ServeCommand:
    """Exactly what start() runs: argv, environment additions, where it listens."""

    mode: Mode
    argv: list[str]  # executed as-is (no shell)
    port: int
    served_model: str
    host: str = DEFAULT_HOST
    env: dict[str, str] = field(default_factory=dict)  # added to os.environ
    plan: dict[str, Any] | None = None
    container_name: str | None = None
    api_key: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def nvidia_gpu_available() -> bool:
    """True when nvidia-smi exists and lists at least one GPU."""
    if shutil.which("nvidia-smi") is None:
        return False
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=15)
    except (OSError, subprocess.SubprocessError):
        return False
    return out.returncode == 0 and "GPU" in out.stdout


def docker_engine_problem() -> str | None:
    """Why `docker run` cannot work here, or None when the Docker engine answers."""
    if shutil.which("docker") is None:
        return "the docker command is not installed"
    try:
        out = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"],
                             capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"`docker info` failed ({exc})"
    if out.returncode != 0:
        first = next((ln for ln in (out.stderr or out.stdout).splitlines() if ln.strip()), "no output")
        return f"the docker CLI is installed but no Docker engine answers (`docker info`: {first.strip()})"
    return None


def _vllm_executable() -> str | None:
    beside = Path(sys.executable).with_name("vllm")
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("vllm")


def _flag_value(argv: Sequence[str], flag: str) -> str | None:
    for i, token in enumerate(argv):
        if token == flag and i + 1 < len(argv):
            return argv[i + 1]
        if token.startswith(flag + "="):
            return token.split("=", 1)[1]
    return None


def _set_flag(argv: list[str], flag: str, value: str) -> list[str]:
    """argv with `flag value` replacing any earlier copy (or appended)."""
    out: list[str] = []
    skip = False
    for i, token in enumerate(argv):
        if skip:
            skip = False
            continue
        if token == flag:
            skip = i + 1 < len(argv)
            continue
        if token.startswith(flag + "="):
            continue
        out.append(token)
    return [*out, flag, value]


def _build_local_model(name: str, progress: Callable[[str], None]) -> Path:
    from workbench import demo_model

    builders = {demo_model.DEMO_MODEL_NAME: demo_model.build_demo_model,
                demo_model.FORCING_MODEL_NAME: demo_model.build_forcing_model}
    if name not in builders:
        raise LaunchError(f"The plan asks for a local build named {name!r}, which the workbench cannot build.",
                          hint=f"Known local builds: {', '.join(builders)}.")
    return builders[name](progress=progress).path


def _docker_argv(plan: PlanLike, port: int, host: str, name: str) -> list[str]:
    argv = list(plan.docker_argv)
    if argv[:2] != ["docker", "run"]:
        raise LaunchError(f"The plan's docker command does not start with `docker run`: {argv[:3]}")
    out = ["docker", "run", "--rm", "--name", name]
    inner_port = int(_flag_value(argv, "--port") or CONTAINER_PORT)
    i = 2
    while i < len(argv):
        token = argv[i]
        if token in ("-p", "--publish") and i + 1 < len(argv):
            # Publish on loopback only, on the port the user asked for.
            out += [token, f"{host}:{port}:{inner_port}"]
            i += 2
            continue
        if token in ("-v", "--volume") and i + 1 < len(argv):
            out += [token, os.path.expanduser(argv[i + 1])]
            i += 2
            continue
        out.append(token)
        i += 1
    if "-p" not in argv and "--publish" not in argv:
        out[5:5] = ["-p", f"{host}:{port}:{inner_port}"]
    return out


def prepare(
    plan: PlanLike,
    *,
    mode: Literal["auto", "local", "docker"] = "auto",
    python: str | Path | None = None,
    host: str | None = None,
    port: int | None = None,
    progress: Callable[[str], None] = print,
) -> ServeCommand:
    """Turn a rendered plan into the command to run here, or refuse with the reason.

    Refuses before anything starts: a TensorRT-LLM or multi-node plan, a GPU
    plan on a machine without nvidia-smi, a mode that cannot run (no vLLM, no
    Docker engine). Builds the CPU demo model when the plan needs it."""
    if plan.engine != "vllm":
        raise LaunchError(
            f"This plan is for {plan.engine}; the workbench renders TensorRT-LLM commands but launches only vLLM.",
            hint="Copy the command from `python -m workbench render` and run it where TensorRT-LLM is installed.",
        )
    if getattr(plan, "worker_argvs", None):
        raise LaunchError("This is a multi-node plan; the workbench launches single-node servers only.",
                          hint="Run the rendered head and worker commands on each node (python -m workbench render).")
    if plan.hardware != "cpu" and not nvidia_gpu_available():
        raise LaunchError(
            f"This plan is for {plan.hardware} GPUs, and this machine has no NVIDIA GPU (nvidia-smi not found or lists none).",
            hint=f"The command can still be copied and run on the GPU machine: python -m workbench render "
            f"--hardware {plan.hardware}. Here, serve the CPU demo engine: python -m workbench serve --hardware cpu.",
        )
    port = port or plan.port
    chosen_host = host or _flag_value(plan.argv, "--host") or DEFAULT_HOST
    served = _flag_value(plan.argv, "--served-model-name") or plan.served_model_name or plan.argv[2]
    plan_dict = plan.to_dict()

    if mode == "auto":
        mode = "local" if (python or _vllm_executable()) else "docker" if docker_engine_problem() is None else "local"
    if mode == "docker":
        problem = docker_engine_problem()
        if problem:
            raise LaunchError(f"Cannot run the plan with Docker: {problem}.",
                              hint="Start the Docker engine (e.g. `sudo systemctl start docker`), or run vLLM "
                              "from this environment with --mode local.")
        name = f"workbench-vllm-{port}"
        return ServeCommand("docker", _docker_argv(plan, port, chosen_host, name), port, served, chosen_host,
                            {}, plan_dict, container_name=name)
    if mode != "local":
        raise LaunchError(f"Unknown launch mode {mode!r}.", hint="Use auto, local or docker (or attach a URL).")

    if plan.argv[:2] != ["vllm", "serve"] or len(plan.argv) < 3:
        raise LaunchError(f"The plan's command is not `vllm serve MODEL ...`: {plan.argv[:3]}")
    if python:
        if not Path(python).is_file():
            raise LaunchError(f"--python {python} does not exist.", hint="Give the python of an environment with vLLM.")
        head = [str(python), "-m", "vllm.entrypoints.cli.main", "serve"]
    else:
        exe = _vllm_executable()
        if exe is None:
            raise LaunchError(
                "vLLM is not installed in this environment (no `vllm` beside this Python or on PATH).",
                hint="Install it (pip install -e '.[cpu]' for the CPU engine, '.[gpu]' on a GPU machine), "
                "point at another environment with --python /path/to/bin/python, or use --mode docker.",
            )
        head = [exe, "serve"]
    model = plan.argv[2]
    rest = list(plan.argv[3:])
    env = dict(plan.env)
    if plan.local_build:
        model = str(_build_local_model(plan.local_build, progress))
        if _flag_value(rest, "--served-model-name") is None:
            rest += ["--served-model-name", plan.served_model_name or plan.argv[2]]
    rest = _set_flag(rest, "--port", str(port))
    if host or _flag_value(rest, "--host") is None:
        rest = _set_flag(rest, "--host", chosen_host)
    if Path(model).is_dir():
        env.setdefault("HF_HUB_OFFLINE", "1")  # a local directory needs nothing from the Hub
    env.setdefault("PYTHONUNBUFFERED", "1")  # phases show as they happen, not when a buffer fills
    return ServeCommand("local", [*head, model, *rest], port, served, chosen_host, env, plan_dict)


# ── the handle ──────────────────────────────────────────────────────────────


def _probe(base_url: str, model: str, api_key: str | None, timeout: float = 2.0) -> tuple[int | None, bool]:
    """(/health status or None if unreachable, served model listed in /v1/models)."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        health = httpx.get(f"{base_url}/health", timeout=timeout).status_code
    except httpx.HTTPError:
        return None, False
    if health != 200:
        return health, False
    try:
        r = httpx.get(f"{base_url}/v1/models", headers=headers, timeout=timeout)
        listed = r.status_code == 200 and any(m.get("id") == model for m in r.json().get("data", []))
    except (httpx.HTTPError, ValueError):
        listed = False
    return health, listed


def _url_host(host: str) -> str:
    # A server bound to all interfaces is reached on loopback from here.
    return {"0.0.0.0": "127.0.0.1", "::": "[::1]"}.get(host, f"[{host}]" if ":" in host else host)


class ServerProcess:
    """A vLLM server the workbench started (local, docker) or attached to.

    A handle made by start()/launch() in this process is supervised by a
    watcher thread: `status`, `phase`, `phases` and `events()` update live.
    A handle loaded from a state file (find_running, load_server) works out
    its status when asked (`refresh()`), from the process table and HTTP."""

    def __init__(self, state: dict[str, Any], state_dir: Path, popen: subprocess.Popen | None = None) -> None:
        self.state_dir = state_dir
        self.mode: Mode = state["mode"]
        self.port: int = state["port"]
        self.host: str = state.get("host", DEFAULT_HOST)
        self.model: str = state["served_model"]
        self.api_key: str | None = state.get("api_key")
        self.pid: int | None = state.get("pid")
        self.pgid: int | None = state.get("pgid")
        self.argv: list[str] = state.get("argv", [])
        self.env: dict[str, str] = state.get("env", {})
        self.plan: dict[str, Any] | None = state.get("plan")
        self.container_name: str | None = state.get("container_name")
        self.started_at: float = state["started_at"]
        self.base_url: str = state.get("base_url") or f"http://{_url_host(self.host)}:{self.port}"
        self.log_path: Path | None = Path(state["log_path"]) if state.get("log_path") else None
        self.status = Status(state.get("status", Status.STARTING.value))
        self.phases = [PhaseRecord.from_dict(p) for p in state.get("phases", [])]
        self.time_to_ready_s: float | None = state.get("time_to_ready_s")
        self.exit_code: int | None = state.get("exit_code")
        self.diagnosis = Diagnosis.from_dict(state["diagnosis"]) if state.get("diagnosis") else None
        self.stop_result: StopResult | None = None
        self._pid_start_ticks: int | None = state.get("pid_start_ticks")
        self._popen = popen
        self._group = ProcessGroup(self.pgid, popen) if self.pgid else None
        self._events: list[ServerEvent] = []
        self._subscribers: list[Callable[[ServerEvent], None]] = []
        self._cond = threading.Condition()
        self._watcher: threading.Thread | None = None
        self._stopping = False
        self._started_mono = time.monotonic() - max(0.0, time.time() - self.started_at)

    # -- what a view reads --------------------------------------------------

    @property
    def openai_base_url(self) -> str:
        return f"{self.base_url}/v1"

    @property
    def popen(self) -> subprocess.Popen | None:
        """The Popen of the group leader when this process started it, else None."""
        return self._popen

    @property
    def phase(self) -> Phase | None:
        return self.phases[-1].phase if self.phases else None

    @property
    def state_path(self) -> Path:
        return self.state_dir / STATE_FILE

    @property
    def supervised(self) -> bool:
        """True when a watcher in this process follows the server live."""
        return self._watcher is not None and self._watcher.is_alive()

    def log_tail(self, lines: int = 40) -> list[str]:
        """The last lines of the server's log (empty for an attached server)."""
        if not self.log_path or not self.log_path.exists():
            return []
        with self.log_path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 256 * lines))
            data = f.read().decode(errors="replace")
        return data.splitlines()[-lines:]

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path and self.log_path.exists() else ""

    def group_pids(self) -> list[int]:
        """Live pids of the server's process group (empty when all gone, or attached)."""
        return self._group.members() if self._group else []

    def is_alive(self) -> bool:
        """Local/docker: the process group still has members (and the leader is
        the process we started, not a reused pid). Attach: /health answers."""
        if self.mode == "attach":
            return _probe(self.base_url, self.model, self.api_key, timeout=1.5)[0] is not None
        if not self._group:
            return False
        stat = _proc_stat(self.pid) if self.pid else None
        if stat and self._pid_start_ticks is not None and stat[2] != self._pid_start_ticks:
            return False  # the pid now belongs to some other process
        return bool(self._group.members())

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode, "port": self.port, "host": self.host, "base_url": self.base_url,
            "served_model": self.model, "api_key": self.api_key, "pid": self.pid, "pgid": self.pgid,
            "pid_start_ticks": self._pid_start_ticks, "argv": self.argv, "env": self.env, "plan": self.plan,
            "container_name": self.container_name, "started_at": self.started_at,
            "log_path": str(self.log_path) if self.log_path else None, "status": self.status.value,
            "phases": [p.to_dict() for p in self.phases], "time_to_ready_s": self.time_to_ready_s,
            "exit_code": self.exit_code, "diagnosis": self.diagnosis.to_dict() if self.diagnosis else None,
            "stop_stage": self.stop_result.stage.value if self.stop_result else None,
            "supervisor_pid": os.getpid() if self.supervised else None,
        }

    def __repr__(self) -> str:
        return f"<ServerProcess {self.mode} {self.base_url} {self.model} {self.status.value}>"

    # -- events ---------------------------------------------------------------

    @property
    def events_so_far(self) -> list[ServerEvent]:
        with self._cond:
            return list(self._events)

    def subscribe(self, callback: Callable[[ServerEvent], None], *, replay: bool = True) -> Callable[[], None]:
        """Call `callback(event)` for each event (on the watcher thread); with
        `replay`, first for the events already past. Returns an unsubscribe function."""
        with self._cond:
            past = list(self._events) if replay else []
            self._subscribers.append(callback)
        for event in past:
            callback(event)
        return lambda: self._subscribers.remove(callback) if callback in self._subscribers else None

    def events(self, timeout: float | None = None) -> Iterator[ServerEvent]:
        """Every event from the start, then live ones, until the server is ready,
        failed or stopped (or `timeout` seconds pass with nothing new)."""
        index = 0
        while True:
            with self._cond:
                if index >= len(self._events):
                    if self.status is not Status.STARTING or not self.supervised:
                        return
                    if not self._cond.wait(timeout) and index >= len(self._events):
                        return
                batch = self._events[index:]
                index += len(batch)
            yield from batch

    def _emit(self, kind: EventKind, phase: Phase | None, detail: str = "", progress: float | None = None) -> None:
        elapsed = time.monotonic() - self._started_mono
        if kind == "phase" and phase is not None:
            if self.phases and self.phases[-1].duration_s is None:
                self.phases[-1].duration_s = round(elapsed - self.phases[-1].started_s, 3)
            record = PhaseRecord(phase, round(elapsed, 3), None if phase is not Phase.READY else 0.0, detail)
            self.phases.append(record)
        elif kind == "progress" and self.phases and phase is self.phase:
            self.phases[-1].detail = detail
        if kind == "status" and self.status is not Status.STARTING and self.phases and self.phases[-1].duration_s is None:
            self.phases[-1].duration_s = round(elapsed - self.phases[-1].started_s, 3)
        event = ServerEvent(kind, phase, self.status, round(elapsed, 3), detail, progress,
                            self.diagnosis if kind == "status" else None)
        with self._cond:
            self._events.append(event)
            subscribers = list(self._subscribers)
            self._cond.notify_all()
        if kind != "progress":
            self._save()
        for callback in subscribers:
            try:
                callback(event)
            except Exception:  # a view's bug must not stop the supervision
                pass

    def _save(self) -> None:
        on_disk = _read_json(self.state_path) or {}
        if on_disk.get("status") == Status.STOPPED.value and self.status is not Status.STOPPED:
            return  # another process stopped it; keep its record
        data = self.to_dict()
        if data["stop_stage"] is None and on_disk.get("stop_stage"):
            data["stop_stage"] = on_disk["stop_stage"]  # recorded by the process that stopped it
        _write_json(self.state_path, data)

    # -- supervision (watcher thread) ------------------------------------------

    def _start_watcher(self) -> None:
        self._watcher = threading.Thread(target=self._watch, name=f"vllm-watch-{self.port}", daemon=True)
        self._watcher.start()

    def _watch(self) -> None:
        detector = PhaseDetector()
        offset, pending = 0, b""
        last_probe = 0.0

        def read_log() -> None:
            nonlocal offset, pending
            if not self.log_path:
                return
            try:
                with self.log_path.open("rb") as f:
                    f.seek(offset)
                    chunk = f.read()
            except OSError:
                return
            offset += len(chunk)
            # tqdm redraws with \r: treat it as a line end too.
            lines = (pending + chunk).replace(b"\r", b"\n").split(b"\n")
            pending = lines.pop()
            for raw in lines:
                for phase, detail, progress in detector.feed(raw.decode(errors="replace")):
                    if self.status is not Status.STARTING:
                        continue
                    if phase in {r.phase for r in self.phases} or progress is not None:
                        if phase is self.phase and detail != self.phases[-1].detail:
                            self._emit("progress", phase, detail, progress)
                    else:
                        self._emit("phase", phase, detail, progress)

        while True:
            read_log()
            exited = self._popen.poll() is not None if self._popen else not self.is_alive()
            if exited:
                read_log()
                self._finish()
                return
            now = time.monotonic()
            every = HEALTH_EVERY_S if self.status is Status.STARTING else WATCH_EVERY_S
            if self.status in (Status.STARTING, Status.READY) and now - last_probe >= every:
                last_probe = now
                self._check_http()
            time.sleep(POLL_S)

    def _check_http(self) -> None:
        health, listed = _probe(self.base_url, self.model, self.api_key)
        if self.status is Status.STARTING:
            if health == 200 and Phase.HTTP_UP not in {r.phase for r in self.phases}:
                self._emit("phase", Phase.HTTP_UP, self.base_url)
            if health == 200 and listed:
                self.time_to_ready_s = round(time.monotonic() - self._started_mono, 3)
                self._emit("phase", Phase.READY, f"{self.model} at {self.openai_base_url}")
                self.status = Status.READY
                self._emit("status", None, f"ready in {self.time_to_ready_s:.1f} s")
        elif self.status is Status.READY and health is not None and health >= 500 and not self._stopping:
            # vLLM answers 503 on /health once its engine is dead.
            self._fail(None)

    def _fail(self, exit_code: int | None) -> None:
        self.exit_code = exit_code
        self.diagnosis = diagnose(self.log_text(), exit_code=exit_code)
        if self.diagnosis.cause == "address_in_use":
            holder = port_holder(self.port)
            if holder and holder.pid not in self.group_pids():
                self.diagnosis = replace(self.diagnosis, summary=f"Port {self.port} is held by {holder.describe()}.")
        self.status = Status.FAILED
        self._emit("status", None, self.diagnosis.summary)

    def _finish(self) -> None:
        code = self._popen.returncode if self._popen else None
        on_disk = _read_json(self.state_path) or {}
        stopped_elsewhere = on_disk.get("status") in (Status.STOPPED.value, "stopping")
        if self._stopping or stopped_elsewhere:
            self.exit_code = code
            self.status = Status.STOPPED
            self._emit("status", None, "stopped")
        elif self.status is not Status.FAILED:
            self._fail(code)
        else:
            self.exit_code = code
            self._save()

    # -- status for a handle that is not supervised here ---------------------

    def refresh(self) -> Status:
        """Work out the status now (a supervised handle is already live)."""
        if self.supervised or self.status is Status.STOPPED:
            return self.status
        health, listed = _probe(self.base_url, self.model, self.api_key, timeout=1.5)
        if self.mode == "attach":
            self.status = Status.READY if health == 200 else Status.FAILED
            if self.status is Status.FAILED and self.diagnosis is None:
                self.diagnosis = Diagnosis("engine_died" if health else "unknown",
                                           f"The attached server at {self.base_url} does not answer /health"
                                           + (f" (HTTP {health})." if health else "."),
                                           "Check the server where it was started; attach again once it is up.")
            return self.status
        if not self.is_alive():
            if self.status is not Status.FAILED:
                self._fail(self.exit_code)
            return self.status
        if health == 200 and listed:
            self.status = Status.READY
        elif health is not None and health >= 500 and self.status is Status.READY:
            self._fail(None)
        return self.status

    # -- waiting and stopping ------------------------------------------------

    def wait_ready(self, timeout: float = STARTUP_TIMEOUT_S) -> ServerProcess:
        """Block until ready; raise LaunchError with the diagnosis if it fails or times out."""
        deadline = time.monotonic() + timeout
        while True:
            status = self.status if self.supervised else self.refresh()
            if status is Status.READY:
                return self
            if status in (Status.FAILED, Status.STOPPED):
                break
            if time.monotonic() >= deadline:
                raise LaunchError(
                    f"vllm serve on port {self.port} is not ready after {timeout:.0f} s "
                    f"(phase: {self.phase.value if self.phase else 'none'}).",
                    hint=f"It is still running; watch {self.log_path} or stop it with python -m workbench stop --port {self.port}.",
                )
            with self._cond:
                self._cond.wait(0.5)
        if self._watcher:
            self._watcher.join(5)
        if self.status is Status.STOPPED:
            raise LaunchError(f"vllm serve on port {self.port} was stopped before it was ready.")
        d = self.diagnosis or diagnose(self.log_text(), exit_code=self.exit_code)
        raise LaunchError(f"vllm serve on port {self.port} failed: {d.summary}",
                          hint=f"{d.fix}\nLog: {self.log_path}")

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> StopResult:
        """Staged stop of the whole process group (or docker stop); an attached
        server is only forgotten. Nothing of the group is left running after it."""
        started = time.monotonic()
        if self.mode == "attach":
            self.stop_result = StopResult(StopStage.DETACHED, 0.0)
            self.status = Status.STOPPED
            self._emit("status", None, "detached")
            return self.stop_result
        self._stopping = True
        on_disk = _read_json(self.state_path) or {}
        if on_disk.get("status") not in (Status.STOPPED.value, None):
            _write_json(self.state_path, {**on_disk, "status": "stopping"})
        if self.mode == "docker" and self.container_name and self.is_alive():
            subprocess.run(["docker", "stop", "-t", str(int(timeout)), self.container_name],
                           capture_output=True, timeout=timeout + 30)
        if self._group is None:
            result = StopResult(StopStage.ALREADY_GONE, 0.0)
        elif self._pid_start_ticks is not None and self.pid and not self.is_alive():
            result = StopResult(StopStage.ALREADY_GONE, 0.0)
        else:
            result = stop_group(self._group, timeout)
        self.stop_result = replace(result, seconds=round(time.monotonic() - started, 3))
        if self._popen is not None:
            self._popen.poll()
            self.exit_code = self._popen.returncode
        if self._watcher and self._watcher is not threading.current_thread():
            self._watcher.join(10)
        if self.status is not Status.FAILED:
            self.status = Status.STOPPED
        self._emit("status", None, f"stopped ({self.stop_result.stage.value})")
        return self.stop_result

    def keep(self) -> None:
        """Leave the server running when this process exits (undoes stop_at_exit)."""
        atexit.unregister(self._stop_at_exit)

    def _stop_at_exit(self) -> None:
        if self.mode != "attach" and self.status is not Status.STOPPED:
            try:
                self.stop(timeout=15)
            except Exception:  # at interpreter exit there is nobody left to tell
                pass


# ── entry points ────────────────────────────────────────────────────────────


def _server_dir(root: Path, mode: Mode, host: str, port: int) -> Path:
    name = str(port) if mode != "attach" else f"attach-{re.sub(r'[^A-Za-z0-9.-]', '_', host)}-{port}"
    return root / name


def _refuse_busy_port(command: ServeCommand, root: Path) -> None:
    if _port_free(command.host if command.mode == "local" else DEFAULT_HOST, command.port):
        return
    holder = port_holder(command.port)
    ours = _read_json(_server_dir(root, command.mode, command.host, command.port) / STATE_FILE)
    hint = f"Choose another port with --port, or stop what holds {command.port}"
    if ours and holder and holder.pid == ours.get("pid"):
        hint = f"The workbench started that server; stop it with: python -m workbench stop --port {command.port}"
    elif holder and holder.pid:
        hint += f" (kill {holder.pid})."
    raise LaunchError(
        f"Port {command.port} is already in use by {holder.describe() if holder else 'another process'}; "
        "nothing was started.",
        hint=hint,
    )


def start(
    command: ServeCommand,
    *,
    state_dir: Path | str | None = None,
    on_event: Callable[[ServerEvent], None] | None = None,
    check_port: bool = True,
    stop_at_exit: bool = True,
) -> ServerProcess:
    """Run a prepared command in its own session, log to its state folder, and
    supervise it. Returns at once; use wait_ready() or events() to follow it.

    check_port=False skips the busy-port refusal and lets vLLM meet the clash
    itself (it is then diagnosed from its log, as when the port is taken
    between the check and vLLM's bind)."""
    root = state_root(state_dir)
    if check_port:
        _refuse_busy_port(command, root)
    folder = _server_dir(root, command.mode, command.host, command.port)
    folder.mkdir(parents=True, exist_ok=True)
    log_path = folder / LOG_FILE
    if log_path.exists():
        log_path.replace(folder / "vllm.previous.log")
    with log_path.open("wb") as log:
        try:
            popen = subprocess.Popen(
                command.argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **command.env},
                start_new_session=True,
            )
        except OSError as exc:
            raise LaunchError(f"Could not start {command.argv[0]}: {exc}",
                              hint="Check the path, or install vLLM in this environment.") from exc
    stat = _proc_stat(popen.pid)
    state = {
        **command.to_dict(),
        "pid": popen.pid,
        "pgid": popen.pid,  # start_new_session: the leader's pid is the group id
        "pid_start_ticks": stat[2] if stat else None,
        "started_at": time.time(),
        "log_path": str(log_path),
        "status": Status.STARTING.value,
    }
    handle = ServerProcess(state, folder, popen)
    if on_event:
        handle.subscribe(on_event)
    handle._emit("phase", Phase.STARTED, f"pid {popen.pid}: {' '.join(command.argv[:3])} ...")
    if stop_at_exit:
        atexit.register(handle._stop_at_exit)
    handle._start_watcher()
    return handle


def launch(
    plan: PlanLike,
    *,
    mode: Literal["auto", "local", "docker"] = "auto",
    python: str | Path | None = None,
    host: str | None = None,
    port: int | None = None,
    state_dir: Path | str | None = None,
    on_event: Callable[[ServerEvent], None] | None = None,
    progress: Callable[[str], None] = print,
    stop_at_exit: bool = True,
    check_port: bool = True,
) -> ServerProcess:
    """Start a rendered plan (workbench.recipes.LaunchPlan) in the background.

    Returns as soon as the process is running; `handle.wait_ready()` blocks
    until /health and /v1/models answer, `handle.events()` / `on_event` give
    the phases as they pass. `progress` receives model-build messages."""
    command = prepare(plan, mode=mode, python=python, host=host, port=port, progress=progress)
    return start(command, state_dir=state_dir, on_event=on_event, check_port=check_port,
                 stop_at_exit=stop_at_exit)


def attach(
    url: str,
    *,
    api_key: str | None = None,
    model: str | None = None,
    state_dir: Path | str | None = None,
    timeout: float = 10.0,
) -> ServerProcess:
    """Use a server started elsewhere: checks /health and /v1/models, records it
    so find_running() returns it. `model` defaults to the first one listed."""
    base = url.rstrip("/")
    base = base[: -len("/v1")] if base.endswith("/v1") else base
    if not re.match(r"^https?://", base):
        raise LaunchError(f"{url!r} is not an http(s) URL.", hint="Give it like http://127.0.0.1:8000")
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        health = httpx.get(f"{base}/health", timeout=timeout)
        models = httpx.get(f"{base}/v1/models", headers=headers, timeout=timeout)
    except httpx.HTTPError as exc:
        raise LaunchError(f"Nothing answers at {base} ({exc.__class__.__name__}: {exc}).",
                          hint="Check the URL and that the server is up (curl URL/health).") from exc
    if models.status_code == 401:
        raise LaunchError(f"{base} wants an API key.", hint="Pass it with --api-key (vllm serve --api-key).")
    if health.status_code != 200 or models.status_code != 200:
        raise LaunchError(f"{base} answered /health {health.status_code}, /v1/models {models.status_code}.",
                          hint="Is it a vLLM (OpenAI-compatible) server? Is its engine still starting?")
    listed = [m.get("id") for m in models.json().get("data", [])]
    if model and model not in listed:
        raise LaunchError(f"{base} does not serve {model!r}.", hint=f"It serves: {', '.join(listed)}")
    parsed = httpx.URL(base)
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    state = {
        "mode": "attach", "port": port, "host": parsed.host, "base_url": base,
        "served_model": model or listed[0], "api_key": api_key, "started_at": time.time(),
        "status": Status.READY.value,
        "phases": [PhaseRecord(Phase.HTTP_UP, 0.0, 0.0, base).to_dict(),
                   PhaseRecord(Phase.READY, 0.0, 0.0, f"serving {', '.join(listed)}").to_dict()],
        "time_to_ready_s": 0.0,
    }
    folder = _server_dir(state_root(state_dir), "attach", parsed.host, port)
    folder.mkdir(parents=True, exist_ok=True)
    handle = ServerProcess(state, folder)
    handle._save()
    return handle


def load_server(folder: Path) -> ServerProcess | None:
    """The handle recorded in a server folder, or None if it holds no state file."""
    state = _read_json(Path(folder) / STATE_FILE)
    if not state or "mode" not in state:
        return None
    if state.get("status") == "stopping":
        state["status"] = Status.STARTING.value  # a stop that did not finish: check again
    return ServerProcess(state, Path(folder))


def list_servers(state_dir: Path | str | None = None) -> list[ServerProcess]:
    """Every server the workbench recorded (running or not), newest first."""
    root = state_root(state_dir)
    if not root.is_dir():
        return []
    handles = [h for h in (load_server(d) for d in root.iterdir() if d.is_dir()) if h]
    return sorted(handles, key=lambda h: h.started_at, reverse=True)


def find_running(state_dir: Path | str | None = None) -> ServerProcess | None:
    """The newest server this machine's workbench started or attached that is
    still alive, or None. Chat, metrics and bench default their --url to it."""
    for handle in list_servers(state_dir):
        if handle.status is not Status.STOPPED and handle.is_alive():
            handle.refresh()
            if handle.status in (Status.READY, Status.STARTING):
                return handle
    return None

"""Entry points: start a prepared command, launch a plan, attach to a URL, find servers.

    plan ──prepare()──> ServeCommand ──start()──> ServerProcess ──> base_url, phases, status, log
    launch(plan) = start(prepare(plan));  attach(url) for a server started elsewhere
"""

from __future__ import annotations

import atexit
import os
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import httpx

from workbench.errors import LaunchError
from workbench.urls import normalize_base_url
from workbench.server.command import DEFAULT_HOST, PlanLike, ServeCommand, prepare
from workbench.server.handle import ServerEvent, ServerProcess
from workbench.server.phases import PhaseRecord, StartupPhase, Status
from workbench.server.ports import check_listen_address, check_port_number, free_port, port_free, port_holder
from workbench.server.process import proc_stat
from workbench.server.state import (
    LOG_FILE,
    PREVIOUS_LOG_FILE,
    STATE_FILE,
    BadRecord,
    RecordProblem,
    make_private_dir,
    open_private,
    read_json,
    scan_records,
    server_dir,
    state_root,
)

__all__ = ["EnsuredServer", "attach", "ensure_server", "find_running", "launch", "list_servers", "load_server",
           "record_problems", "resolve_server_url", "start"]


def _refuse_busy_port(command: ServeCommand, root: Path) -> None:
    if port_free(command.host if command.mode == "local" else DEFAULT_HOST, command.port):
        return
    holder = port_holder(command.port)
    ours = read_json(server_dir(root, command.mode, command.host, command.port) / STATE_FILE)
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
    check_port_number(command.port)
    if command.mode == "local":
        check_listen_address(command.host, command.port)
    if check_port:
        _refuse_busy_port(command, root)
    make_private_dir(root)
    folder = make_private_dir(server_dir(root, command.mode, command.host, command.port))
    log_path = folder / LOG_FILE
    if log_path.exists():
        log_path.replace(folder / PREVIOUS_LOG_FILE)
    with open_private(log_path) as log:
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
    stat = proc_stat(popen.pid)
    state = {
        **command.to_dict(),
        "pid": popen.pid,
        "pgid": popen.pid,  # start_new_session: the leader's pid is the group id
        "pid_start_ticks": stat[2] if stat else None,
        "started_at": time.time(),
        "log_path": str(log_path),
        "status": Status.STARTING.value,
        "run_id": uuid.uuid4().hex,  # a fresh record: nothing of an earlier server on this port carries over
    }
    handle = ServerProcess(state, folder, popen)
    if on_event:
        handle.subscribe(on_event)
    handle._emit("phase", StartupPhase.STARTED, f"pid {popen.pid}: {' '.join(command.argv[:3])} ...")
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
    the phases as they pass. `progress` receives model-build and download messages."""
    command = prepare(plan, mode=mode, python=python, host=host, port=port, progress=progress)
    if command.mode == "local" and plan.hardware == "cpu" and not plan.local_build:
        download_first(plan.argv[2], progress)
    return start(command, state_dir=state_dir, on_event=on_event, check_port=check_port,
                 stop_at_exit=stop_at_exit)


def download_first(model_id: str, progress: Callable[[str], None] = print) -> None:
    """A CPU plan that names a Hub model (e.g. Qwen3-0.6B on a laptop with a network):
    download it with progress before vLLM starts, instead of inside vLLM's start-up where
    the Server tab shows nothing moving. Nothing to do when it is already cached."""
    from workbench.server.preflight import download_weights, weights_check

    if Path(model_id).is_dir() or weights_check(model_id).status == "ok":
        return
    download_weights(model_id, progress=progress)


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
    base = normalize_base_url(url)
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
        "phases": [PhaseRecord(StartupPhase.HTTP_UP, 0.0, 0.0, base).to_dict(),
                   PhaseRecord(StartupPhase.READY, 0.0, 0.0, f"serving {', '.join(listed)}").to_dict()],
        "time_to_ready_s": 0.0, "run_id": uuid.uuid4().hex,
    }
    make_private_dir(state_root(state_dir))
    folder = make_private_dir(server_dir(state_root(state_dir), "attach", parsed.host, port))
    handle = ServerProcess(state, folder)
    handle._save()
    return handle


def load_server(folder: Path) -> ServerProcess | None:
    """The handle recorded in a server folder, or None if it holds no usable record."""
    state = read_json(Path(folder) / STATE_FILE)
    if state is None:
        return None
    try:
        return ServerProcess.from_record(state, Path(folder))
    except BadRecord:
        return None


def list_servers(state_dir: Path | str | None = None) -> list[ServerProcess]:
    """Every server the workbench recorded (running or not), newest first; records
    that do not check out are left out (`record_problems` says which and why)."""
    return scan_records(state_root(state_dir))[0]


def record_problems(state_dir: Path | str | None = None) -> list[RecordProblem]:
    """Server folders whose state file was skipped, and why."""
    return scan_records(state_root(state_dir))[1]


def find_running(state_dir: Path | str | None = None) -> ServerProcess | None:
    """The newest server this machine's workbench started or attached that is
    still alive, or None. Chat, metrics and bench default their --url to it."""
    for handle in list_servers(state_dir):
        if handle.status is not Status.STOPPED and handle.is_alive():
            handle.refresh()
            if handle.status in (Status.READY, Status.STARTING):
                return handle
    return None



def resolve_server_url(url: str | None, state_dir: Path | str | None = None) -> str:
    """`url` normalised, else the base URL of the server the workbench runs here.

    The one answer to "which server?" for chat, metrics and bench."""
    if url:
        return normalize_base_url(url)
    running = find_running(state_dir)
    if running is None:
        raise LaunchError(
            "No server URL given and no server started by the workbench is running.",
            hint="Pass --url http://127.0.0.1:8000 of a running vLLM server, or start one with "
            "`python -m workbench serve`.",
        )
    return running.base_url


@dataclass
class EnsuredServer:
    """The server `ensure_server` found or started; `launched` says whether it started it."""

    handle: ServerProcess
    launched: bool
    note: str


def same_command(running: ServerProcess, plan: PlanLike) -> bool:
    """Was `running` started for exactly this plan's argv and environment?"""
    recorded = running.plan or {}
    return bool(recorded.get("argv") == plan.argv and recorded.get("env", {}) == plan.env)


def ensure_server(
    plan: PlanLike,
    *,
    state_dir: Path | str | None = None,
    timeout: float = 900.0,
    on_event: Callable[[ServerEvent], None] | None = None,
    on_handle: Callable[[ServerProcess], None] | None = None,
    progress: Callable[[str], None] = print,
    stop_at_exit: bool = True,
) -> EnsuredServer:
    """Reuse a running workbench server started for the same command, or launch `plan`.

    Blocks until the server is ready. If the plan's port is taken by something
    else, the server is launched on a free port and the note says so (also when
    the port is taken between the check and vLLM's bind). `on_handle` is called
    with each handle as soon as it exists, so a view can follow its phases.
    Raises LaunchError (with the log's diagnosis) when the server cannot start.
    """
    for running in list_servers(state_dir):
        if running.status is Status.STOPPED or not same_command(running, plan):
            continue
        if running.is_alive() and running.refresh() in (Status.READY, Status.STARTING):
            if on_handle:
                on_handle(running)
            running.wait_ready(timeout)
            return EnsuredServer(running, False, f"Reusing the server already running at {running.base_url}.")
    port, note = plan.port, f"Launched a new server on port {plan.port}."
    holder = port_holder(port)
    if holder is not None:
        port = free_port()
        note = f"Port {plan.port} is in use by {holder.describe()}, so this server listens on {port} instead."
    progress(note)
    attempts = 3
    while True:
        attempts -= 1
        handle = launch(plan, port=port, state_dir=state_dir, on_event=on_event, progress=progress,
                        stop_at_exit=stop_at_exit)
        if on_handle:
            on_handle(handle)
        try:
            handle.wait_ready(timeout)
            return EnsuredServer(handle, True, note)
        except LaunchError:
            if not attempts or handle.diagnosis is None or handle.diagnosis.cause != "address_in_use":
                raise
            taken, port = port, free_port()
            note = f"Port {taken} was taken while the server started, so it listens on {port} instead."
            progress(note)

"""Servers already recorded here: load one, list them, find the running one, or
reuse-or-launch (`ensure_server`). Each record is rebuilt into a handle over the
runtime its mode names; a multi-node head gets its cluster's runtime.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from workbench.errors import LaunchError
from workbench.server.cluster import adopt_head
from workbench.server.command import PlanLike
from workbench.server.handle import ServerEvent, ServerProcess
from workbench.server.launch import launch
from workbench.server.phases import Status
from workbench.server.ports import free_port, port_holder
from workbench.server.record import BadRecord, RecordProblem, ServerRecord
from workbench.server.runtime import Runtime
from workbench.server.runtime_attached import AttachedURL
from workbench.server.runtime_docker import DockerContainer
from workbench.server.runtime_local import LocalProcessGroup
from workbench.server.state import STATE_FILE, state_root
from workbench.urls import normalize_base_url

__all__ = ["RUNTIMES", "EnsuredServer", "ensure_server", "find_running", "handle_for", "list_servers",
           "load_server", "record_problems", "resolve_server_url", "same_command", "scan_records"]

log = logging.getLogger("workbench.server")

# A record's mode -> the runtime rebuilt from it. A new kind of server adds one line here.
RUNTIMES: dict[str, Callable[[ServerRecord], Runtime]] = {
    LocalProcessGroup.kind: LocalProcessGroup.from_record,
    DockerContainer.kind: DockerContainer.from_record,
    AttachedURL.kind: AttachedURL.from_record,
}


def handle_for(record: ServerRecord, folder: Path) -> ServerProcess:
    """A handle (not supervised here) for a record read from `folder`."""
    handle = ServerProcess(record, folder, RUNTIMES[record.mode](record))
    adopt_head(handle)  # a multi-node head: its stop stops its workers too
    return handle


def scan_records(root: Path) -> tuple[list[ServerProcess], list[RecordProblem]]:
    """Handles of every recorded server under `root` (newest first) and the folders skipped."""
    handles: list[ServerProcess] = []
    problems: list[RecordProblem] = []
    if not root.is_dir():
        return handles, problems
    for folder in sorted(d for d in root.iterdir() if d.is_dir()):
        path = folder / STATE_FILE
        if not path.exists():
            continue
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            problems.append(RecordProblem(folder, f"it cannot be read as JSON ({exc.__class__.__name__})"))
            continue
        try:
            handles.append(handle_for(ServerRecord.from_dict(data, folder), folder))
        except BadRecord as exc:
            problems.append(RecordProblem(folder, str(exc)))
    for problem in problems:
        log.info("%s", problem.describe())
    handles.sort(key=lambda h: h.started_at, reverse=True)
    return handles, problems


def load_server(folder: Path) -> ServerProcess | None:
    """The handle recorded in a server folder, or None if it holds no usable record."""
    folder = Path(folder)
    try:
        data = json.loads((folder / STATE_FILE).read_text())
        return handle_for(ServerRecord.from_dict(data, folder), folder)
    except (OSError, ValueError):  # no record, not JSON, or a BadRecord
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
            hint="Give the URL of a running vLLM server (e.g. http://127.0.0.1:8000), or start one.",
            settings=("url",),
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
    progress: Callable[[str], None] | None = None,
    stop_at_exit: bool = True,
) -> EnsuredServer:
    """Reuse a running workbench server started for the same command, or launch `plan`.

    Blocks until the server is ready. If the plan's port is taken by something
    else, the server is launched on a free port and the note says so (also when
    the port is taken between the check and vLLM's bind). `on_handle` is called
    with each handle as soon as it exists, so a view can follow its phases; `progress`
    gets the notes (default: the `workbench.server` logger).
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
    say = progress or log.info
    say(note)
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
            say(note)

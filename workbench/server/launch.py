"""New servers: start a prepared command, launch a plan, attach to a URL.

    plan ──prepare()──> ServeCommand ──start()──> ServerProcess ──> base_url, phases, status, log
    launch(plan) = start(prepare(plan));  attach(url) for a server started elsewhere

Servers already recorded (find_running, list_servers, ensure_server) are servers.py's.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import httpx

from workbench.errors import LaunchError
from workbench.server.command import DEFAULT_HOST, PlanLike, ServeCommand, prepare
from workbench.server.handle import ServerEvent, ServerProcess
from workbench.server.phases import PhaseRecord, StartupPhase, Status
from workbench.server.ports import check_listen_address, check_port_number, port_free, port_holder
from workbench.server.probe import list_models, tls_context
from workbench.server.process import spawn_group
from workbench.server.record import ServerRecord, read_record
from workbench.server.runtime import Runtime
from workbench.server.runtime_attached import AttachedURL
from workbench.server.runtime_docker import DockerContainer
from workbench.server.runtime_local import LocalProcessGroup
from workbench.server.state import LOG_FILE, make_private_dir, server_dir, state_root
from workbench.urls import normalize_base_url

__all__ = ["attach", "launch", "start"]

log = logging.getLogger("workbench.server")


def _refuse_busy_port(command: ServeCommand, root: Path) -> None:
    if port_free(command.host if command.mode == "local" else DEFAULT_HOST, command.port):
        return
    holder = port_holder(command.port)
    ours = read_record(server_dir(root, command.mode, command.host, command.port))
    hint = f"Choose another port, or stop what holds {command.port}"
    if ours and holder and holder.pid == ours.pid:
        hint = "The workbench started that server; stop it first (find_running().stop(), or the stop command)."
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
    spawned = spawn_group(command.argv, command.env, log_path, what=f"vllm serve on port {command.port}",
                          hint="Check the path, or install vLLM in this environment.")
    runtime: Runtime = (DockerContainer.for_container(spawned, command.container_name) if command.mode == "docker"
                        else LocalProcessGroup.spawned(spawned))
    record = ServerRecord(
        mode=command.mode, port=command.port, served_model=command.served_model, started_at=time.time(),
        host=command.host, api_key=command.api_key, argv=list(command.argv), env=dict(command.env),
        plan=command.plan, container_name=command.container_name, log_path=str(log_path),
        run_id=uuid.uuid4().hex,  # a fresh record: nothing of an earlier server on this port carries over
        **runtime.record_fields(),
    )
    handle = ServerProcess(record, folder, runtime)
    handle.supervise(on_event=on_event, stop_at_exit=stop_at_exit)
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
    progress: Callable[[str], None] | None = None,
    stop_at_exit: bool = True,
    check_port: bool = True,
) -> ServerProcess:
    """Start a rendered plan (workbench.recipes.LaunchPlan) in the background.

    Returns as soon as the process is running; `handle.wait_ready()` blocks
    until /health and /v1/models answer, `handle.events()` / `on_event` give
    the phases as they pass. `progress` receives model-build and download messages
    (default: the `workbench.server` logger)."""
    command = prepare(plan, mode=mode, python=python, host=host, port=port, progress=progress)
    if command.mode == "local" and plan.hardware == "cpu" and not plan.local_build:
        download_first(plan.argv[2], progress)
    return start(command, state_dir=state_dir, on_event=on_event, check_port=check_port,
                 stop_at_exit=stop_at_exit)


def download_first(model_id: str, progress: Callable[[str], None] | None = None) -> None:
    """A CPU plan that names a Hub model (e.g. Qwen3-0.6B on a laptop with a network):
    download it with progress before vLLM starts, instead of inside vLLM's start-up where
    the Server tab shows nothing moving. Nothing to do when it is already cached."""
    from workbench.server.hub import download_weights, weights_check  # huggingface_hub: 0.25 s, when a download is due

    if Path(model_id).is_dir() or weights_check(model_id).status == "ok":
        return
    download_weights(model_id, progress=progress or log.info)


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
    try:
        health = httpx.get(f"{base}/health", timeout=timeout, verify=tls_context())
    except httpx.HTTPError as exc:
        raise LaunchError(f"Nothing answers at {base} ({exc.__class__.__name__}: {exc}).",
                          hint="Check the URL and that the server is up (curl URL/health).") from exc
    listed = list_models(base, api_key=api_key, timeout=timeout)
    if health.status_code != 200:
        raise LaunchError(f"{base} answered /health {health.status_code}.",
                          hint="Is it a vLLM (OpenAI-compatible) server? Is its engine still starting?")
    if not listed:
        raise LaunchError(f"{base} serves no model (its /v1/models list is empty).",
                          hint="Attach once the server has loaded its model, or check how it was started.")
    if model and model not in listed:
        raise LaunchError(f"{base} does not serve {model!r}.", hint=f"It serves: {', '.join(listed)}")
    parsed = httpx.URL(base)
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    served = model or listed[0]
    record = ServerRecord(
        mode="attach", port=port, served_model=served, started_at=time.time(), host=parsed.host, base_url=base,
        api_key=api_key, status=Status.READY, time_to_ready_s=0.0, run_id=uuid.uuid4().hex,
        phases=(PhaseRecord(StartupPhase.HTTP_UP, 0.0, 0.0, base),
                PhaseRecord(StartupPhase.READY, 0.0, 0.0, f"serving {', '.join(listed)}")),
    )
    make_private_dir(state_root(state_dir))
    folder = make_private_dir(server_dir(state_root(state_dir), "attach", parsed.host, port))
    handle = ServerProcess(record, folder, AttachedURL(base, served, api_key))
    handle.save()
    log.info("attached to %s (model %s)", base, served)
    return handle

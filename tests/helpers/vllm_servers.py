"""Real `vllm serve` processes (vLLM's CPU build) for the tests, run by the workbench's launcher.

Started with argv lists in their own session, on a free loopback port, their
log kept in a per-server folder under `log_dir`; stopped with the launcher's
staged stop of the whole process group.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from workbench import server
from workbench.errors import LaunchError

STARTUP_TIMEOUT_S = 240

# Added to the environment of test servers: nothing from the network.
CPU_ENGINE_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
}


def cpu_engine_env() -> dict[str, str]:
    return {**os.environ, **CPU_ENGINE_ENV}


def vllm_executable() -> str:
    return str(Path(sys.executable).with_name("vllm"))


@dataclass
class RunningServer:
    name: str
    model: str
    model_dir: Path
    handle: server.ServerProcess
    special_token_ids: dict[str, int] = field(default_factory=dict)

    @property
    def port(self) -> int:
        return self.handle.port

    @property
    def base_url(self) -> str:
        return self.handle.base_url

    @property
    def process(self) -> subprocess.Popen:
        return self.handle.popen

    @property
    def log_path(self) -> Path:
        return self.handle.log_path

    def log_text(self) -> str:
        return self.handle.log_text()

    def stop(self, timeout: float = 30) -> None:
        self.handle.stop(timeout)


def start_vllm_server(
    name: str,
    model_dir: Path,
    served_name: str,
    log_dir: Path,
    extra_args: tuple[str, ...] | list[str] = (),
    env: dict[str, str] | None = None,
) -> RunningServer:
    """Start and wait until ready; `extra_args` come last (so they win), `env` adds to CPU_ENGINE_ENV."""
    port = server.free_port()
    argv = [
        vllm_executable(),
        "serve",
        str(model_dir),
        "--served-model-name",
        served_name,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--enforce-eager",
        "--max-model-len",
        "4096",
        *extra_args,
    ]
    command = server.ServeCommand("local", argv, port, served_name, env={**CPU_ENGINE_ENV, **(env or {})})
    handle = server.start(command, state_dir=Path(log_dir) / "servers" / name)
    try:
        handle.wait_ready(STARTUP_TIMEOUT_S)
    except LaunchError as exc:
        handle.stop()
        raise RuntimeError(f"vllm serve ({name}): {exc}\n" + "\n".join(handle.log_tail(40))) from exc
    return RunningServer(name, served_name, Path(model_dir), handle)

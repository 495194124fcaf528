"""Real `vllm serve` processes (vLLM's CPU build) for the tests.

Started with argv lists in their own session, on a free loopback port, their
log kept in a file; stopped by signalling the whole process group.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

STARTUP_TIMEOUT_S = 240


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_engine_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        VLLM_CPU_KVCACHE_SPACE="1",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
    )
    return env


def vllm_executable() -> str:
    return str(Path(sys.executable).with_name("vllm"))


@dataclass
class RunningServer:
    name: str
    model: str
    model_dir: Path
    port: int
    process: subprocess.Popen
    log_path: Path
    special_token_ids: dict[str, int] = field(default_factory=dict)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, timeout: float = 30) -> None:
        if self.process.poll() is not None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)
        except ProcessLookupError:
            pass


def start_vllm_server(
    name: str,
    model_dir: Path,
    served_name: str,
    log_dir: Path,
    extra_args: tuple[str, ...] | list[str] = (),
) -> RunningServer:
    port = free_port()
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
    log_path = log_dir / f"{name}.log"
    log = log_path.open("wb")
    process = subprocess.Popen(
        argv,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=cpu_engine_env(),
        start_new_session=True,
    )
    server = RunningServer(name, served_name, model_dir, port, process, log_path)
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(
                f"vllm serve ({name}) exited with {process.returncode}:\n"
                + "\n".join(server.log_text().splitlines()[-40:])
            )
        try:
            if httpx.get(f"{server.base_url}/health", timeout=2).status_code == 200:
                return server
        except httpx.HTTPError:
            pass
        time.sleep(1)
    server.stop()
    raise RuntimeError(f"vllm serve ({name}) not ready in {STARTUP_TIMEOUT_S} s:\n{server.log_text()[-4000:]}")

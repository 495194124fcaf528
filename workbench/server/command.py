"""What to run for a plan here: `prepare(plan)` -> ServeCommand, or the reason it cannot run.

Refuses before anything starts: a TensorRT-LLM or multi-node plan, a GPU plan on
a machine without an NVIDIA GPU, a mode that cannot run (no vLLM, no Docker
engine). Builds the CPU demo model when the plan needs it.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from workbench.builds import build_local
from workbench.errors import LaunchError
from workbench.recipes.argv import flag_value, set_flag
from workbench.server.hardware import detect_hardware
from workbench.server.ports import check_port_number

__all__ = ["CARRIED_ENV", "CONTAINER_PORT", "DEFAULT_HOST", "carried_env", "Mode", "PlanLike", "ServeCommand", "docker_engine_problem",
           "nvidia_gpu_available", "prepare", "vllm_executable"]

log = logging.getLogger("workbench.server")

Mode = Literal["local", "docker", "attach"]
# Set in the workbench's environment, these reach every server it starts (local, in a container, on a
# node): machines that share GPUs with others may forbid NVLink multicast, which can take the host's
# GPUs out of service (the lent multi-GPU machines of this project's CI workplace ask it).
CARRIED_ENV = ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS")


def carried_env() -> dict[str, str]:
    """The variables of CARRIED_ENV this process has, to pass on to a server."""
    return {k: os.environ[k] for k in CARRIED_ENV if k in os.environ}
DEFAULT_HOST = "127.0.0.1"
CONTAINER_PORT = 8000  # vLLM's default port inside the official images


class PlanLike(Protocol):
    """What the launcher reads from workbench.recipes.LaunchPlan (read-only, so a plan whose
    fields are narrower, e.g. `engine: Literal["vllm", "trtllm"]`, fits)."""

    @property
    def argv(self) -> list[str]: ...
    @property
    def env(self) -> dict[str, str]: ...
    @property
    def docker_argv(self) -> list[str]: ...
    @property
    def port(self) -> int: ...
    @property
    def hardware(self) -> str: ...
    @property
    def engine(self) -> str: ...
    @property
    def local_build(self) -> str | None: ...
    @property
    def served_model_name(self) -> str: ...

    def to_dict(self) -> dict[str, Any]: ...

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

def take_api_key(words: list[str]) -> tuple[list[str], str | None]:
    """`words` without `--api-key KEY` / `--api-key=KEY`, and the key. The launcher passes
    it as VLLM_API_KEY instead, so it stays out of `ps`, the log and the record's argv."""
    kept: list[str] = []
    key: str | None = None
    i = 0
    while i < len(words):
        word = words[i]
        if word == "--api-key" and i + 1 < len(words) and not words[i + 1].startswith("-"):
            key = key or words[i + 1]
            i += 2
            continue
        if word.startswith("--api-key="):
            key = key or word.split("=", 1)[1]
            i += 1
            continue
        kept.append(word)
        i += 1
    return kept, key


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


def vllm_executable() -> str | None:
    """The `vllm` beside this Python, else the one on PATH, else None."""
    beside = Path(sys.executable).with_name("vllm")
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("vllm")


def container_argv(plan: PlanLike, port: int, host: str, name: str) -> list[str]:
    """The plan's `docker run`, made to run here: named, removed on exit, published on `host` only."""
    argv = list(plan.docker_argv)
    if argv[:2] != ["docker", "run"]:
        raise LaunchError(f"The plan's docker command does not start with `docker run`: {argv[:3]}")
    out = ["docker", "run", "--rm", "--name", name]
    inner_port = int(flag_value(argv, "--port") or CONTAINER_PORT)
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
    progress: Callable[[str], None] | None = None,
) -> ServeCommand:
    """Turn a rendered plan into the command to run here, or refuse with the reason.

    Refuses before anything starts: a TensorRT-LLM or multi-node plan, a GPU
    plan on a machine without nvidia-smi, a mode that cannot run (no vLLM, no
    Docker engine). Builds the CPU demo model when the plan needs it."""
    if plan.engine != "vllm":
        raise LaunchError(
            f"This plan is for {plan.engine}; the workbench renders TensorRT-LLM commands but launches only vLLM.",
            hint="Copy the rendered command and run it where TensorRT-LLM is installed.",
        )
    if getattr(plan, "worker_argvs", None):
        raise LaunchError("This is a multi-node plan: it needs its worker nodes too.",
                          hint="Name one worker host per worker node (`local` for a worker on this machine), "
                          "or run the rendered commands on each node.", settings=("workers",))
    if plan.hardware != "cpu" and not nvidia_gpu_available():
        raise LaunchError(
            f"This plan is for {plan.hardware} GPUs, and this machine has no NVIDIA GPU (nvidia-smi not found or lists none).",
            hint=f"The rendered command can still be copied and run on a machine with {plan.hardware} GPUs. "
            "Here, serve the CPU demo engine: hardware `cpu`.",
            settings={"hardware": "cpu"},
        )
    port = check_port_number(plan.port if port is None else port)
    chosen_host = host or flag_value(plan.argv, "--host") or DEFAULT_HOST
    served = flag_value(plan.argv, "--served-model-name") or plan.served_model_name or plan.argv[2]
    plan_dict = plan.to_dict()

    if mode == "auto":
        mode = "local" if (python or vllm_executable()) else "docker" if docker_engine_problem() is None else "local"
    if mode == "docker":
        problem = docker_engine_problem()
        if problem:
            raise LaunchError(f"Cannot run the plan with Docker: {problem}.",
                              hint="Start the Docker engine (e.g. `sudo systemctl start docker`), or run vLLM "
                              "from this environment (launch mode local).", settings={"mode": "local"})
        name = f"workbench-vllm-{port}"
        argv, key = take_api_key(container_argv(plan, port, chosen_host, name))
        key = key or plan.env.get("VLLM_API_KEY")
        env = carried_env()
        for var in env:  # `-e NAME`: docker copies the value from its own environment
            argv[argv.index("--name"):argv.index("--name")] = ["-e", var]
        if key:
            # `-e NAME` without a value: docker copies it from its own environment, not from argv.
            argv[argv.index("--name"):argv.index("--name")] = ["-e", "VLLM_API_KEY"]
            env["VLLM_API_KEY"] = key
        return ServeCommand("docker", argv, port, served, chosen_host, env, plan_dict, container_name=name,
                            api_key=key)
    if mode != "local":
        raise LaunchError(f"Unknown launch mode {mode!r}.", hint="Use auto, local or docker (or attach a URL).",
                          settings=("mode",))

    if plan.argv[:2] != ["vllm", "serve"] or len(plan.argv) < 3:
        raise LaunchError(f"The plan's command is not `vllm serve MODEL ...`: {plan.argv[:3]}")
    if python:
        if not Path(python).is_file():
            raise LaunchError(f"The Python {python} does not exist.", hint="Give the python of an environment with vLLM.",
                              settings=("python",))
        head = [str(python), "-m", "vllm.entrypoints.cli.main", "serve"]
    else:
        exe = vllm_executable()
        if exe is None:
            raise LaunchError(
                "vLLM is not installed in this environment (no `vllm` beside this Python or on PATH).",
                hint="Install it (pip install -e '.[cpu]' for the CPU engine, '.[gpu]' on a GPU machine), "
                "use the Python of another environment that has it, or launch with Docker.",
                settings=("python", "mode"),
            )
        head = [exe, "serve"]
    model = plan.argv[2]
    rest, key = take_api_key(list(plan.argv[3:]))
    env = {**carried_env(), **plan.env}
    key = key or env.get("VLLM_API_KEY")
    if key:
        env["VLLM_API_KEY"] = key
    if plan.local_build:
        model = str(build_local(plan.local_build, progress or log.info))
        if flag_value(rest, "--served-model-name") is None:
            rest += ["--served-model-name", plan.served_model_name or plan.argv[2]]
    rest = set_flag(rest, "--port", str(port))
    if host or flag_value(rest, "--host") is None:
        rest = set_flag(rest, "--host", chosen_host)
    if Path(model).is_dir():
        env.setdefault("HF_HUB_OFFLINE", "1")  # a local directory needs nothing from the Hub
    env.setdefault("PYTHONUNBUFFERED", "1")  # phases show as they happen, not when a buffer fills
    return ServeCommand("local", [*head, model, *rest], port, served, chosen_host, env, plan_dict, api_key=key)



def nvidia_gpu_available() -> bool:
    """True when nvidia-smi lists at least one GPU (the same probe as hardware detection)."""
    return bool(detect_hardware().gpus)

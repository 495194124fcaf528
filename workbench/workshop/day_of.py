"""A workshop room's day-of checks (`python -m workbench workshop --check`, the Room tab): the
machine, the plan's weights, memory share and image, and a warm-up request once the server is up."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from workbench.paths import built_models_dir
from workbench.server.checks import EnvironmentCheck
from workbench.server.command import vllm_executable
from workbench.server.environment import docker_image_check, environment_checks
from workbench.server.headroom import memory_headroom_check
from workbench.server.hub import weights_check

__all__ = ["day_of_checks", "warm_up_check"]


def day_of_checks(plan: Any, *, mode: str = "auto", meminfo: Path = Path("/proc/meminfo"),
                  runner: Callable[[list[str]], str] | None = None) -> list[EnvironmentCheck]:
    """The workshop's checks for a rendered plan (a LaunchPlan or its dict): the
    machine (environment_checks), then the plan's weights, memory share and image."""
    data = plan.to_dict() if hasattr(plan, "to_dict") else dict(plan)
    model_id = data.get("model_id") or data["argv"][2]
    checks = environment_checks(model_id, meminfo=meminfo, model_in_cache=False)  # the weights are checked below
    if data.get("local_build"):
        built = built_models_dir() / data["local_build"]
        checks.append(EnvironmentCheck("weights (built locally)", "ok" if built.is_dir() else "missing", str(built),
                                       "" if built.is_dir() else "`python -m workbench demo-model` builds it (about 40 s)."))
    else:
        checks.append(weights_check(model_id))
    argv = data.get("argv") or []
    share = next((float(argv[i + 1]) for i, t in enumerate(argv[:-1]) if t == "--gpu-memory-utilization"), None)
    if data.get("hardware") != "cpu":
        checks.append(memory_headroom_check(share, meminfo=meminfo, runner=runner))
    image = data.get("docker_image")
    if image and (mode == "docker" or (mode == "auto" and not _vllm_installed())):
        checks.append(docker_image_check(image, runner=runner))
    return checks


def _vllm_installed() -> bool:
    return vllm_executable() is not None


def warm_up_check(base_url: str, model: str, *, api_key: str | None = None, requests: int = 2,
                  max_tokens: int = 16, timeout: float = 900.0) -> EnvironmentCheck:
    """Send short requests right after ready: the first pays for JIT compilation on a
    DGX Spark (CUDA graphs, kernels); the room should not be the one paying."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    body = {"model": model, "max_tokens": max_tokens, "temperature": 0,
            "messages": [{"role": "user", "content": "Say hello to the workshop in five words."}]}
    seconds: list[float] = []
    try:
        with httpx.Client(timeout=timeout) as client:
            for _ in range(requests):
                started = time.monotonic()
                answer = client.post(f"{base_url.rstrip('/')}/v1/chat/completions", json=body, headers=headers)
                answer.raise_for_status()
                seconds.append(time.monotonic() - started)
    except httpx.HTTPError as exc:
        return EnvironmentCheck("warm-up request", "missing", f"{base_url} did not answer: {exc}",
                                "Check the Server tab's log (or `python -m workbench status --log 40`); "
                                "if the server is still starting, run the warm-up again once it is ready.")
    found = "first request {:.2f} s".format(seconds[0]) + "".join(f", then {s:.2f} s" for s in seconds[1:])
    return EnvironmentCheck("warm-up request", "ok", found + " (the first one compiled what the rest reuse)")

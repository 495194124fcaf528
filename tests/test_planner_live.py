"""The memory planner against vLLM's own start-up numbers, on real `vllm serve` CPU servers.

vLLM logs "CPU KV cache size: N tokens, Maximum concurrency for L tokens per request: Cx"
once it has sized the cache; the planner, given the same command and config.json,
must say the same. Four settings: the SmolLM2 demo as the recipe renders it
(VLLM_CPU_KVCACHE_SPACE=1, 4096 tokens), SmolLM2 at 2 GiB and 2048 tokens, and a tiny
random-weight Nemotron-H (Mamba-2 + attention) with prefix caching on ('align' Mamba
cache mode) and off ('none', 2 GiB, 1536 tokens). The hybrid servers answer no request:
on the CPU build, prefix caching with Mamba layers crashes at the first request, and
only start-up is checked here.
"""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path

import pytest

from tests.helpers.hybrid_model import build_tiny_hybrid
from tests.helpers.vllm_servers import CPU_ENGINE_ENV, RunningServer, start_vllm_server
from workbench.planner import MemoryPlan, plan_command_memory, plan_memory, read_model_config, startup_capacity
from workbench.recipes import Selection, load_catalog, render

pytestmark = pytest.mark.vllm

CATALOG = load_catalog()
CPU = CATALOG.hardware["cpu"]


def assert_planner_matches_log(memory: MemoryPlan, log_text: str) -> None:
    logged = startup_capacity(log_text)
    assert logged is not None, "vLLM logged no KV cache size"
    print(f"\n  vLLM:    {logged.message}\n  planner: {memory.startup_line()}")  # the figures, with -s
    assert logged.device == "CPU"
    assert (logged.kv_cache_tokens, logged.max_model_len) == (memory.kv_cache_tokens, memory.settings.max_model_len)
    assert f"{memory.max_concurrency:.2f}" == f"{logged.max_concurrency:.2f}"
    assert memory.startup_line() in logged.line  # the very line, in vLLM's format


def plan_for(server, model_dir: Path, env: dict[str, str]) -> MemoryPlan:
    config = read_model_config(server.model, config_path=model_dir / "config.json")
    return plan_command_memory(server.model, server.handle.argv, env, config, CPU)


def test_demo_recipe_plan_is_what_the_demo_server_logs(demo_server):
    # The demo server runs the CPU recipe's settings: VLLM_CPU_KVCACHE_SPACE=1, --max-model-len 4096.
    memory = plan_memory(render(Selection(hardware="cpu"), CATALOG), CATALOG)
    assert memory.budget.exact and memory.settings.kv_cache_memory_bytes == 1 << 30
    assert_planner_matches_log(memory, demo_server.log_text())
    assert_planner_matches_log(plan_for(demo_server, demo_server.model_dir, CPU_ENGINE_ENV), demo_server.log_text())


@pytest.fixture(scope="module")
def hybrid_dir(forcing_model_dir, tmp_path_factory) -> Path:
    return build_tiny_hybrid(tmp_path_factory.mktemp("models") / "tiny-nemotron-h", forcing_model_dir)


# The servers whose start-up is all that is checked: (model, served name, extra args, env).
STARTUP_ONLY = {
    "smol-2g": ("demo", "smol-2g", ["--max-model-len", "2048"], {"VLLM_CPU_KVCACHE_SPACE": "2"}),
    "align": ("hybrid", "tiny-nemotron-h-align", [], {}),
    "none": ("hybrid", "tiny-nemotron-h-none", ["--no-enable-prefix-caching", "--max-model-len", "1536"],
             {"VLLM_CPU_KVCACHE_SPACE": "2"}),
}


@pytest.fixture(scope="module")
def started(demo_model_dir, hybrid_dir, artifacts_dir) -> dict[str, tuple[RunningServer, str]]:
    """Each STARTUP_ONLY server started, its start-up log read, and stopped. They start side by
    side: a start-up is mostly single-threaded imports, so on 2 cores three take about the
    time of two in a row (the sizes vLLM logs depend on the flags and the env, not the load)."""
    dirs = {"demo": demo_model_dir, "hybrid": hybrid_dir}
    with ThreadPoolExecutor(len(STARTUP_ONLY)) as pool:
        futures = {name: pool.submit(start_vllm_server, f"planner-{name}", dirs[model], served, artifacts_dir,
                                     extra_args=args, env=env)
                   for name, (model, served, args, env) in STARTUP_ONLY.items()}
        wait(futures.values())
    servers = {name: f.result() for name, f in futures.items() if f.exception() is None}
    try:
        failed = {name: f.exception() for name, f in futures.items() if f.exception() is not None}
        assert not failed, failed
        return {name: (server, server.log_text()) for name, server in servers.items()}
    finally:
        for server in servers.values():
            server.stop()


def test_smollm2_at_two_gib_and_2048_tokens(started, demo_model_dir):
    server, log = started["smol-2g"]
    memory = plan_for(server, demo_model_dir, {**CPU_ENGINE_ENV, **STARTUP_ONLY["smol-2g"][3]})
    assert memory.settings.max_model_len == 2048 and memory.budget.available_bytes == 2 << 30
    assert_planner_matches_log(memory, log)


@pytest.mark.parametrize(("name", "mode"), [("align", "align"), ("none", "none")])
def test_tiny_nemotron_h_hybrid(started, hybrid_dir, name, mode):
    server, log = started[name]
    memory = plan_for(server, hybrid_dir, {**CPU_ENGINE_ENV, **STARTUP_ONLY[name][3]})
    lay = memory.layout
    assert memory.architecture.is_hybrid and lay.mamba_mode == mode
    assert_planner_matches_log(memory, log)
    # The steps behind the number, as vLLM logs them: the Mamba page padding and the groups.
    padding = re.search(r"Padding mamba page size by ([\d.]+)%", log)
    assert padding and padding.group(1) == f"{lay.mamba_padding_pct:.2f}"
    groups = re.search(r"kv cache group sizes \(([\d, ]+)\)", log)
    assert groups and len(groups.group(1).split(",")) == lay.attention_groups + lay.mamba_groups == 4
    assert f"Mamba cache mode is set to '{mode}'" in log or mode == "none"

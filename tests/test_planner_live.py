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
from pathlib import Path

import pytest

from tests.helpers.hybrid_model import build_tiny_hybrid
from tests.helpers.vllm_servers import CPU_ENGINE_ENV, start_vllm_server
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


def test_smollm2_at_two_gib_and_2048_tokens(demo_model_dir, artifacts_dir):
    env = {"VLLM_CPU_KVCACHE_SPACE": "2"}
    server = start_vllm_server("planner-smol-2g", demo_model_dir, "smol-2g", artifacts_dir,
                               extra_args=["--max-model-len", "2048"], env=env)
    try:
        log = server.log_text()
        memory = plan_for(server, demo_model_dir, {**CPU_ENGINE_ENV, **env})
    finally:
        server.stop()
    assert memory.settings.max_model_len == 2048 and memory.budget.available_bytes == 2 << 30
    assert_planner_matches_log(memory, log)


@pytest.fixture(scope="module")
def hybrid_dir(forcing_model_dir, tmp_path_factory) -> Path:
    return build_tiny_hybrid(tmp_path_factory.mktemp("models") / "tiny-nemotron-h", forcing_model_dir)


@pytest.mark.parametrize(("name", "args", "env", "mode"), [
    ("align", [], {}, "align"),
    ("none", ["--no-enable-prefix-caching", "--max-model-len", "1536"], {"VLLM_CPU_KVCACHE_SPACE": "2"}, "none"),
])
def test_tiny_nemotron_h_hybrid(hybrid_dir, artifacts_dir, name, args, env, mode):
    server = start_vllm_server(f"planner-hybrid-{name}", hybrid_dir, f"tiny-nemotron-h-{name}", artifacts_dir,
                               extra_args=args, env=env)
    try:
        log = server.log_text()
        memory = plan_for(server, hybrid_dir, {**CPU_ENGINE_ENV, **env})
    finally:
        server.stop()
    lay = memory.layout
    assert memory.architecture.is_hybrid and lay.mamba_mode == mode
    assert_planner_matches_log(memory, log)
    # The steps behind the number, as vLLM logs them: the Mamba page padding and the groups.
    padding = re.search(r"Padding mamba page size by ([\d.]+)%", log)
    assert padding and padding.group(1) == f"{lay.mamba_padding_pct:.2f}"
    groups = re.search(r"kv cache group sizes \(([\d, ]+)\)", log)
    assert groups and len(groups.group(1).split(",")) == lay.attention_groups + lay.mamba_groups == 4
    assert f"Mamba cache mode is set to '{mode}'" in log or mode == "none"

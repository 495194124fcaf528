"""Multi-node strategies: upstream's files load unchanged; head and worker commands per node."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from workbench.recipes import Catalog, LaunchPlan, Selection, default_recipes_dir, load_catalog, render
from workbench.recipes.argv import flag_value

UPSTREAM_STRATEGIES = Path(__file__).parent / "fixtures" / "upstream-recipes" / "strategies"
NEMO = "nvidia/NVIDIA-Nemotron-3.5-Lightning-30B-A3B-BF16"
SMOL = "HuggingFaceTB/SmolLM2-135M-Instruct"


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load_catalog()


def _render(catalog: Catalog, **kw: object) -> LaunchPlan:
    return render(Selection(**kw), catalog)  # type: ignore[arg-type]


def test_upstream_strategy_files_load_unchanged(tmp_path: Path) -> None:
    root = tmp_path / "recipes"
    shutil.copytree(default_recipes_dir(), root)
    shutil.rmtree(root / "strategies")
    shutil.copytree(UPSTREAM_STRATEGIES, root / "strategies")
    cat = load_catalog(root)
    assert len(cat.strategies) == 9
    assert cat.strategies["multi_node_tp_dp"].parallelism == "tp_dp"
    assert cat.strategies["multi_node_tp_pp"].parallelism == "tp_pp"
    dep = cat.strategies["multi_node_dep"]
    assert dep.vllm_args == ("--enable-expert-parallel", "--data-parallel-hybrid-lb")
    assert dep.parallel_flag == "--data-parallel-size" and dep.architecture == "moe"
    # The workbench's own copies of the two new strategies are upstream's files, byte for byte.
    for name in ("multi_node_tp_dp", "multi_node_dep"):
        assert (default_recipes_dir() / "strategies" / f"{name}.yaml").read_bytes() == \
            (UPSTREAM_STRATEGIES / f"{name}.yaml").read_bytes()


def test_tp_dp_on_two_sparks_one_replica_each(catalog: Catalog) -> None:
    plan = _render(catalog, recipe=NEMO, hardware="dgx_spark_gb10", strategy="multi_node_tp_dp", nodes=2,
                   iface="enp1s0f1np1", head_address="192.168.100.10")
    assert plan.strategy == "multi_node_tp_dp" and plan.tensor_parallel_size == 1 and not plan.fallbacks
    head, (worker,) = plan.argv, plan.worker_argvs
    for argv in (head, worker):
        assert flag_value(argv, "--tensor-parallel-size") == "1"
        assert flag_value(argv, "--data-parallel-size") == "2"
        assert flag_value(argv, "--data-parallel-size-local") == "1"
        assert flag_value(argv, "--data-parallel-address") == "192.168.100.10"
        assert "--nnodes" not in argv
    assert "--headless" not in head and "--data-parallel-start-rank" not in head
    # Upstream omits --headless here; vLLM 0.32 needs it (see workbench/recipes/multinode.py).
    assert flag_value(worker, "--data-parallel-start-rank") == "1" and "--headless" in worker
    assert plan.env["GLOO_SOCKET_IFNAME"] == plan.env["NCCL_SOCKET_IFNAME"] == "enp1s0f1np1"
    shell = plan.shell_command(multiline=False, worker=0)
    env_words = shell.split(" vllm serve ")[0].split()
    assert "GLOO_SOCKET_IFNAME=enp1s0f1np1" in env_words and "NCCL_SOCKET_IFNAME=enp1s0f1np1" in env_words


def test_tp_dp_keeps_tp_inside_each_node(catalog: Catalog) -> None:
    plan = _render(catalog, recipe=NEMO, hardware="h200", strategy="multi_node_tp_dp", nodes=3)
    assert plan.tensor_parallel_size == 8
    assert [flag_value(w, "--data-parallel-start-rank") for w in plan.worker_argvs] == ["1", "2"]
    assert flag_value(plan.argv, "--data-parallel-size") == "3"
    # Without --iface / --head-address, upstream's placeholders stay for the user to fill.
    assert plan.env["GLOO_SOCKET_IFNAME"] == "$IFACE_NAME"
    assert flag_value(plan.argv, "--data-parallel-address") == "$HEAD_IP"


def test_dep_follows_upstream_hybrid_lb(catalog: Catalog) -> None:
    plan = _render(catalog, recipe=NEMO, hardware="h200", strategy="multi_node_dep", nodes=2)
    assert plan.strategy == "multi_node_dep" and not plan.fallbacks
    head, (worker,) = plan.argv, plan.worker_argvs
    for argv in (head, worker):
        assert "--enable-expert-parallel" in argv and "--data-parallel-hybrid-lb" in argv
        assert flag_value(argv, "--data-parallel-size") == "16"
        assert flag_value(argv, "--data-parallel-size-local") == "8"
        assert "--headless" not in argv  # hybrid LB: every node serves HTTP
    assert flag_value(worker, "--data-parallel-start-rank") == "8"
    assert plan.provenance["--data-parallel-hybrid-lb"] == "strategy"


def test_dep_is_for_moe_models_only(catalog: Catalog) -> None:
    plan = _render(catalog, recipe=SMOL, strategy="multi_node_dep", nodes=2)
    assert plan.strategy != "multi_node_dep"
    assert plan.fallbacks[0].choice == "strategy"


def test_cpu_demo_offers_data_parallel_not_tensor_parallel(catalog: Catalog) -> None:
    # SmolLM2 has 9 attention heads: tensor parallel 2 cannot split it, data parallel can.
    plan = _render(catalog, recipe=SMOL, nodes=2)
    assert plan.strategy == "multi_node_tp_dp" and plan.hardware == "cpu" and plan.nodes == 2
    assert flag_value(plan.argv, "--data-parallel-size") == "2"
    assert flag_value(plan.worker_argvs[0], "--data-parallel-start-rank") == "1"
    assert plan.env["VLLM_CPU_KVCACHE_SPACE"] == "1"
    tp = _render(catalog, recipe=SMOL, strategy="multi_node_tp", nodes=2)
    assert tp.strategy == "single_node_tp" and tp.fallbacks[0].choice == "strategy"
    assert "does not list multi_node_tp" in tp.fallbacks[0].reason


def test_existing_multi_node_tp_unchanged(catalog: Catalog) -> None:
    plan = _render(catalog, recipe=NEMO, hardware="h200", strategy="multi_node_tp", nodes=2, head_address="10.0.0.1")
    assert flag_value(plan.argv, "--tensor-parallel-size") == "16"
    assert flag_value(plan.argv, "--master-addr") == "10.0.0.1"
    assert flag_value(plan.worker_argvs[0], "--node-rank") == "1" and "--headless" in plan.worker_argvs[0]

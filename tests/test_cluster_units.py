"""Multi-node pieces that need no server: ssh quoting, engines expected, node diagnosis, bad input."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from workbench.errors import InputError
from workbench.recipes import Selection, load_catalog, render
from workbench.server.node_diagnosis import ENGINE_VERSION, diagnose_node, version_mismatch
from workbench.server.command import CARRIED_ENV
from workbench.server.nodes import expected_engines, plan_cluster, remote_stop_argv, ssh_argv

LOGS = Path(__file__).parent / "fixtures" / "launch-logs" / "multinode"


def test_ssh_gets_one_string_that_splits_back_into_the_argv() -> None:
    words = ["env", "A=x y", "vllm", "serve", "/models/my model", "--override-generation-config",
             '{"temperature": 0.5}', "it's", "$HOME", "a;b|c", ""]
    argv = ssh_argv("user@gpu2", words)
    assert argv[:-1] == ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "--", "user@gpu2"]
    assert shlex.split(argv[-1]) == words and argv[-1] == shlex.join(words)
    assert remote_stop_argv("gpu2", 4242, "TERM")[-1] == "kill -TERM -4242"


def test_engines_the_head_reports() -> None:
    catalog = load_catalog()
    tp_dp = render(Selection(recipe="SmolLM2-135M-Instruct", nodes=3), catalog)
    assert expected_engines(tp_dp.argv) == ["0", "1", "2"]
    dep = render(Selection(recipe="nemotron", hardware="h200", strategy="multi_node_dep", nodes=2), catalog)
    assert expected_engines(dep.argv) == [str(i) for i in range(8)]  # hybrid LB: the head's own 8
    tp = render(Selection(recipe="nemotron", hardware="h200", strategy="multi_node_tp", nodes=2), catalog)
    assert expected_engines(tp.argv) == ["0"]


def test_wrong_interface_from_a_real_log() -> None:
    text = (LOGS / "dp_worker_wrong_iface.log").read_text()
    d = diagnose_node(text, rank=1, host="local", via="local", exit_code=1)
    assert d.cause == "wrong_interface" and "nosuch0" in d.summary and "network interface" in d.fix
    assert "iface" in d.settings
    assert "Unable to find address for: nosuch0" in d.evidence


def test_versions_read_from_real_logs_and_compared() -> None:
    head = ENGINE_VERSION.search((LOGS / "dp_head_worker_killed.log").read_text())
    node = ENGINE_VERSION.search((LOGS / "dp_worker_headless.log").read_text())
    assert head and node and head.group(1) == node.group(1) == "0.32.0"
    assert version_mismatch("0.32.0", "0.32.0", 1, "gpu2") is None
    d = version_mismatch("0.32.0", "0.31.1", 1, "gpu2")
    assert d is not None and d.cause == "vllm_version_mismatch" and "0.31.1" in d.summary
    # The headless multi-node TP executor's line (vLLM 0.32 entrypoints/cli/serve.py's format).
    tp = ENGINE_VERSION.search("Launching vLLM (v0.32.0) headless multiproc executor, with head node address")
    assert tp and tp.group(2) == "0.32.0"


def test_worker_killed_by_a_signal() -> None:
    text = (LOGS / "dp_worker_headless.log").read_text()
    d = diagnose_node(text, rank=1, host="local", via="local", exit_code=-9)
    assert d.cause == "killed" and "SIGKILL" in d.summary and "never return" in d.summary


def test_ssh_exit_255_before_the_remote_started_is_unreachable() -> None:
    d = diagnose_node("", rank=2, host="gpu3", via="ssh", exit_code=255)
    assert d.cause == "host_unreachable" and "ssh gpu3 true" in d.fix


def test_bad_worker_lists_refused_before_anything_starts() -> None:
    catalog = load_catalog()
    plan = render(Selection(recipe="SmolLM2-135M-Instruct", nodes=3), catalog)
    with pytest.raises(InputError, match="run 2 worker"):
        plan_cluster(plan, ["local"])
    with pytest.raises(InputError, match="not a host name"):
        plan_cluster(plan, ["local", "-oProxyCommand=x"])
    with pytest.raises(InputError, match="must reach the head") as err:
        plan_cluster(plan, ["local", "gpu2"])
    assert "head's address" in (err.value.hint or "") and "head_address" in err.value.settings
    single = render(Selection(recipe="SmolLM2-135M-Instruct"), catalog)
    with pytest.raises(InputError, match="multi-node plan"):
        plan_cluster(single, ["local"])


def test_nvlink_multicast_settings_reach_the_head_and_every_worker(monkeypatch) -> None:
    """Set where the workbench runs (a shared multi-GPU host forbids NVLink multicast), the three
    variables reach the head's environment and each worker's, local or over ssh."""
    for name, value in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
                        ("NVSHMEM_DISABLE_NVLS", "1")):
        monkeypatch.setenv(name, value)
    plan = render(Selection(recipe="SmolLM2-135M-Instruct", hardware="cpu", nodes=3), load_catalog())
    cluster = plan_cluster(plan, ["local", "gpu2"], head_address="10.0.0.1", progress=lambda line: None)
    assert {cluster.head.env[k] for k in CARRIED_ENV} == {"0", "1"}
    local, remote = cluster.workers
    assert local.env["NCCL_NVLS_ENABLE"] == "0" and local.host == "local"
    assert remote.remote_argv is not None and "NCCL_NVLS_ENABLE=0" in remote.remote_argv
    assert "NVSHMEM_DISABLE_NVLS=1" in remote.remote_argv

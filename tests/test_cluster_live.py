"""Two nodes of vLLM's own multi-node engine on this machine: `multi_node_tp_dp` with SmolLM2.

One deployment for the module (head + one `local` worker: TP 1, DP 2, ~70 s to
start on 2 cores): it comes up, answers, spreads requests over both engines,
`status` lists both nodes, and a worker killed from outside is diagnosed and the
rest stopped, with nothing left running.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from workbench.server.process import ProcessGroup
from workbench.metrics.figures import derive_figures
from workbench.metrics.parse import GENERATION_TOKENS, parse_metrics
from workbench.ui.server_tab import node_table
from workbench.ui.room_tab import server_markdown
from workbench.ui.throughput_tab import figures_markdown
from workbench.recipes import Selection, load_catalog, render
from workbench.server import Status, free_port
from workbench.server.cluster import CLUSTER_FILE, Cluster, launch_cluster
from workbench.errors import LaunchError

pytestmark = pytest.mark.vllm

REPO = Path(__file__).parent.parent
QUIET = lambda message: None  # noqa: E731


def group_members(pgid: int) -> list[int]:
    return ProcessGroup(pgid).members()


def engine_tokens(base_url: str) -> dict[str, float]:
    snapshot = parse_metrics(httpx.get(f"{base_url}/metrics", timeout=10).text)
    return {dict(labels)["engine"]: value for (name, labels), value in snapshot.counters.items()
            if name == GENERATION_TOKENS}


@pytest.fixture(scope="module")
def state_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cluster")


@pytest.fixture(scope="module")
def cluster(state_dir: Path) -> Iterator[Cluster]:
    plan = render(Selection(recipe="SmolLM2-135M-Instruct", nodes=2, port=free_port()), load_catalog())
    assert plan.strategy == "multi_node_tp_dp"
    started = time.monotonic()
    c = launch_cluster(plan, ["local"], state_dir=state_dir, progress=QUIET, stop_at_exit=False)
    try:
        c.wait_ready(600)
        print(f"\ntwo-node multi_node_tp_dp ready in {time.monotonic() - started:.1f} s")
        yield c
    finally:
        c.stop(timeout=30)


def test_ready_means_every_engine_reports(cluster: Cluster) -> None:
    head = cluster.head
    assert cluster.status is Status.READY and head.status is Status.READY
    assert httpx.get(f"{head.base_url}/health", timeout=5).status_code == 200
    assert [m["id"] for m in httpx.get(f"{head.base_url}/v1/models", timeout=5).json()["data"]] == [head.model]
    assert cluster.expected_engines == ["0", "1"] and cluster.engines_seen == ["0", "1"]
    assert sorted(engine_tokens(head.base_url)) == ["0", "1"]
    (worker,) = cluster.nodes
    assert "--headless" in worker.record.argv and "--data-parallel-start-rank" in worker.record.argv
    # Both nodes rendezvous on the head's free ports, not vLLM's defaults.
    rpc = head.argv[head.argv.index("--data-parallel-rpc-port") + 1]
    assert worker.record.argv[worker.record.argv.index("--data-parallel-rpc-port") + 1] == rpc != "29550"
    assert [p.phase.value for p in worker.phases][-1] == "ready"
    assert "loading_weights" in [p.phase.value for p in worker.phases]


def test_requests_spread_over_both_engines(cluster: Cluster) -> None:
    head = cluster.head
    before = engine_tokens(head.base_url)

    def ask(i: int) -> str:
        r = httpx.post(f"{head.openai_base_url}/completions", timeout=120,
                       json={"model": head.model, "prompt": f"Count to {i}:", "max_tokens": 8})
        r.raise_for_status()
        return str(r.json()["choices"][0]["text"])

    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(ask, range(4)))
    assert all(answers)
    after = engine_tokens(head.base_url)
    grew = {engine: after[engine] - before.get(engine, 0.0) for engine in after}
    assert grew["0"] > 0 and grew["1"] > 0, grew
    assert sum(grew.values()) == 32  # 4 requests x 8 tokens, split over the two engines


def test_decode_rate_per_engine_and_their_sum(cluster: Cluster) -> None:
    head = cluster.head
    first = parse_metrics(httpx.get(f"{head.base_url}/metrics", timeout=10).text)
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda i: httpx.post(f"{head.openai_base_url}/completions", timeout=120, json={
            "model": head.model, "prompt": f"Say {i}", "max_tokens": 8}).raise_for_status(), range(4)))
    last = parse_metrics(httpx.get(f"{head.base_url}/metrics", timeout=10).text)
    figures = derive_figures([first, last])
    per_engine = figures.decode_tps_by_engine
    assert per_engine is not None and sorted(per_engine) == ["0", "1"]
    assert all(v > 0 for v in per_engine.values())
    assert figures.decode_tps == pytest.approx(sum(per_engine.values()))
    assert "Decode tok/s per engine | engine 0" in figures_markdown(figures)
    assert "Decode tok/s per engine **engine 0" in server_markdown(figures, None)  # the workshop Room view
    assert node_table(head)[1][:4] == [1, "worker", "local", "ready"]


def test_state_and_status_list_every_node(cluster: Cluster, state_dir: Path) -> None:
    record = json.loads((cluster.head.state_dir / CLUSTER_FILE).read_text())
    assert record["run_id"] == cluster.head.run_id and record["status"] == "ready"
    (node,) = record["nodes"]
    assert node["rank"] == 1 and node["host"] == "local" and node["status"] == "ready"
    assert Path(node["log_path"]).name == "node1.log" and Path(node["log_path"]).stat().st_mode & 0o777 == 0o600
    env = {**os.environ, "WORKBENCH_STATE_DIR": str(state_dir)}
    out = subprocess.run([sys.executable, "-m", "workbench", "status"], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=120).stdout
    assert "2 nodes; engines expected 0, 1, reporting 0, 1" in out
    assert "node 0 head" in out and "node 1 worker local" in out
    rows = cluster.rows()
    assert [(r["role"], r["status"]) for r in rows] == [("head", "ready"), ("worker", "ready")]


def test_worker_killed_from_outside_is_diagnosed_and_nothing_is_left(cluster: Cluster) -> None:
    head, (worker,) = cluster.head, cluster.nodes
    assert worker.pid is not None and head.pid is not None
    os.killpg(worker.pid, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while cluster.status is not Status.FAILED and time.monotonic() < deadline:
        time.sleep(0.2)
    assert cluster.status is Status.FAILED
    d = cluster.diagnosis
    assert d is not None and d.cause == "killed"
    assert "Node 1 (local) was killed by SIGKILL" in d.summary and "never return" in d.summary
    with pytest.raises(LaunchError, match="Node 1"):
        cluster.wait_ready(1)
    # A failed deployment leaves nothing running: the head is stopped too, its log kept.
    deadline = time.monotonic() + 60
    while (group_members(head.pid) or group_members(worker.pid)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert group_members(head.pid) == [] and group_members(worker.pid) == []
    assert head.log_path is not None and "Application startup complete" in head.log_text()
    record = json.loads((head.state_dir / CLUSTER_FILE).read_text())
    assert record["status"] == "failed" and record["diagnosis"]["cause"] == "killed"

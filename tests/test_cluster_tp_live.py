"""Tensor parallel 2 across two nodes of vLLM's own multi-node engine, on this machine.

The tiny forcing model (2 attention heads, so TP 2 splits them; SmolLM2's 9 do not)
as `multi_node_tp`: the head and one `local` worker (`--headless`), one CPU rank
each over gloo. It comes up, answers a forced request exactly, and stops with
nothing left of either node.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from workbench.server.process import ProcessGroup
from workbench.demo.forcing import forcing_plan, regex_for_exact_text
from workbench.server import Status, free_port
from workbench.server.cluster import Cluster, launch_cluster

pytestmark = pytest.mark.vllm

QUIET = lambda message: None  # noqa: E731
FORCED = "Two ranks, one answer."


def group_members(pgid: int) -> list[int]:
    return ProcessGroup(pgid).members()


@pytest.fixture(scope="module")
def cluster(forcing_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    plan = forcing_plan(port=free_port(), nodes=2)
    assert plan.strategy == "multi_node_tp" and len(plan.worker_argvs) == 1
    started = time.monotonic()
    c = launch_cluster(plan, ["local"], state_dir=tmp_path_factory.mktemp("cluster-tp"), progress=QUIET,
                       stop_at_exit=False)
    try:
        c.wait_ready(600)
        print(f"\ntwo-node multi_node_tp (TP 2) ready in {time.monotonic() - started:.1f} s")
        yield c
    finally:
        c.stop(timeout=30)


def test_tp2_over_two_nodes_answers_and_stops_clean(cluster: Cluster) -> None:
    head = cluster.head
    assert head.status is Status.READY
    assert cluster.expected_engines == ["0"] and cluster.engines_seen == ["0"]  # one engine, two ranks
    log = head.log_text()
    assert "world_size=2" in log and "backend=gloo" in log, log[-3000:]
    r = httpx.post(f"{head.openai_base_url}/completions", timeout=300, json={
        "model": head.model, "prompt": "Say it:", "max_tokens": 32, "temperature": 0,
        "structured_outputs": {"regex": regex_for_exact_text(FORCED)}})
    r.raise_for_status()
    assert r.json()["choices"][0]["text"] == FORCED
    groups = [head.pid, *(node.pid for node in cluster.nodes)]
    assert all(pid and group_members(pid) for pid in groups)
    cluster.stop(timeout=30)
    assert [group_members(pid) for pid in groups if pid] == [[] for pid in groups if pid]

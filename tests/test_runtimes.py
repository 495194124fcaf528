"""Each Runtime behind the supervisor, on real processes (tests/helpers/misbehaving_child.py)
and a real HTTP server (tests/helpers/fixed_rate_server.py); no vLLM."""

from __future__ import annotations

import logging
import os
import stat
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.helpers.fixed_rate_server import MODEL, FixedRateServer
from workbench.errors import LaunchError
from workbench.server import attach, list_models
from workbench.server.process import ProcessGroup, StopStage, spawn_group, started_at
from workbench.server.record import ServerRecord
from workbench.server.runtime import Runtime
from workbench.server.runtime_attached import AttachedURL
from workbench.server.runtime_cluster import ClusterHead
from workbench.server.runtime_docker import DockerContainer
from workbench.server.runtime_local import LocalProcessGroup

CHILD = Path(__file__).parent / "helpers" / "misbehaving_child.py"


def _spawn(tmp_path: Path, *args: str):
    spawned = spawn_group([sys.executable, str(CHILD), *args], {}, tmp_path / "vllm.log", what="the test child",
                          hint="")
    _wait_for(lambda: "grandchild" in (tmp_path / "vllm.log").read_text())
    return spawned


def _wait_for(condition, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def _grandchild(tmp_path: Path) -> int:
    return next(int(line.split()[1]) for line in (tmp_path / "vllm.log").read_text().splitlines()
                if line.startswith("grandchild "))


def _record(runtime: Runtime, mode: str = "local") -> ServerRecord:
    return ServerRecord(mode=mode, port=8000, served_model="m", started_at=time.time(), **runtime.record_fields())


def test_every_runtime_implements_the_whole_interface():
    for cls in (LocalProcessGroup, DockerContainer, AttachedURL, ClusterHead):
        assert not getattr(cls, "__abstractmethods__", None), cls
        assert issubclass(cls, Runtime)


def test_a_local_group_started_here_is_known_again_from_its_record_and_stopped_whole(tmp_path):
    runtime = LocalProcessGroup.spawned(_spawn(tmp_path))
    grandchild = _grandchild(tmp_path)
    assert runtime.started_here and runtime.is_alive() and not runtime.has_exited()
    assert grandchild in runtime.members() and runtime.pid in runtime.members()
    # Another process knows it only from the record: the same leader, started at the recorded time.
    loaded = LocalProcessGroup.from_record(_record(runtime))
    assert not loaded.started_here and loaded.is_alive() and loaded.exit_code is None
    result = loaded.stop(10)
    assert result.stage is StopStage.TERMINATED and set(result.signalled_pids) >= {runtime.pid, grandchild}
    _wait_for(runtime.has_exited)
    assert runtime.exit_code is not None and started_at(grandchild) is None and runtime.members() == []


def test_a_record_whose_start_time_does_not_match_is_never_signalled(tmp_path):
    runtime = LocalProcessGroup.spawned(_spawn(tmp_path))
    try:
        stale = LocalProcessGroup(runtime.pid, 1.0)  # the pid, reused by someone else as far as it can tell
        assert not stale.is_alive() and stale.stop(1).stage is StopStage.ALREADY_GONE
        assert runtime.is_alive()
    finally:
        runtime.stop(5)


def test_a_group_that_ignores_sigterm_is_killed(tmp_path):
    runtime = LocalProcessGroup.spawned(_spawn(tmp_path, "--ignore-term"))
    grandchild = _grandchild(tmp_path)
    result = runtime.stop(1.0)
    assert result.stage is StopStage.KILLED
    assert ProcessGroup(runtime.pid).members() == [] and started_at(grandchild) is None


def test_a_docker_container_is_asked_to_stop_by_name_before_its_client_group_is_stopped(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "docker-calls"
    docker = bin_dir / "docker"  # records what the workbench asks Docker (no engine on this machine)
    docker.write_text(f"#!/bin/sh\necho \"$@\" >> {calls}\n")
    docker.chmod(docker.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    runtime = DockerContainer.for_container(_spawn(tmp_path), "wb-8123")
    assert DockerContainer.from_record(_record(runtime, "docker")).container_name == "wb-8123"
    result = runtime.stop(7)
    assert calls.read_text().split() == ["stop", "-t", "7", "wb-8123"]
    assert result.stage is StopStage.TERMINATED and runtime.members() == []


def test_without_a_docker_cli_the_stop_says_so_and_still_ends_the_group(tmp_path, monkeypatch, caplog):
    runtime = DockerContainer.for_container(_spawn(tmp_path), "wb-8124")
    monkeypatch.setenv("PATH", str(tmp_path / "nothing-here"))
    with caplog.at_level(logging.WARNING, logger="workbench.server"):
        result = runtime.stop(5)
    assert result.stage is StopStage.TERMINATED and runtime.members() == []
    assert "docker stop wb-8124 failed" in caplog.text


def test_an_attached_url_is_probed_never_signalled_and_says_why_it_is_gone():
    server = FixedRateServer(prefill_rate=0, decode_rate=100).start()
    try:
        runtime = AttachedURL(server.base_url, MODEL, None)
        assert runtime.is_alive() and runtime.members() == [] and not runtime.started_here
        assert runtime.stop(5).stage is StopStage.DETACHED and runtime.is_alive()  # forgetting it leaves it up
    finally:
        server.stop()
    assert not runtime.is_alive()
    gone = runtime.gone_diagnosis()
    assert server.base_url in gone.summary and "does not answer /health" in gone.summary


def test_attaching_to_a_server_that_lists_no_model_is_a_clear_error(tmp_path):
    with FixedRateServer(prefill_rate=0, decode_rate=100, fault="no-models") as server:
        assert list_models(server.base_url) == []
        with pytest.raises(LaunchError, match="serves no model"):
            attach(server.base_url, state_dir=tmp_path)
    with FixedRateServer(prefill_rate=0, decode_rate=100, fault="bad-models") as server:
        with pytest.raises(LaunchError, match="not an OpenAI model list"):
            attach(server.base_url, state_dir=tmp_path)
    with FixedRateServer(prefill_rate=0, decode_rate=100) as server:
        handle = attach(server.base_url, state_dir=tmp_path)
        assert handle.model == MODEL and isinstance(handle.runtime, AttachedURL)


def test_a_cluster_head_stops_its_workers_beside_the_head_even_when_the_head_is_gone(tmp_path):
    worker = LocalProcessGroup.spawned(_spawn(tmp_path))
    stopped: list[str] = []

    def stop_workers(timeout: float) -> None:
        stopped.append(threading.current_thread().name)
        worker.stop(timeout)

    head = ClusterHead(LocalProcessGroup(None, None), stop_workers)  # its head already gone
    assert not head.is_alive() and head.members() == []
    assert head.stop(5).stage is StopStage.ALREADY_GONE
    assert stopped == ["cluster-stop-workers"] and worker.members() == []

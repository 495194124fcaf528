"""The launcher against a real `vllm serve` (vLLM's CPU build).

One SmolLM2 server is launched from the CPU plan for the whole module (each
start costs ~40 s on 2 cores); the failing launches are short-lived. Every
state folder is under pytest's tmp_path, never the user's real one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from workbench.server.process import ProcessGroup
from workbench.server import free_port
from workbench.errors import LaunchError
from workbench.server import (
    PHASE_ORDER,
    ServeCommand,
    ServerEvent,
    ServerProcess,
    StartupPhase,
    Status,
    StopStage,
    attach,
    find_running,
    launch,
    start,
)
from workbench.recipes import Selection, load_catalog, render

pytestmark = pytest.mark.vllm

CHILD = Path(__file__).parent / "helpers" / "misbehaving_child.py"
REPO = Path(__file__).parent.parent
QUIET = lambda message: None  # noqa: E731


def _cpu_plan(**selection):
    return render(Selection(hardware="cpu", port=free_port(), **selection), load_catalog())


def _workbench(state_dir: Path, *args: str) -> subprocess.CompletedProcess:
    """`python -m workbench ...` as a separate process, seeing the same state folder."""
    env = {**os.environ, "WORKBENCH_STATE_DIR": str(state_dir)}
    return subprocess.run([sys.executable, "-m", "workbench", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)


def _group_gone(pgid: int) -> bool:
    return not ProcessGroup(pgid).members()


def _wait_until(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


@pytest.fixture(scope="module")
def state_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("servers")


@pytest.fixture(scope="module")
def server(state_dir):
    events: list[ServerEvent] = []
    handle = launch(_cpu_plan(), state_dir=state_dir, on_event=events.append,
                             progress=QUIET, stop_at_exit=False)
    handle.recorded = events
    try:
        handle.wait_ready(600)
        yield handle
    finally:
        handle.stop()


def test_phases_pass_in_order_and_time_to_ready_is_recorded(server):
    phases = [e.phase for e in server.recorded if e.kind == "phase"]
    assert phases[0] is StartupPhase.STARTED and phases[-1] is StartupPhase.READY
    for needed in (StartupPhase.LOADING_WEIGHTS, StartupPhase.KV_CACHE, StartupPhase.HTTP_UP):
        assert needed in phases
    order = [PHASE_ORDER.index(p) for p in phases]
    assert order == sorted(order)
    assert [r.phase for r in server.phases] == phases
    assert all(r.duration_s is not None and r.duration_s >= 0 for r in server.phases)
    assert server.time_to_ready_s == pytest.approx(server.phases[-1].started_s, abs=0.01)
    assert server.status is Status.READY
    assert any(e.kind == "progress" and e.progress == 1.0 for e in server.recorded)
    kv = next(r for r in server.phases if r.phase is StartupPhase.KV_CACHE)
    assert "CPU KV cache" in kv.detail and "tokens" in kv.detail
    assert list(server.events()) == server.events_so_far  # the iterator replays, then ends at ready


def test_the_model_is_listed_and_answers_a_chat(server):
    models = httpx.get(f"{server.openai_base_url}/models", timeout=10).json()
    assert [m["id"] for m in models["data"]] == ["HuggingFaceTB/SmolLM2-135M-Instruct"]
    reply = httpx.post(
        f"{server.openai_base_url}/chat/completions",
        json={"model": server.model, "max_tokens": 16, "temperature": 0,
              "messages": [{"role": "user", "content": "What is the capital of France?"}]},
        timeout=120,
    ).json()
    assert reply["choices"][0]["message"]["content"].strip()


def test_the_command_ran_on_loopback_with_the_cpu_engine_env(server):
    assert server.argv[server.argv.index("--host") + 1] == "127.0.0.1"
    assert server.env["VLLM_CPU_KVCACHE_SPACE"] == "1" and server.env["HF_HUB_OFFLINE"] == "1"
    state = json.loads(server.state_path.read_text())
    assert {"pid", "pgid", "port", "argv", "env", "plan", "started_at", "mode", "log_path"} <= set(state)
    assert state["status"] == "ready" and state["plan"]["hardware"] == "cpu"
    assert any("Starting vLLM server on" in line for line in server.log_tail(200))


def test_another_workbench_process_sees_the_server(server, state_dir):
    out = _workbench(state_dir, "status", "--json")
    assert out.returncode == 0, out.stderr
    [record] = json.loads(out.stdout)
    assert (record["port"], record["pid"], record["status"]) == (server.port, server.pid, "ready")
    assert find_running(state_dir).pid == server.pid
    text = _workbench(state_dir, "status").stdout
    assert f"{server.base_url}  ready" in text


def test_attach_to_a_running_server(server, tmp_path):
    attached = attach(server.base_url, state_dir=tmp_path)
    assert attached.status is Status.READY and attached.model == server.model
    assert find_running(tmp_path).base_url == server.base_url
    assert attached.stop().stage is StopStage.DETACHED
    assert find_running(tmp_path) is None
    assert httpx.get(f"{server.base_url}/health", timeout=5).status_code == 200  # untouched


def test_stop_from_another_process_leaves_nothing_running(server, state_dir):
    pids = server.group_pids()
    assert server.pid in pids and len(pids) >= 2  # API server + engine core (+ worker)
    out = _workbench(state_dir, "stop")
    assert out.returncode == 0, out.stderr
    assert "stopped (SIGTERM)" in out.stdout or "killed (SIGKILL)" in out.stdout
    assert _group_gone(server.pgid)
    _wait_until(lambda: server.status is Status.STOPPED, 15, "the supervisor to see the stop")
    assert server.log_path.exists()
    assert find_running(state_dir) is None


# ── launches that fail, each diagnosed with its log kept ────────────────────


def _failed(handle: ServerProcess) -> ServerProcess:
    with pytest.raises(LaunchError) as err:
        handle.wait_ready(300)
    assert handle.status is Status.FAILED
    assert handle.diagnosis.summary in err.value.message
    assert handle.log_path.exists() and handle.log_text()
    assert _group_gone(handle.pgid) or handle.stop().stage in (StopStage.TERMINATED, StopStage.ALREADY_GONE)
    return handle


def test_a_bad_flag_fails_naming_the_flag(tmp_path):
    plan = _cpu_plan(extra=["--no-such-flag 3"])
    handle = _failed(launch(plan, state_dir=tmp_path, progress=QUIET, stop_at_exit=False))
    assert handle.diagnosis.cause == "unrecognized_argument"
    assert "--no-such-flag" in handle.diagnosis.fix
    assert handle.exit_code == 2


def test_a_port_taken_after_the_check_is_diagnosed_with_its_holder(tmp_path):
    plan = _cpu_plan()
    holder = subprocess.Popen([sys.executable, str(CHILD), "--listen", str(plan.port)],
                              stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert holder.stdout.readline().startswith("child ")
        with pytest.raises(LaunchError, match=f"pid {holder.pid}"):
            launch(plan, state_dir=tmp_path, progress=QUIET, stop_at_exit=False)
        handle = _failed(launch(plan, state_dir=tmp_path, progress=QUIET, stop_at_exit=False,
                                         check_port=False))
        assert handle.diagnosis.cause == "address_in_use"
        assert f"held by pid {holder.pid}" in handle.diagnosis.summary
        assert "Address already in use" in handle.diagnosis.evidence
    finally:
        os.killpg(holder.pid, signal.SIGKILL)
        holder.wait()


def test_a_model_dir_that_does_not_exist(tmp_path):
    missing = tmp_path / "no-such-model"
    port = free_port()
    command = ServeCommand("local", [str(Path(sys.executable).with_name("vllm")), "serve", str(missing),
                                     "--host", "127.0.0.1", "--port", str(port)],
                           port, str(missing), env={"HF_HUB_OFFLINE": "1"})
    handle = _failed(start(command, state_dir=tmp_path, stop_at_exit=False))
    assert handle.diagnosis.cause == "model_not_found"
    assert str(missing) in handle.diagnosis.summary


def test_a_server_killed_from_outside_is_diagnosed(tmp_path):
    handle = launch(_cpu_plan(), state_dir=tmp_path, progress=QUIET, stop_at_exit=False)
    _wait_until(lambda: handle.phase is not None and handle.phase is not StartupPhase.STARTED, 300,
                "vLLM to start loading weights")
    assert len(handle.group_pids()) >= 2
    os.killpg(handle.pgid, signal.SIGKILL)
    handle = _failed(handle)
    assert handle.exit_code == -9
    assert handle.diagnosis.cause == "killed"
    assert _group_gone(handle.pgid)
    assert json.loads(handle.state_path.read_text())["diagnosis"]["cause"] == "killed"

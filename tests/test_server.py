"""The launcher without vLLM: phases from a real recorded start, plan preparation
and its refusals on this machine, busy ports, state files, and the staged stop
of a child that misbehaves on purpose (tests/helpers/misbehaving_child.py)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from workbench.server.process import started_at
from workbench.server import free_port
from workbench import server
from workbench.errors import LaunchError
from workbench.server import ServeCommand, StartupPhase, Status, StopStage
from workbench.server.command import container_argv
from workbench.server.state import read_json
from workbench.recipes import Selection, load_catalog, render

LOGS = Path(__file__).parent / "fixtures" / "launch-logs"
CHILD = Path(__file__).parent / "helpers" / "misbehaving_child.py"


def _alive(pid: int) -> bool:
    """A pid still runs (and is not a zombie)."""
    return started_at(pid) is not None


def _wait_for_line(handle, prefix: str, timeout: float = 20) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in handle.log_tail(20):
            if line.startswith(prefix + " "):
                return int(line.split()[1])
        time.sleep(0.1)
    raise AssertionError(f"no {prefix!r} line in {handle.log_tail(20)}")


def _child(tmp_path: Path, *args: str) -> server.ServerProcess:
    command = ServeCommand("local", [sys.executable, str(CHILD), *args], free_port(), "no-model")
    return server.start(command, state_dir=tmp_path, stop_at_exit=False)


# ── phases from vLLM's own log ──────────────────────────────────────────────


def test_phases_of_a_real_cpu_start_come_out_in_order():
    detector = server.PhaseDetector()
    steps = []
    text = (LOGS / "startup_cpu_smollm2.log").read_text().replace("\r", "\n")
    for line in text.splitlines():
        steps += detector.feed(line)
    first_seen = list(dict.fromkeys(phase for phase, _, _ in steps if phase is not StartupPhase.STARTED))
    assert first_seen == [StartupPhase.LOADING_WEIGHTS, StartupPhase.KV_CACHE, StartupPhase.HTTP_UP]
    details = [d for _, d, _ in steps]
    assert "engine core v0.32.0 initializing" in details
    assert "checkpoint 0.50 GiB" in details
    assert "weights loaded in 1.44 s" in details
    assert "CPU KV cache: 46,592 tokens (11.38x requests of 4,096 tokens)" in details
    assert "http://127.0.0.1:18123" in details
    assert [p for _, _, p in steps if p is not None][-1] == 1.0


def test_phases_of_a_real_start_are_detected_in_phase_order():
    # PHASE_ORDER is the order views draw the phases in: it must be the order vLLM goes through them.
    detector = server.PhaseDetector()
    text = (LOGS / "startup_cpu_smollm2.log").read_text().replace("\r", "\n")
    seen = [phase for line in text.splitlines() for phase, _, _ in detector.feed(line)]
    first_seen = list(dict.fromkeys(seen))
    positions = [server.PHASE_ORDER.index(phase) for phase in first_seen]
    assert len(first_seen) == 4 and positions == sorted(positions)


# ── preparing a plan ────────────────────────────────────────────────────────


def test_cpu_plan_serves_the_built_demo_model_on_loopback():
    plan = render(Selection(hardware="cpu", port=18555), load_catalog())
    cmd = server.prepare(plan, progress=lambda message: None)
    assert cmd.mode == "local"
    assert cmd.argv[0] == str(Path(sys.executable).with_name("vllm")) and cmd.argv[1] == "serve"
    assert Path(cmd.argv[2]).is_dir()
    assert cmd.argv[cmd.argv.index("--served-model-name") + 1] == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert cmd.argv[cmd.argv.index("--host") + 1] == "127.0.0.1"
    assert cmd.argv[cmd.argv.index("--port") + 1] == "18555"
    assert cmd.env["VLLM_CPU_KVCACHE_SPACE"] == "1" and cmd.env["HF_HUB_OFFLINE"] == "1"
    assert cmd.served_model == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert cmd.plan["recipe_id"] == "HuggingFaceTB/SmolLM2-135M-Instruct"


def test_nvlink_multicast_settings_reach_the_server_command(monkeypatch):
    """Set in the workbench's environment, they are in the server's command (and so in its record),
    not left to inheritance: a container or a node would not inherit them."""
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "0")
    monkeypatch.setenv("NVSHMEM_DISABLE_NVLS", "1")
    monkeypatch.delenv("TORCH_SYMM_MEM_DISABLE_MULTICAST", raising=False)
    cmd = server.prepare(render(Selection(hardware="cpu"), load_catalog()), progress=lambda message: None)
    assert {k: cmd.env[k] for k in ("NCCL_NVLS_ENABLE", "NVSHMEM_DISABLE_NVLS")} == {
        "NCCL_NVLS_ENABLE": "0", "NVSHMEM_DISABLE_NVLS": "1"}
    assert "TORCH_SYMM_MEM_DISABLE_MULTICAST" not in cmd.env


def test_a_host_the_user_asks_for_replaces_loopback():
    plan = render(Selection(hardware="cpu"), load_catalog())
    cmd = server.prepare(plan, host="0.0.0.0", progress=lambda message: None)
    assert cmd.argv.count("--host") == 1 and cmd.argv[cmd.argv.index("--host") + 1] == "0.0.0.0"


def test_another_pythons_module_form_is_used_with_python(tmp_path):
    plan = render(Selection(hardware="cpu"), load_catalog())
    cmd = server.prepare(plan, python=sys.executable, progress=lambda message: None)
    assert cmd.argv[:4] == [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve"]
    # That module form is a real entry point of the installed vLLM.
    out = subprocess.run([sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", "--help=max-model-len"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "--max-model-len" in out.stdout


@pytest.mark.skipif(server.nvidia_gpu_available(), reason="this machine has a GPU")
def test_a_gpu_plan_is_refused_here_and_says_it_can_be_copied():
    plan = render(Selection(hardware="h200"), load_catalog())
    with pytest.raises(LaunchError) as err:
        server.prepare(plan)
    assert "no NVIDIA GPU" in err.value.message
    assert "copied and run on a machine with h200 GPUs" in err.value.hint
    assert "CPU demo engine" in err.value.hint and err.value.settings == {"hardware": "cpu"}


@pytest.mark.skipif(server.docker_engine_problem() is None, reason="a Docker engine runs here")
def test_docker_mode_is_refused_when_no_docker_engine_answers():
    plan = render(Selection(hardware="cpu"), load_catalog())
    with pytest.raises(LaunchError) as err:
        server.prepare(plan, mode="docker")
    assert "Docker" in err.value.message
    assert "docker info" in err.value.message or "not installed" in err.value.message
    assert "launch mode local" in err.value.hint and err.value.settings == {"mode": "local"}


def test_a_trtllm_plan_is_rendered_not_launched():
    plan = render(Selection(preset="trtllm_mtp"), load_catalog())
    assert plan.engine == "trtllm"
    with pytest.raises(LaunchError, match="launches only vLLM"):
        server.prepare(plan)


def test_docker_argv_publishes_on_loopback_and_expands_the_cache_mount():
    plan = render(Selection(hardware="cpu", port=18556), load_catalog())
    argv = container_argv(plan, 18556, "127.0.0.1", "workbench-vllm-18556")
    assert argv[:5] == ["docker", "run", "--rm", "--name", "workbench-vllm-18556"]
    assert argv[argv.index("-p") + 1] == "127.0.0.1:18556:18556"  # the container listens on the plan's --port
    assert argv[argv.index("-v") + 1].startswith(str(Path.home()))


# ── ports ───────────────────────────────────────────────────────────────────


def test_a_socket_shared_with_a_child_is_named_by_the_process_that_opened_it():
    # A child that inherits a listening socket holds it too (a forked worker, or the instant
    # between fork and exec); the holder to name is the one that opened it.
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        child = subprocess.Popen(["sleep", "30"], pass_fds=(listener.fileno(),))
        try:
            found = server.port_holder(port)
            assert found is not None and found.pid == os.getpid()
        finally:
            child.kill()
            child.wait()


def test_a_busy_port_is_refused_before_anything_starts_naming_the_holder(tmp_path):
    port = free_port()
    holder = subprocess.Popen([sys.executable, str(CHILD), "--listen", str(port)],
                              stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert holder.stdout.readline().startswith("child ")
        found = server.port_holder(port)
        assert found is not None and found.pid == holder.pid and "misbehaving_child.py" in found.command
        command = ServeCommand("local", [sys.executable, "-c", "pass"], port, "m")
        with pytest.raises(LaunchError) as err:
            server.start(command, state_dir=tmp_path, stop_at_exit=False)
        assert f"Port {port} is already in use by pid {holder.pid}" in err.value.message
        assert "nothing was started" in err.value.message
        assert f"kill {holder.pid}" in err.value.hint
        assert not (tmp_path / str(port)).exists()
    finally:
        os.killpg(holder.pid, signal.SIGKILL)
        holder.wait()


def test_nobody_holds_a_free_port():
    assert server.port_holder(free_port()) is None


# ── supervision and the staged stop ─────────────────────────────────────────


def test_a_child_ignoring_sigterm_is_killed_with_its_grandchild(tmp_path):
    handle = _child(tmp_path, "--ignore-term")
    child = _wait_for_line(handle, "child")
    grandchild = _wait_for_line(handle, "grandchild")
    assert set(handle.group_pids()) == {handle.pid, grandchild} and child == handle.pid
    result = handle.stop(timeout=1.0)
    assert result.stage is StopStage.KILLED
    assert sorted(result.signalled_pids) == sorted([child, grandchild])
    assert not _alive(child) and not _alive(grandchild)
    assert handle.group_pids() == []
    assert handle.status is Status.STOPPED
    assert server.load_server(handle.state_dir).to_dict()["status"] == "stopped"
    assert read_json(handle.state_path)["stop_stage"] == "killed"


def test_a_polite_child_ends_at_sigterm(tmp_path):
    handle = _child(tmp_path)
    grandchild = _wait_for_line(handle, "grandchild")
    result = handle.stop(timeout=10.0)
    assert result.stage is StopStage.TERMINATED
    assert not _alive(handle.pid) and not _alive(grandchild)
    assert handle.stop().stage is StopStage.ALREADY_GONE


def test_a_group_killed_from_outside_is_failed_and_diagnosed(tmp_path):
    handle = _child(tmp_path, "--ignore-term")
    _wait_for_line(handle, "grandchild")
    os.killpg(handle.pgid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while handle.status is Status.STARTING and time.monotonic() < deadline:
        time.sleep(0.1)
    assert handle.status is Status.FAILED
    assert handle.exit_code == -9
    assert handle.diagnosis.cause == "killed" and "SIGKILL" in handle.diagnosis.summary
    assert handle.log_path.exists() and "grandchild" in handle.log_path.read_text()
    assert handle.events_so_far[-1].kind == "status" and handle.events_so_far[-1].diagnosis.cause == "killed"


def test_state_file_lets_another_handle_find_and_stop_the_server(tmp_path):
    handle = _child(tmp_path, "--ignore-term")
    seen = []
    handle.subscribe(seen.append)
    grandchild = _wait_for_line(handle, "grandchild")
    assert seen[0].kind == "phase" and seen[0].phase is StartupPhase.STARTED
    found = server.find_running(tmp_path)
    assert found is not None and found is not handle
    assert (found.pid, found.pgid, found.port, found.argv) == (handle.pid, handle.pgid, handle.port, handle.argv)
    assert found.refresh() is Status.STARTING  # alive, but nothing answers HTTP
    assert found.stop(timeout=1.0).stage is StopStage.KILLED
    assert not _alive(grandchild)
    handle._watcher.join(10)
    assert handle.status is Status.STOPPED  # the supervisor saw a stop, not a crash
    assert server.find_running(tmp_path) is None
    assert [h.status for h in server.list_servers(tmp_path)] == [Status.STOPPED]


def test_state_dir_comes_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("WORKBENCH_STATE_DIR", str(tmp_path / "x"))
    assert server.state_root() == tmp_path / "x"
    assert server.state_root(tmp_path / "y") == tmp_path / "y"


def test_attach_refuses_a_url_where_nothing_answers(tmp_path):
    with pytest.raises(LaunchError, match="Nothing answers"):
        server.attach(f"http://127.0.0.1:{free_port()}", state_dir=tmp_path, timeout=2)

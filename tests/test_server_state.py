"""State you can trust: a fresh record per start, records that count only while
their pid and start time match, corrupt or hostile records reported and skipped,
keys kept out of what is shown, private files. Uses the misbehaving child
(tests/helpers/misbehaving_child.py), no vLLM."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from workbench.server.process import started_at
from workbench import server
from workbench.cli import main
from workbench.errors import InputError
from workbench.server import ServeCommand, Status, StopStage, free_port
from workbench.server.servers import scan_records
from workbench.server.state import read_json, write_json

CHILD = Path(__file__).parent / "helpers" / "misbehaving_child.py"


def _alive(pid: int) -> bool:
    """A pid still runs (and is not a zombie)."""
    return started_at(pid) is not None


def _child(state_dir: Path, port: int, *args: str, env: dict[str, str] | None = None,
           api_key: str | None = None) -> server.ServerProcess:
    command = ServeCommand("local", [sys.executable, str(CHILD), *args], port, "no-model",
                           env=env or {}, api_key=api_key)
    return server.start(command, state_dir=state_dir, stop_at_exit=False)


def _wait_for_line(handle: server.ServerProcess, prefix: str, timeout: float = 20) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in handle.log_tail(20):
            if line.startswith(prefix + " "):
                return int(line.split()[1])
        time.sleep(0.1)
    raise AssertionError(f"no {prefix!r} line in {handle.log_tail(20)}")


def _bystander() -> subprocess.Popen:
    """A process the workbench never started, in its own process group."""
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)


def _write_record(root: Path, name: str, record: object) -> Path:
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "state.json").write_text(json.dumps(record))
    return folder


def _cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _record(pid: int, port: int, **extra: object) -> dict:
    return {"mode": "local", "port": port, "host": "127.0.0.1", "served_model": "m", "pid": pid, "pgid": pid,
            "started_at": time.time(), "status": "starting", **extra}


# ── a fresh record for every start ──────────────────────────────────────────


def test_a_server_relaunched_on_a_port_used_before_is_recorded(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("WORKBENCH_STATE_DIR", str(tmp_path))
    port = free_port()
    first = _child(tmp_path, port)
    _wait_for_line(first, "grandchild")
    assert first.stop(timeout=10).stage is StopStage.TERMINATED
    assert read_json(first.state_path)["status"] == "stopped"

    second = _child(tmp_path, port)
    _wait_for_line(second, "grandchild")
    try:
        on_disk = read_json(second.state_path)
        assert on_disk["pid"] == second.pid and on_disk["status"] == "starting"
        assert on_disk["stop_stage"] is None  # nothing carried over from the first run
        found = server.find_running(tmp_path)
        assert found is not None and found.pid == second.pid
        code, out, _ = _cli(capsys, "stop", "--port", str(port), "--timeout", "10")
        assert code == 0 and "stopped (SIGTERM)" in out
        assert not _alive(second.pid)
    finally:
        second.stop(timeout=5)


# ── records count only while pid and start time match ───────────────────────


def test_a_record_without_a_start_time_is_never_signalled(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("WORKBENCH_STATE_DIR", str(tmp_path))
    bystander = _bystander()
    try:
        _write_record(tmp_path, "9001", _record(bystander.pid, 9001))  # no pid_started_at
        handle = server.load_server(tmp_path / "9001")
        assert handle is not None and not handle.is_alive()
        assert handle.stop(timeout=1).stage is StopStage.ALREADY_GONE
        code, out, _ = _cli(capsys, "stop")
        assert code == 1 and "No server started by the workbench is running" in out
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()


def test_a_record_naming_a_dead_pid_and_a_live_group_is_never_signalled(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("WORKBENCH_STATE_DIR", str(tmp_path))
    bystander = _bystander()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    try:
        record = _record(dead.pid, 9002, pgid=bystander.pid, pid_started_at=1.0)
        _write_record(tmp_path, "9002", record)
        code, _, err = _cli(capsys, "stop")
        assert code == 1
        assert "9002" in err and "skipped" in err  # pgid != pid: not a record the workbench writes
        assert bystander.poll() is None
        # A matching pgid but a start time of some other process: not ours either.
        live = _record(bystander.pid, 9003, pid_started_at=1.0)
        _write_record(tmp_path, "9003", live)
        assert _cli(capsys, "stop")[0] == 1
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()


# ── corrupt or hostile records are reported and skipped ─────────────────────


@pytest.mark.parametrize("record", [
    [1, 2, 3],
    "just a string",
    {"mode": "local", "served_model": "m", "started_at": 1.0},  # no port
    {"mode": "local", "port": 9100, "served_model": "m", "started_at": 1.0, "status": "exploded"},
    {"mode": "local", "port": "9100", "served_model": "m", "started_at": 1.0},
    {"mode": "teleport", "port": 9100, "served_model": "m", "started_at": 1.0},
    {"mode": "local", "port": 99999, "served_model": "m", "started_at": 1.0},
    {"mode": "local", "port": 9100, "served_model": ["m"], "started_at": 1.0},
    {"mode": "local", "port": 9100, "served_model": "m", "started_at": "yesterday"},
    {"mode": "local", "port": 9100, "served_model": "m", "started_at": 1.0, "pid": -5, "pgid": -5},
    {"mode": "local", "port": 9100, "served_model": "m", "started_at": 1.0, "phases": [{"phase": "warp"}]},
    {"mode": "local", "port": 9100, "served_model": "m", "started_at": 1.0, "diagnosis": {"x": 1}},
    {"mode": "local", "port": 9100, "served_model": "m", "started_at": 1.0, "argv": "vllm serve"},
])
def test_a_corrupt_record_is_reported_and_skipped(tmp_path, capsys, monkeypatch, record):
    monkeypatch.setenv("WORKBENCH_STATE_DIR", str(tmp_path))
    _write_record(tmp_path, "9100", record)
    (tmp_path / "9101").mkdir()
    (tmp_path / "9101" / "state.json").write_bytes(b"\xff\xfe{not json")
    handles, problems = scan_records(tmp_path)
    assert handles == [] and sorted(p.folder.name for p in problems) == ["9100", "9101"]
    for argv in (["status"], ["status", "--json"], ["status", "--log", "5"], ["stop"], ["stop", "--port", "9100"]):
        code, out, err = _cli(capsys, *argv)
        assert code == 1, argv
        assert "skipped" in err and "9100" in err and "Traceback" not in err
    code, _, err = _cli(capsys, "chat", "hi")
    assert code == 2 and "No server URL given" in err


def test_status_log_reads_only_the_servers_own_log(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("WORKBENCH_STATE_DIR", str(tmp_path))
    secret = tmp_path / "elsewhere.txt"
    secret.write_text("PRIVATE LINE\n")
    _write_record(tmp_path, "9200", _record(None, 9200, status="stopped", log_path=str(secret)))
    _write_record(tmp_path, "9201", _record(None, 9201, status="stopped", log_path="../elsewhere.txt"))
    code, out, err = _cli(capsys, "status", "--log", "10")
    assert "PRIVATE LINE" not in out + err
    assert "9200" in err and "9201" in err and "outside" in err


# ── keys never shown; private files ─────────────────────────────────────────


def test_api_keys_are_redacted_and_files_are_private(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("WORKBENCH_STATE_DIR", str(tmp_path))
    key = "sk-test-do-not-show-0123456789"
    handle = _child(tmp_path, free_port(), env={"VLLM_API_KEY": key}, api_key=key)
    try:
        _wait_for_line(handle, "grandchild")
        with handle.log_path.open("a") as log:  # what a server might print about its arguments
            log.write(f"args: --api-key {key} and api_key='{key}'\n")
        tail = handle.log_tail(40)
        # The line is there, its key hidden both ways it was written (an empty tail would hide nothing).
        assert "args: --api-key *** and api_key='***'" in tail
        assert all(key not in line for line in tail)
        assert any("--api-key ***" in line for line in handle.log_tail(40))
        code, out, err = _cli(capsys, "status", "--json", "--log", "40")
        assert key not in out + err
        code, out, err = _cli(capsys, "status", "--log", "40")
        assert key not in out + err and "--api-key ***" in out
        record = json.loads(_cli(capsys, "status", "--json")[1])[0]
        assert record["api_key"] == "***" and record["env"]["VLLM_API_KEY"] == "***"
        for path in (handle.state_path, handle.log_path):
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
        for folder in (handle.state_dir, tmp_path):
            assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
    finally:
        handle.stop(timeout=5)


def test_prepare_moves_the_api_key_out_of_argv(monkeypatch):
    from workbench.recipes import Selection, load_catalog, render
    from workbench.server.command import prepare

    plan = render(Selection(hardware="cpu", extra=["--api-key sk-abc --enforce-eager"]), load_catalog())
    monkeypatch.setattr("workbench.server.command.build_local", lambda name, progress: Path("/nonexistent"))
    command = prepare(plan, mode="local", python=sys.executable)
    assert "--api-key" not in command.argv and "sk-abc" not in " ".join(command.argv)
    assert command.env["VLLM_API_KEY"] == "sk-abc" and command.api_key == "sk-abc"
    assert "--enforce-eager" in command.argv


# ── numbers and hosts are checked before anything starts ────────────────────


@pytest.mark.parametrize("port", [-1, 0, 70000])
def test_a_port_out_of_range_is_refused(tmp_path, port):
    command = ServeCommand("local", [sys.executable, "-c", "pass"], port, "m")
    with pytest.raises(InputError, match="1-65535"):
        server.start(command, state_dir=tmp_path, stop_at_exit=False)
    assert not (tmp_path / str(port)).exists()


def test_a_host_that_cannot_be_bound_is_not_called_a_busy_port(tmp_path):
    command = ServeCommand("local", [sys.executable, "-c", "pass"], free_port(), "m", host="nosuch.invalid")
    with pytest.raises(InputError) as err:
        server.start(command, state_dir=tmp_path, stop_at_exit=False)
    assert "nosuch.invalid" in err.value.message and "already in use" not in err.value.message


def test_an_orphaned_group_is_cleaned_when_its_leader_dies(tmp_path):
    handle = _child(tmp_path, free_port(), "--ignore-term")
    grandchild = _wait_for_line(handle, "grandchild")
    os.kill(handle.pid, signal.SIGKILL)  # the leader only, as an OOM kill would
    deadline = time.monotonic() + 20
    while (_alive(grandchild) or handle.supervised) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(grandchild)
    assert handle.status is Status.FAILED and handle.diagnosis.cause == "killed"


@pytest.mark.parametrize("value", [":", "admin:", ":secret", " :secret"])
def test_an_auth_with_an_empty_half_is_refused(value, capsys):
    from workbench.cli import main

    assert main(["ui", "--auth", value]) == 2
    err = capsys.readouterr().err
    assert "needs both a user name and a password" in err and "On the command line: --auth." in err
    assert "Traceback" not in err


def test_threads_saving_one_record_at_once_never_fail_or_tear_it(tmp_path):
    # The watcher thread and the caller (a stop, a status) save the same record;
    # CI once lost a save to a shared temporary file name.
    path = tmp_path / "state.json"
    errors: list[BaseException] = []

    def save(n: int) -> None:
        for i in range(200):
            try:
                write_json(path, {"writer": n, "i": i, "pad": "x" * 2000})
            except BaseException as exc:  # reported by the assertion below
                errors.append(exc)

    threads = [threading.Thread(target=save, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    record = read_json(path)
    assert record is not None and record["i"] == 199
    assert list(tmp_path.iterdir()) == [path]

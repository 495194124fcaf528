"""A workbench ended by SIGTERM (a `kill`, a service stop) or SIGHUP (its terminal closed)
stops the vLLM server it launched, as Ctrl-C does: on a Spark the next launch must not
meet the memory still held. One real CPU server, started by `serve` and ended by SIGTERM;
the web UI's own exit on each signal."""

from __future__ import annotations

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

REPO = Path(__file__).resolve().parent.parent


def _group_alive(pgid: int) -> list[int]:
    return ProcessGroup(pgid).members()


@pytest.mark.vllm
def test_serve_ended_by_sigterm_stops_its_server(tmp_path):
    port = free_port()
    env = {**os.environ, "WORKBENCH_STATE_DIR": str(tmp_path)}
    cli = subprocess.Popen([sys.executable, "-m", "workbench", "serve", "--hardware", "cpu", "--port", str(port)],
                           cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           start_new_session=True)
    try:
        lines = []
        for line in cli.stdout:
            lines.append(line)
            if line.startswith("Serving until Ctrl-C"):
                break
        else:
            pytest.fail("".join(lines[-30:]))
        assert httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200
        (record,) = [p for p in tmp_path.iterdir() if (p / "state.json").is_file()]
        import json

        pid = json.loads((record / "state.json").read_text())["pid"]
        assert _group_alive(pid)
        os.kill(cli.pid, signal.SIGTERM)
        assert cli.wait(60) == 128 + signal.SIGTERM
        assert _group_alive(pid) == []  # vLLM's API server, engine core and workers: all gone
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"http://127.0.0.1:{port}/health", timeout=2)
    finally:
        if cli.poll() is None:
            os.killpg(cli.pid, signal.SIGKILL)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_the_web_ui_exits_on_a_signal(tmp_path, signum):
    port = free_port()
    env = {**os.environ, "WORKBENCH_STATE_DIR": str(tmp_path)}
    ui = subprocess.Popen([sys.executable, "-m", "workbench", "--port", str(port)], cwd=REPO, env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.5)
        else:
            pytest.fail("the UI did not come up")
        os.kill(ui.pid, signum)
        # SystemExit(128 + signal): the atexit handlers that stop launched servers run.
        assert ui.wait(30) == 128 + signum
    finally:
        if ui.poll() is None:
            os.killpg(ui.pid, signal.SIGKILL)

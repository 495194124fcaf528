"""`python -m workbench notebooks`: the token stays off argv, JupyterLab asks the internet
nothing, and SIGTERM or SIGHUP stops JupyterLab and leaves nothing running."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest

from workbench.cli.notebooks import jupyter_lab_argv
from workbench.server.process import ProcessGroup
from workbench.server import free_port

REPO = Path(__file__).resolve().parent.parent


def _group_alive(pgid: int) -> list[int]:
    return ProcessGroup(pgid).members()


def _children(pid: int) -> list[int]:
    try:
        return [child.pid for child in psutil.Process(pid).children()]
    except psutil.Error:
        return []


def test_the_token_is_not_on_argv_and_news_is_off():
    argv = jupyter_lab_argv(Path("/nb"), 8899)
    assert not any("token" in a.lower() for a in argv)
    assert "--LabApp.news_url=None" in argv
    assert "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate" in argv
    # DNS rebinding: only loopback names are answered (said explicitly, not left to a default).
    assert "--ServerApp.allow_remote_access=False" in argv and "--ServerApp.local_hostnames=localhost" in argv


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_stops_jupyterlab(tmp_path, signum):
    port = free_port()
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(tmp_path / "config"), "JUPYTER_RUNTIME_DIR": str(tmp_path / "rt"),
           "JUPYTER_DATA_DIR": str(tmp_path / "data"), "WORKBENCH_STATE_DIR": str(tmp_path / "state")}
    cli = subprocess.Popen([sys.executable, "-m", "workbench", "notebooks", "--port", str(port)], cwd=REPO, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        url = cli.stdout.readline() and cli.stdout.readline().strip()  # "JupyterLab on ...", then "Open: URL"
        assert url.startswith("Open: http://127.0.0.1:"), url
        token = url.split("token=", 1)[1]
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/api/status", params={"token": token}, timeout=2).is_success:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        else:
            pytest.fail("JupyterLab did not answer")
        (lab,) = _children(cli.pid)
        cmdline = Path(f"/proc/{lab}/cmdline").read_bytes().decode()
        assert token not in cmdline  # `ps` cannot show it
        assert f"JUPYTER_TOKEN={token}".encode() in Path(f"/proc/{lab}/environ").read_bytes()
        # The lab's settings default: no news prompt (the user's own settings still win).
        settings = httpx.get(f"http://127.0.0.1:{port}/lab/api/settings/@jupyterlab/apputils-extension:notification",
                             params={"token": token}, timeout=10).json()
        assert settings["schema"]["properties"]["fetchNews"]["default"] == "false", json.dumps(settings)[:300]
        # A page whose name rebinds to 127.0.0.1 is refused, even with the token.
        rebound = httpx.get(f"http://127.0.0.1:{port}/api/status", params={"token": token},
                            headers={"Host": f"rebind.attacker.example:{port}"}, timeout=10)
        assert rebound.status_code == 403
        assert httpx.get(f"http://127.0.0.1:{port}/api/status", params={"token": token},
                         headers={"Host": f"localhost:{port}"}, timeout=10).is_success
        os.kill(cli.pid, signum)
        assert cli.wait(40) == 128 + signum
        deadline = time.monotonic() + 10
        while _group_alive(lab) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _group_alive(lab) == []
    finally:
        if cli.poll() is None:
            os.killpg(cli.pid, signal.SIGKILL)

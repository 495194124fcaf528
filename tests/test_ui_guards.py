"""The single-user UI (`python -m workbench`, a real process) against DNS rebinding and
password guessing: it answers only its own host names, and wrong --auth logins slow down
while the right password still gets in."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from workbench.server import free_port

REPO = Path(__file__).resolve().parent.parent
PASSWORD = "a-long-secret-1"


@pytest.fixture(scope="module")
def ui(tmp_path_factory):
    state = tmp_path_factory.mktemp("ui-guards")
    port = free_port()
    env = {**os.environ, "WORKBENCH_STATE_DIR": str(state), "HF_HUB_OFFLINE": "1", "WORKBENCH_AUTH": f"admin:{PASSWORD}"}
    log = open(state / "stderr.txt", "w")
    proc = subprocess.Popen([sys.executable, "-m", "workbench", "--port", str(port)], cwd=REPO, env=env,
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/", timeout=2).status_code in (200, 302, 401):
                break
        except httpx.HTTPError:
            time.sleep(0.5)
    else:
        proc.kill()
        pytest.fail((state / "stderr.txt").read_text()[-3000:])
    yield url, port
    proc.terminate()
    proc.wait(30)
    log.close()


def test_only_its_own_host_names_are_answered(ui):
    url, port = ui
    for host in (f"rebind.attacker.example:{port}", "evil.example", f"192.0.2.1:{port}"):
        r = httpx.get(url + "/config", headers={"Host": host})
        assert r.status_code == 421, host
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"):
        assert httpx.get(url + "/", headers={"Host": host}).status_code != 421, host


def test_uploads_are_size_limited(ui):
    url, _ = ui
    login = httpx.post(url + "/login", data={"username": "admin", "password": PASSWORD})
    assert login.status_code == 200
    small = httpx.post(url + "/gradio_api/upload", files={"files": ("chat.json", b"{}")}, cookies=login.cookies)
    assert small.status_code == 200
    big = httpx.post(url + "/gradio_api/upload", files={"files": ("big.bin", b"\0" * (21 * 1024 * 1024))},
                     cookies=login.cookies, timeout=60)
    assert big.status_code == 413


def test_wrong_auth_logins_slow_down_and_the_right_one_gets_in(ui):
    url, _ = ui
    started = time.monotonic()
    statuses = [httpx.post(url + "/login", data={"username": "admin", "password": f"guess-{i}"}, timeout=60).status_code
                for i in range(8)]
    assert statuses == [400] * 8 and time.monotonic() - started >= 3.0
    assert httpx.post(url + "/login", data={"username": "admin", "password": PASSWORD}, timeout=60).status_code == 200

"""The single-user UI (`python -m workbench`, a real process) against DNS rebinding and
password guessing: it answers only its own host names, and wrong --auth logins past the free
ones are refused at once until the back-off ends, while the right password then gets in."""

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


def test_wrong_auth_logins_are_refused_at_once_and_the_right_one_gets_in_after_the_wait(ui):
    url, _ = ui
    login_page = httpx.get(url + "/", headers={"Accept": "text/html"}).text
    assert 'id="workbench-login-wait"' in login_page  # the login page shows a wait
    answers = []
    for i in range(8):
        started = time.monotonic()
        r = httpx.post(url + "/login", data={"username": "admin", "password": f"guess-{i}"}, timeout=10)
        answers.append((r.status_code, time.monotonic() - started, r.headers.get("retry-after")))
    statuses = [status for status, _, _ in answers]
    assert statuses[:6] == [400] * 5 + [429] and set(statuses) == {400, 429}, answers  # 5 free, then a back-off
    assert all(took < 1.0 for _, took, _ in answers), answers
    early = httpx.post(url + "/login", data={"username": "admin", "password": PASSWORD})
    assert early.status_code == 429  # the right password too soon: refused unchecked
    wait = int(early.headers["retry-after"])
    assert 1 <= wait <= 4  # 1 s after the 5th wrong one, 2 s after a 6th ...
    time.sleep(wait)
    assert httpx.post(url + "/login", data={"username": "admin", "password": PASSWORD}).status_code == 200

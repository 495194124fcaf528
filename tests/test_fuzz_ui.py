"""Fuzz the web UI's public API: every named endpoint of the running app, called through
gradio_client with hostile values of each parameter's type. The app is a real
`python -m workbench` process; what it prints is read afterwards: zero tracebacks.

(The server controls are not public API; test_workshop.py checks they cannot be called.)
"""

from __future__ import annotations

import itertools
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from workbench.server import free_port

REPO = Path(__file__).resolve().parent.parent

TEXT = ["", " ", "\x00", "é\u202e", "x" * 20000, "--host 0.0.0.0 --trust-remote-code", "--foo 'x", "nosuch",
        "-1", "1e999", "nan", "http://[::1", "http://999.1.1.1", "127.0.0.1:1", "{}", "ttft:abc", "ttft:-5 tpot",
        "1,2,,3", "0", "99999999999999999999", "../../etc/passwd", "<script>alert(1)</script>"]
NUMBERS = [None, -1, 0, 10**18, -10**18, 1.5, 1e308, -1e308, "abc", [], {}]
JUNK = [None, [], {}, "text", 5, [{"role": "system"}], [{"content": 1}], {"display": "x", "conversation": []},
        {"display": [{"role": "bot", "content": 3}], "conversation": {"format": "workbench-conversation/1",
                                                                      "messages": [{"role": "user", "content": 5}]}},
        [[1, 2]], True]


def values_for(kind: str) -> list:
    if kind == "str":
        return TEXT
    if kind in ("int", "float"):
        return NUMBERS
    if kind == "bool":
        return [None, "yes", 2, True, False]
    if kind.startswith("Literal"):
        return ["", "nosuch", None, 7, "h200", "cpu"]
    return JUNK + TEXT[:4]


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    state = tmp_path_factory.mktemp("ui-fuzz")
    port = free_port()
    env = {**os.environ, "WORKBENCH_STATE_DIR": str(state), "HF_HUB_OFFLINE": "1"}
    err = open(state / "stderr.txt", "w")
    proc = subprocess.Popen([sys.executable, "-m", "workbench", "--port", str(port)], cwd=REPO, env=env,
                            stdout=err, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.5)
    else:
        proc.kill()
        pytest.fail((state / "stderr.txt").read_text()[-3000:])
    yield url, state / "stderr.txt"
    proc.terminate()
    proc.wait(30)
    err.close()


def test_every_public_endpoint_survives_hostile_values(app):
    from gradio_client import Client

    url, log = app
    client = Client(url, verbose=False)
    api = client.view_api(return_format="dict", print_info=False)
    endpoints = api["named_endpoints"]
    assert "/send_fn" in endpoints and "/run_fn" in endpoints and len(endpoints) > 20
    assert not any(name in endpoints for name in ("/do_launch", "/do_stop", "/do_attach"))
    # The Experiment tab: its plan preview is public (starts nothing); its run launches servers, so it is not.
    assert "/preview_plan" in endpoints and "/run_experiment_fn" not in endpoints
    rng = random.Random(14)
    calls = refused = 0
    for name, endpoint in sorted(endpoints.items()):
        kinds = [p["python_type"]["type"] for p in endpoint["parameters"]]
        cases = [[values_for(k)[i % len(values_for(k))] for k in kinds] for i in range(6)] if kinds else [[]]
        cases += [[rng.choice(values_for(k)) for k in kinds] for _ in range(6 if kinds else 0)]
        for args in cases:
            calls += 1
            try:
                job = client.submit(*args, api_name=name)
                job.result(timeout=60)
            except TimeoutError:
                pytest.fail(f"{name}{tuple(args)!r:.200} did not answer in 60 s")
            except Exception as exc:  # Gradio's own refusal of a value, or a gr.Error: both are messages
                refused += 1
                assert "Traceback" not in str(exc), f"{name}: {exc}"
    assert calls > 200 and refused > 0
    ours = raised_in_workbench(log.read_text())
    assert ours == [], "\n\n".join(ours[:8])


def raised_in_workbench(printed: str) -> list[str]:
    """The tracebacks printed that pass through the workbench's own code.

    Gradio prints a traceback for each value it refuses before a handler runs (a choice
    not in a dropdown, None for a slider, a chat history of the wrong shape): no browser
    sends those, the caller gets Gradio's error, and no workbench code ran. Those are not
    counted, nor the workbench's own gr.Error messages; any other traceback with a frame in
    workbench/ is."""
    package = str(REPO / "workbench") + os.sep
    found = []
    for block in printed.split("Traceback (most recent call last):")[1:]:
        frames = [line for line in block.splitlines() if line.strip().startswith("File ")]
        said = next((line for line in block.splitlines()[1:] if line and not line[0].isspace()), "")
        if said.startswith("gradio.exceptions.Error:"):
            continue  # a gr.Error: the message the page shows (Gradio prints its traceback too)
        if any(package in frame for frame in frames):
            found.append(block.strip()[:3000])
    return found

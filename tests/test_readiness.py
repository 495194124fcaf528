"""Waiting for a server, with a way out: `wait_ready(timeout, stop=...)` returns the server when it is
ready, and otherwise raises NotReady whose outcome says which end it was (failed with the diagnosis,
timed out saying how long it waited, stopped) -- a type to branch on, not a message to read.

The servers here are real processes started by the workbench's own launcher: the tests' fixed-rate
server (ready), a child that never answers HTTP (timed out, stopped), and one that prints vLLM 0.32's
own argparse error and exits (failed). No vLLM is needed."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import pytest

from tests.helpers.fixed_rate_server import MODEL
from workbench.errors import LaunchError
from workbench.server import ServeCommand, Status, free_port, start
from workbench.server.readiness import NotReady, ReadyOutcome

CHILD = Path(__file__).parent / "helpers" / "misbehaving_child.py"
# What vLLM 0.32's argparse prints for a flag it does not know (tests/fixtures/launch-logs/), then exit 2.
REJECTED = ("import sys; print('vllm serve: error: unrecognized arguments: --no-such-flag', file=sys.stderr); "
            "sys.exit(2)")


def _never_ready(state_dir: Path):
    return start(ServeCommand("local", [sys.executable, str(CHILD)], free_port(), "no-model"), state_dir=state_dir)


def test_a_ready_server_is_returned(tmp_path: Path) -> None:
    port = free_port()
    handle = start(ServeCommand("local", [sys.executable, "-m", "tests.helpers.fixed_rate_server", "--port", str(port)],
                                port, MODEL), state_dir=tmp_path)
    try:
        assert handle.wait_ready(30, stop=lambda: False) is handle
        assert handle.status is Status.READY
    finally:
        handle.stop()


def test_a_timeout_says_how_long_it_waited_and_the_server_still_runs(tmp_path: Path) -> None:
    handle = _never_ready(tmp_path)
    try:
        time.sleep(1.0)  # it has been starting for a while before this wait
        with pytest.raises(NotReady) as err:
            handle.wait_ready(3)
        assert err.value.outcome is ReadyOutcome.TIMED_OUT and 3.0 <= err.value.waited_s < 4.5
        assert "is not ready after 3 s of waiting" in err.value.message
        assert "since it started" in err.value.message and "still running" in (err.value.hint or "")
        assert handle.is_alive() and handle.status is Status.STARTING
    finally:
        handle.stop()


def test_a_wait_can_be_stopped_and_leaves_the_server_to_the_caller(tmp_path: Path) -> None:
    handle = _never_ready(tmp_path)
    asked = threading.Event()
    threading.Timer(1.0, asked.set).start()
    began = time.monotonic()
    try:
        with pytest.raises(NotReady) as err:
            handle.wait_ready(600, stop=asked.is_set)
        assert time.monotonic() - began < 3.0  # asked twice a second, not after the 600 s
        assert err.value.outcome is ReadyOutcome.STOPPED and err.value.diagnosis is None
        assert "Stopped waiting" in err.value.message and handle.is_alive()
    finally:
        handle.stop()


def test_a_failed_start_carries_its_diagnosis(tmp_path: Path) -> None:
    handle = start(ServeCommand("local", [sys.executable, "-c", REJECTED], free_port(), "no-model"), state_dir=tmp_path)
    with pytest.raises(NotReady) as err:
        handle.wait_ready(30)
    assert err.value.outcome is ReadyOutcome.FAILED
    assert err.value.diagnosis is not None and err.value.diagnosis.cause == "unrecognized_argument"
    assert err.value.diagnosis == handle.diagnosis and "--no-such-flag" in err.value.message


def test_a_server_stopped_while_waited_for_is_stopped_not_failed(tmp_path: Path) -> None:
    handle = _never_ready(tmp_path)
    threading.Timer(1.0, handle.stop).start()
    with pytest.raises(NotReady) as err:
        handle.wait_ready(30)
    assert err.value.outcome is ReadyOutcome.STOPPED and handle.status is Status.STOPPED
    assert isinstance(err.value, LaunchError)  # callers that catch LaunchError still do

"""How an experiment records what went wrong, each configuration on its own: a launch that fails
keeps its own diagnosis (never the previous configuration's), a start that outlasts the startup
timeout says how long it was waited for, a Stop while a server starts ends the experiment at once,
and a server that dies during a warm-up cuts that configuration, not the experiment.

The servers are real processes started by the workbench's launcher (the plan's `vllm serve` is
swapped for a child that never answers, or one that prints vLLM 0.32's own argparse error), and
the tests' fixed-rate server; no vLLM is needed."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.fixed_rate_server import FixedRateServer
from workbench import server
from workbench.errors import LaunchError
from workbench.experiment import ExperimentSettings, builtin_workload, new_experiment, run_experiment
from workbench.experiment.configs import ExperimentConfig
from workbench.recipes import Selection, load_catalog
from workbench.server import ServeCommand, ServerProcess, list_servers, start

CHILD = Path(__file__).parent / "helpers" / "misbehaving_child.py"
REJECTED = ("import sys; print('vllm serve: error: unrecognized arguments: --no-such-flag', file=sys.stderr); "
            "sys.exit(2)")


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


def _experiment(labels: list[str], **settings: Any):
    configs = [ExperimentConfig(label, Selection(hardware="cpu")) for label in labels]
    return new_experiment(configs, ExperimentSettings(concurrency=[1], requests_per_level=2, output_tokens=8,
                                                      **settings), builtin_workload())


def _launch_with(monkeypatch: pytest.MonkeyPatch, *children: list[str] | LaunchError) -> None:
    """server.launch, as the experiment calls it, runs these in turn instead of vllm serve
    (a LaunchError is raised before anything starts, as a busy port or a missing vllm is)."""
    queue = list(children)

    def launch(plan: Any, *, port: int, state_dir: Any = None, **_: Any) -> ServerProcess:
        child = queue.pop(0)
        if isinstance(child, LaunchError):
            raise child
        return start(ServeCommand("local", [sys.executable, *child], port, "no-model"), state_dir=state_dir)

    monkeypatch.setattr(server, "launch", launch)


def test_each_failed_launch_keeps_its_own_diagnosis(catalog, monkeypatch, tmp_path):
    refused = LaunchError("Could not start vllm serve on port 1 (vllm): no such file",
                          hint="Check the path, or install vLLM in this environment.")
    _launch_with(monkeypatch, ["-c", REJECTED], refused)
    result = run_experiment(_experiment(["first", "second"]), tmp_path / "out", catalog, state_dir=tmp_path / "s")
    first, second = result.configs
    assert (first.status, second.status) == ("failed", "failed")
    assert first.diagnosis["cause"] == "unrecognized_argument" and "--no-such-flag" in first.diagnosis["summary"]
    # The second never started: its diagnosis is its own error, nothing of the first's.
    assert second.diagnosis == {"summary": refused.message, "fix": refused.hint}


def test_a_start_past_the_timeout_says_how_long_it_was_waited_for(catalog, monkeypatch, tmp_path):
    _launch_with(monkeypatch, [str(CHILD)])
    result = run_experiment(_experiment(["slow"], startup_timeout_s=5), tmp_path / "out", catalog,
                            state_dir=tmp_path / "s")
    [slow] = result.configs
    assert slow.status == "failed" and "is not ready after 5 s of waiting" in slow.diagnosis["summary"]
    assert not [s for s in list_servers(tmp_path / "s") if s.is_alive()]  # it was stopped


def test_stop_while_a_server_starts_ends_the_experiment_at_once(catalog, monkeypatch, tmp_path):
    _launch_with(monkeypatch, [str(CHILD)], [str(CHILD)])
    asked = threading.Event()
    threading.Timer(1.0, asked.set).start()
    began = time.monotonic()
    result = run_experiment(_experiment(["a", "b"]), tmp_path / "out", catalog, state_dir=tmp_path / "s",
                            should_stop=asked.is_set)
    assert time.monotonic() - began < 15
    assert result.status == "partial" and "stopped by the user while the server started" in result.partial
    assert [c.status for c in result.configs] == ["partial", "pending"]
    assert not [s for s in list_servers(tmp_path / "s") if s.is_alive()]


def test_a_server_gone_during_the_warm_up_cuts_that_configuration_not_the_experiment(catalog, tmp_path):
    # The first chat request (a warm-up) kills the server mid-answer; the next finds nothing listening.
    with FixedRateServer(prefill_rate=0, decode_rate=200, fault="die", fault_every=1).in_subprocess() as url:
        experiment = _experiment(["attached", "again"], attach_url=url, warmup_requests=2)
        result = run_experiment(experiment, tmp_path / "out", catalog, state_dir=tmp_path / "s")
    first, second = result.configs
    assert first.status == "partial" and "the server stopped accepting connections" in first.note
    assert second.status == "failed" and "Nothing answers" in second.diagnosis["summary"]
    assert result.status == "done" and result.partial is None

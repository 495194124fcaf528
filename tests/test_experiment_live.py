"""Experiments against the real vLLM CPU build: launch, sweep, compare; a failed launch; Ctrl-C; resume.

Each configuration is a real `vllm serve` the experiment starts and stops itself (on a
port of its own, beside the session's demo server). A configuration with a flag vLLM
does not know is a real failed launch: vLLM refuses it and the experiment goes on.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from workbench.experiment import (
    ExperimentSettings,
    builtin_workload,
    configs_from_specs,
    load_experiment,
    new_experiment,
    parse_config_text,
    run_experiment,
)
from workbench.recipes import Selection, load_catalog
from workbench.server import free_port, port_free

pytestmark = pytest.mark.vllm
ROOT = Path(__file__).resolve().parent.parent


def test_off_a_broken_flag_and_ngram(demo_model_dir: Path, tmp_path: Path) -> None:
    catalog = load_catalog()
    base = Selection(hardware="cpu")
    off, ngram = configs_from_specs("off,ngram", base, catalog)
    broken = parse_config_text("broken:off:--no-such-flag 3", base, catalog)
    settings = ExperimentSettings(concurrency=[1, 2], requests_per_level=5, output_tokens=48, warmup_requests=1)
    experiment = new_experiment([off, broken, ngram], settings, builtin_workload())
    seen = []
    port = free_port()
    result = run_experiment(experiment, tmp_path / "exp", catalog, progress=seen.append,
                            state_dir=tmp_path / "state", port=port)

    assert result.status == "done"
    assert [c.status for c in result.configs] == ["done", "failed", "done"]
    failed = result.configs[1]
    assert failed.diagnosis and "--no-such-flag" in json.dumps(failed.diagnosis)
    assert not failed.levels and "--no-such-flag 3" in (failed.command or "")
    assert port_free("127.0.0.1", port), "the last server was not stopped"

    # ngram beats no speculative decoding on per-user decode at concurrency 1 (prompts that repeat their input).
    per_user = {w.concurrency: w.label for w in result.winners() if w.metric == "decode_per_user_tps"}
    assert per_user[1] == "ngram"
    for level in result.configs[2].figures():
        # From the responses (vLLM's per-request metrics) and from /metrics: the same acceptance.
        assert level.acceptance_rate is not None and level.acceptance_rate_metrics is not None
        assert level.acceptance_agreement is not None and level.acceptance_agreement <= 0.05
        assert level.acceptance_by_category  # per category, from the responses
        assert level.acceptance_by_position_metrics and len(level.acceptance_by_position_metrics) == 4
    ngram_cmd = result.configs[2].command or ""
    assert "--per-request-spec-decode-metrics summary" in ngram_cmd and '"method":"ngram"' in ngram_cmd
    assert [c.server.get("vllm_version") for c in result.configs if c.status == "done"] == ["0.32.0"] * 2

    summary = json.loads((tmp_path / "exp" / "experiment.json").read_text())
    assert [c["label"] for c in summary["configs"]] == ["off", "broken", "ngram"]
    assert summary["configs"][1]["status"] == "failed"
    assert "acceptance_rate_metrics" in summary["configs"][2]["levels"][0]
    assert (tmp_path / "exp" / "report.html").read_text().count("<svg") >= 3
    phases = {(p.config, p.phase) for p in seen}
    assert {("off", "launching"), ("broken", "failed"), ("ngram", "running")} <= phases
    assert any(p.eta_s is not None and p.concurrency == 2 for p in seen)


def _state(folder: Path) -> dict | None:
    try:
        return json.loads((folder / "state.json").read_text())
    except (OSError, ValueError):
        return None


def test_ctrl_c_stops_the_server_and_resume_finishes(demo_model_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "exp"
    port = free_port()
    argv = [sys.executable, "-m", "workbench", "experiment", "--hardware", "cpu", "--spec", "off",
            "--concurrency", "1,2", "--requests", "3", "--osl", "64", "--output-dir", str(out),
            "--port", str(port), "--quiet", "--quality", "off"]
    env_state = {"WORKBENCH_STATE_DIR": str(tmp_path / "state")}
    import os

    child = subprocess.Popen(argv, cwd=ROOT, env={**os.environ, **env_state}, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and child.poll() is None:
        state = _state(out)
        if state and state["configs"][0]["levels"]:
            break  # level 1 written: interrupt level 2
        time.sleep(0.1)
    assert child.poll() is None, child.communicate()
    child.send_signal(signal.SIGINT)
    stdout, stderr = child.communicate(timeout=120)
    assert child.returncode == 130, stderr
    assert "PARTIAL" in stderr and f"--resume {out}" in stderr
    assert port_free("127.0.0.1", port), "Ctrl-C left the server running"
    partial = load_experiment(out)
    assert partial.status == "partial" and partial.configs[0].status == "partial"
    kept = [r for r in partial.configs[0].levels if r.partial is None]
    assert [r.config.concurrency for r in kept] == [1]
    first_started = kept[0].started_at

    done = subprocess.run([sys.executable, "-m", "workbench", "experiment", "--resume", str(out), "--quiet"],
                          cwd=ROOT, env={**os.environ, **env_state}, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    final = load_experiment(out)
    assert final.status == "done" and final.configs[0].status == "done"
    assert [(r.config.concurrency, r.partial) for r in final.configs[0].levels] == [(1, None), (2, None)]
    assert final.configs[0].levels[0].started_at == first_started  # level 1 was kept, not run again
    assert "off" in done.stdout and port_free("127.0.0.1", port)

"""Experiments against the real vLLM CPU build: launch, sweep, compare; a failed launch; Ctrl-C; resume.

Each configuration is a real `vllm serve` the experiment starts and stops itself (on a
port of its own, beside the session's demo server). A configuration with a flag vLLM
does not know is a real failed launch: vLLM refuses it and the experiment goes on.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.session_fixtures import SharedExperiment
from workbench.experiment import ExperimentResult, load_experiment
from workbench.experiment.slo_report import format_slo
from workbench.server import free_port, port_free

pytestmark = pytest.mark.vllm
ROOT = Path(__file__).resolve().parent.parent


def test_off_a_broken_flag_and_ngram(off_broken_ngram_experiment: SharedExperiment) -> None:
    # The session's off / broken / ngram experiment (tests/helpers/session_fixtures.py), also read by
    # test_quality_live.py: concurrency 1 and 2, 5 requests of 48 tokens per level.
    result, folder = off_broken_ngram_experiment.result, off_broken_ngram_experiment.folder
    seen, port = off_broken_ngram_experiment.seen, off_broken_ngram_experiment.port

    assert result.status == "done"
    assert [c.status for c in result.configs] == ["done", "failed", "done"]
    failed = result.configs[1]
    assert failed.diagnosis and "--no-such-flag" in json.dumps(failed.diagnosis)
    assert not failed.levels and "--no-such-flag 3" in (failed.command or "")
    assert port_free("127.0.0.1", port), "the last server was not stopped"

    for level in result.configs[2].figures():
        # From the responses (vLLM's per-request metrics) and from /metrics: the same acceptance.
        assert level.acceptance_rate is not None and level.acceptance_rate_metrics is not None
        assert level.acceptance_agreement is not None and level.acceptance_agreement <= 0.05
        assert level.acceptance_by_category  # per category, from the responses
        assert level.acceptance_by_position_metrics and len(level.acceptance_by_position_metrics) == 4
    ngram_cmd = result.configs[2].command or ""
    assert "--per-request-spec-decode-metrics summary" in ngram_cmd and '"method":"ngram"' in ngram_cmd
    assert [c.server.get("vllm_version") for c in result.configs if c.status == "done"] == ["0.32.0"] * 2

    summary = json.loads((folder / "experiment.json").read_text())
    assert [c["label"] for c in summary["configs"]] == ["off", "broken", "ngram"]
    # The winner on per-user decode at each level is the faster as measured: on this shared 2-core CPU the
    # drafter's work competes for the same cores, and ngram is often slower than off.
    per_user = {w.concurrency: w.label for w in result.winners() if w.metric == "decode_per_user_tps"}
    decode = {(c["label"], lv["concurrency"]): lv["decode_per_user_tps"]
              for c in summary["configs"] for lv in c["levels"]}
    assert per_user == {n: max(("off", "ngram"), key=lambda label: decode[(label, n)]) for n in (1, 2)}
    _check_slo_answer(result, summary)
    assert summary["configs"][1]["status"] == "failed"
    assert "acceptance_rate_metrics" in summary["configs"][2]["levels"][0]
    assert (folder / "report.html").read_text().count("<svg") >= 3
    phases = {(p.config, p.phase) for p in seen}
    assert {("off", "launching"), ("broken", "failed"), ("ngram", "running")} <= phases
    assert any(p.eta_s is not None and p.concurrency == 2 for p in seen)


SENTENCE = re.compile(r"^  (off|ngram) (serves (at least )?(\d+) users? within the SLO"
                      r"|misses the SLO at concurrency 1)")


def _check_slo_answer(result: ExperimentResult, summary: dict) -> None:
    """The SLO search after the sweep, on the same servers: each capacity said plainly, met at its level and
    missed (or the bound) above it, and the winner the larger capacity (which one depends on the machine's load)."""
    lines = (format_slo(result) or "").splitlines()  # what `experiment --slo` prints first
    assert lines and lines[0].startswith("SLO: TPOT p90 <= 120 ms; the search goes by concurrency 1 to 2"), lines
    said = {m.group(1): m for m in (SENTENCE.match(line) for line in lines[1:3]) if m}
    assert sorted(said) == ["ngram", "off"], lines[:4]
    slo = summary["slo"]
    capacities = {c["label"]: c for c in slo["capacities"]}
    assert sorted(capacities) == ["ngram", "off"]  # the failed launch has no capacity
    for label, capacity in capacities.items():
        probes = slo["probes"][label]
        assert probes and probes[0]["concurrency"] == 1 and capacity["finished"]
        by_level = {p["concurrency"]: p for p in probes if p["verdict"] != "partial"}
        assert all(p["reused"] for p in probes)  # the sweep's levels, not run again
        if capacity["level"] is None:
            assert by_level[1]["verdict"] == "missed" and "misses" in said[label].group(2)
            continue
        assert by_level[capacity["level"]]["verdict"] == "met" and float(said[label].group(4)) == capacity["level"]
        if capacity["above"] is not None:
            assert by_level[capacity["above"]]["verdict"] in ("missed", "failed", "client-bound")
        else:
            assert capacity["level"] == 2 and said[label].group(3)  # "at least 2": met at the bound
    levels = {label: c["level"] or 0 for label, c in capacities.items()}
    if levels["off"] == levels["ngram"]:
        assert slo["winner"] is None and lines[3].startswith(("No winner", "No configuration met"))
    else:
        winner = max(levels, key=lambda label: levels[label])
        assert slo["winner"] == winner and lines[3].startswith(f"Winner: {winner}")
    assert "Probes, in the order run" in lines[5]


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

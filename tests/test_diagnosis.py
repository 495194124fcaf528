"""Failure diagnosis on logs captured from real failing `vllm serve` runs (vLLM 0.32.0 CPU).

Each file in tests/fixtures/launch-logs/ is the unedited output of one launch;
its README says how it was produced.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from workbench.server.diagnosis import Diagnosis, diagnose

LOGS = Path(__file__).parent / "fixtures" / "launch-logs"


def _diagnose(name: str, exit_code: int | None = 1) -> Diagnosis:
    return diagnose((LOGS / name).read_text(errors="replace"), exit_code=exit_code)


@pytest.mark.parametrize(
    ("log", "cause", "in_summary", "in_fix"),
    [
        ("bad_flag.log", "unrecognized_argument", "--no-such-flag", "--help=all"),
        ("invalid_choice.log", "invalid_argument", "'float17'", "--dtype"),
        ("port_in_use.log", "address_in_use", "port", "another port for the server"),
        ("missing_dir.log", "model_not_found", "/models/does-not-exist", "demo-model"),
        ("offline_repo.log", "model_not_cached", "HF_HUB_OFFLINE=1", "hf download"),
        ("hub_unreachable.log", "hub_unreachable", "huggingface.co", "hf download"),
        ("fastokens_missing.log", "missing_dependency", "fastokens", 'pip install "fastokens>=0.2.0"'),
        ("cpu_kv_memory_short.log", "out_of_memory", "5.17 of 10.09 GiB", "VLLM_CPU_KVCACHE_SPACE"),
        ("gguf_quantization_config.log", "invalid_config", "GGUF", "quantization_config"),
        ("engine_killed.log", "engine_died", "engine", "dmesg"),
    ],
)
def test_real_failure_logs_are_diagnosed_with_the_fix(log, cause, in_summary, in_fix):
    d = _diagnose(log)
    assert d.cause == cause
    assert in_summary in d.summary
    assert in_fix in d.fix
    assert d.evidence and d.evidence in (LOGS / log).read_text(errors="replace")
    assert d.exit_code == 1
    assert d.log_tail == (LOGS / log).read_text(errors="replace").splitlines()[-40:]


def test_bad_flag_names_the_flag_to_remove():
    d = _diagnose("bad_flag.log", exit_code=2)
    assert d.fix.startswith("Remove or correct --no-such-flag")


def test_invalid_choice_lists_what_vllm_accepts():
    d = _diagnose("invalid_choice.log", exit_code=2)
    assert "'auto', 'bfloat16', 'float', 'float16', 'float32', 'half'" in d.summary


def test_engine_death_prefers_the_root_cause_over_engine_dead_error():
    # The kv-memory log also ends in "Engine core initialization failed": the
    # earlier, specific error must win.
    text = (LOGS / "cpu_kv_memory_short.log").read_text(errors="replace")
    assert "Engine core initialization failed" in text
    assert diagnose(text, exit_code=1).cause == "out_of_memory"


def test_a_clean_start_log_cut_by_sigkill_is_diagnosed_as_killed():
    # A server killed from outside leaves a log with no error in it; the exit
    # status (Popen's -9) tells the story.
    d = _diagnose("startup_cpu_smollm2.log", exit_code=-9)
    assert d.cause == "killed"
    assert "SIGKILL" in d.summary


def test_an_unrecognised_failure_shows_the_last_log_lines():
    d = _diagnose("startup_cpu_smollm2.log", exit_code=1)
    assert d.cause == "unknown"
    assert "exit code 1" in d.summary
    assert d.log_tail[-1].endswith('"GET /health HTTP/1.1" 200 OK')
    assert "Last log lines:" in d.describe()


def test_diagnosis_round_trips_through_its_dict():
    d = _diagnose("bad_flag.log")
    assert Diagnosis.from_dict(d.to_dict()) == d

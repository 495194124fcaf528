"""The GPU suite's harness (tests/gpu/harness.py) run against vLLM's CPU build, so CI tries every
step the GPU machine runs: `serve --keep` through the CLI, its phases, the KV line, the
process tree, a flag vLLM rejects, and `stop` leaving nothing behind. And the suite itself
skips, with its reason, where there is no GPU."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.gpu.harness import (
    Report, alive, find_server, kv_tokens, parse_phases, process_tree, serve_cli, stop_cli, wait_for, workbench,
)
from workbench.server import free_port

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.vllm


def test_the_gpu_suite_skips_with_its_reason_here() -> None:
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-m", "gpu", "-rs", "-q",
                           "tests/gpu"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:]
    assert "no CUDA GPU: no NVIDIA GPU" in done.stdout
    assert " passed" not in done.stdout and "skipped" in done.stdout


def test_phase_lines_as_serve_prints_them() -> None:
    text = (ROOT / "tests/fixtures/vllm-0.26.0-cuda-h100/workbench_serve_phases.txt").read_text()
    assert [p.name for p in parse_phases(text)] == ["started", "loading_weights", "http_up", "ready"]


def test_serve_through_the_cli_then_stop(tmp_path: Path, demo_model_dir: Path) -> None:
    report = Report(tmp_path / "report")
    served = serve_cli("--recipe", "smollm2", port=free_port(), state_dir=tmp_path)
    report.section("serve", served.transcript())
    try:
        assert served.returncode == 0, served.stderr[-2000:]
        assert served.handle is not None and served.handle.plan is not None
        assert served.handle.plan["hardware"] == "cpu"  # this machine's, detected
        names = [p.name for p in served.phases]
        assert names[0] == "started" and names[-1] == "ready" and "kv_cache" in names
        assert kv_tokens(served.log_text) > 0
        tree = process_tree(served.handle.pid or 0)
        assert served.handle.pid in tree and len(tree) >= 2  # the API server and its engine core
        rejected = workbench("serve", "--recipe", "smollm2", "--server-port", str(free_port()), "--timeout", "120",
                             "--keep", "--extra", "--no-such-flag 1", state_dir=tmp_path, timeout=180)
        assert rejected.returncode == 2 and "does not know the argument(s) --no-such-flag" in rejected.stderr
    finally:
        done = stop_cli(served.port, tmp_path)
    assert done.returncode == 0, done.stderr
    assert wait_for(lambda: not any(alive(p) for p in tree), timeout=30)
    assert find_server(tmp_path, served.port) is not None  # the record stays, stopped, with its log
    assert "## serve" in report.path.read_text()

"""The benchmark against a real vLLM (CPU build) serving SmolLM2-135M-Instruct."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from workbench.bench import BenchConfig, load_result, run_benchmark

pytestmark = pytest.mark.vllm
ROOT = Path(__file__).resolve().parent.parent


def test_exact_input_lengths_and_client_tokens_equal_the_server_counters(demo_server) -> None:
    config = BenchConfig(url=demo_server.base_url, input_tokens=200, output_tokens=16, concurrency=2,
                         requests=4, warmup_requests=1)
    result = run_benchmark(config)
    s = result.summary
    assert result.model == demo_server.model
    assert (s.succeeded, s.errors) == (4, 0)
    # The server's own usage says every prompt was exactly 200 chat-formatted tokens.
    assert [r.prompt_tokens for r in result.records] == [200] * 4
    assert [r.completion_tokens for r in result.records] == [16] * 4
    assert result.input_length_mismatches == 0
    # continuous_usage_stats: vLLM streams one token per chunk on this engine.
    assert all(r.first_chunk_tokens == 1 for r in result.records)
    assert all(r.event_kinds.count("c") == 16 for r in result.records)
    # The server's counters moved by exactly what the client counted (warm-up excluded).
    counters = result.server_counters
    assert counters.prompt_tokens == s.input_tokens == 800
    assert counters.generation_tokens == s.output_tokens == 64
    assert counters.spec_drafts in (None, 0)  # no speculative decoding on this server
    for r in result.records:
        assert 0 < r.ttft_ns < r.e2e_ns <= r.end_ns - r.start_ns


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "workbench", "bench", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)


def test_smoke_preset_from_the_command_line(demo_server, artifacts_dir: Path) -> None:
    out = artifacts_dir / "bench-smoke"
    done = run_cli("--url", demo_server.base_url, "--preset", "smoke", "--output-dir", str(out))
    assert done.returncode == 0, done.stderr
    # The progress bar is on stderr, the summary on stdout.
    assert "running    [############################] 8/8" in done.stderr
    assert "requests 8   succeeded 8   errors 0" in done.stdout
    assert "tokens (server usage): input 1,024   output 256" in done.stdout
    assert "prompt tokens 1,024   generation tokens 256" in done.stdout
    assert "TPOT (per token)" in done.stdout and "ITL (per chunk)" in done.stdout
    result = load_result(out / "bench.json")
    assert result.summary.succeeded == 8 and result.config.preset == "smoke"
    assert len((out / "bench-requests.csv").read_text().splitlines()) == 9
    summary_rows = (out / "bench-summary.csv").read_text()
    assert "ttft_ms" in summary_rows and "server_generation_tokens" in summary_rows
    (artifacts_dir / "bench-smoke-stdout.txt").write_text(done.stdout)

    compared = subprocess.run([sys.executable, "-m", "workbench", "bench", "compare", str(out / "bench.json"),
                               str(out / "bench.json")], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert compared.returncode == 0 and "output tok/s" in compared.stdout


def test_speed_bench_on_the_cpu_engine_says_it_does_not_fit_and_offers_2048(demo_server) -> None:
    done = run_cli("--url", demo_server.base_url, "--preset", "speed-bench", "--quiet")
    assert done.returncode == 2
    assert "does not fit this server's max-model-len of 4096" in done.stderr
    # The command again with the input it fits: what the user copies.
    assert (f"On the command line: python -m workbench bench --url {demo_server.base_url} --preset speed-bench "
            "--quiet --isl 2048") in done.stderr
    assert "Traceback" not in done.stderr


def test_scaled_speed_bench_shows_the_model_card_beside_it(demo_server, artifacts_dir: Path) -> None:
    out = artifacts_dir / "bench-speed-2048"
    done = run_cli("--url", demo_server.base_url, "--preset", "speed-bench", "--isl", "2048", "--osl", "256",
                   "--requests", "1", "--warmup", "0", "--output-dir", str(out), "--quiet")
    assert done.returncode == 0, done.stderr
    assert "NOT measured here" in done.stdout and "NVIDIA DGX Spark (GB10)" in done.stdout
    data = json.loads((out / "bench.json").read_text())
    assert data["records"][0]["prompt_tokens"] == 2048
    assert data["reference"]["notes"][1] == "This run used 2048 input tokens, the DGX Spark reference 8192."

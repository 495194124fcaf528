"""Results are never lost: a bad stream fails one request, a bad counter read only itself,
an interrupted run is written as partial, and nothing already saved is overwritten."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.helpers.fixed_rate_server import FixedRateServer
from workbench.bench import BenchConfig, load_result, preset_config, run_benchmark
from workbench.errors import WorkbenchError

ROOT = Path(__file__).resolve().parent.parent


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "workbench", "bench", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.parametrize(("fault", "message"), [
    ("bad-sse", "an SSE event is not JSON"),
    ("wrong-shape", "a chunk of the wrong shape (`choices` is not a list)"),
    ("http-500", "HTTP 500: "),
])
def test_a_broken_stream_fails_that_request_only(fault: str, message: str) -> None:
    # Chat requests 3, 6, 9 misbehave (the first is the warm-up).
    with FixedRateServer(prefill_rate=0, decode_rate=400, fault=fault, fault_every=3) as server:
        result = run_benchmark(BenchConfig(url=server.base_url, input_tokens=30, output_tokens=8, concurrency=2,
                                           requests=9, warmup_requests=1))
    s = result.summary
    assert (s.requests, s.succeeded, s.errors) == (9, 6, 3)
    assert len(s.error_messages) == 1 and s.error_messages[0].startswith(message), s.error_messages
    assert result.partial is None and s.output_tokens == 6 * 8


def test_bad_metrics_loses_only_the_counters() -> None:
    with FixedRateServer(prefill_rate=0, decode_rate=400, fault="bad-metrics") as server:
        result = run_benchmark(BenchConfig(url=server.base_url, input_tokens=30, output_tokens=8, requests=3))
    assert result.summary.succeeded == 3 and result.server_counters is None
    assert "no vllm: metrics" in result.counters_problem


def test_bad_model_list_is_a_clear_message_and_model_overrides_it(tmp_path: Path) -> None:
    server = FixedRateServer(prefill_rate=0, decode_rate=400, fault="bad-models")
    with server.in_subprocess() as url:
        done = cli("--url", url, "--isl", "30", "--osl", "4", "--requests", "2", "--quiet",
                   "--output-dir", str(tmp_path / "a"))
        assert done.returncode == 2 and "Traceback" not in done.stderr
        assert "not an OpenAI model list" in done.stderr and "--model" in done.stderr
        done = cli("--url", url, "--model", "fixed-rate", "--isl", "30", "--osl", "4", "--requests", "2",
                   "--quiet", "--output-dir", str(tmp_path / "b"))
    assert done.returncode == 0, done.stderr
    assert "note: /v1/models was not usable" in done.stdout


def test_server_dying_mid_run_writes_a_partial_result(tmp_path: Path) -> None:
    server = FixedRateServer(prefill_rate=0, decode_rate=200, fault="die", fault_every=5)
    with server.in_subprocess() as url:
        done = cli("--url", url, "--isl", "30", "--osl", "20", "--concurrency", "1", "--requests", "10",
                   "--quiet", "--output-dir", str(tmp_path))
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "PARTIAL" in done.stdout and "the server stopped accepting connections" in done.stdout
    result = load_result(tmp_path / "bench.json")
    assert result.partial.startswith("the server stopped accepting connections")
    # The warm-up and three measured requests finished; the fifth died with the server.
    assert result.summary.succeeded == 3 and result.summary.errors >= 1


def test_ctrl_c_writes_what_was_measured(tmp_path: Path) -> None:
    server = FixedRateServer(prefill_rate=0, decode_rate=40, mode="one")
    with server.in_subprocess() as url:
        child = subprocess.Popen([sys.executable, "-m", "workbench", "bench", "--url", url, "--isl", "30",
                                  "--osl", "20", "--concurrency", "2", "--requests", "40", "--quiet",
                                  "--output-dir", str(tmp_path)], cwd=ROOT, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while len(httpx.get(f"{url}/timings").json()) < 5 and time.monotonic() < deadline:
            time.sleep(0.1)
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=60)
    assert child.returncode == 130, err
    assert "Traceback" not in err and "PARTIAL" in out
    data = json.loads((tmp_path / "bench.json").read_text())
    assert data["partial"].startswith("interrupted")
    assert 4 <= data["summary"]["succeeded"] < 40 and data["summary"]["errors"] == 0


def test_output_dir_is_checked_first_and_nothing_is_overwritten(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with FixedRateServer(prefill_rate=0, decode_rate=400) as server:
        done = cli("--url", server.base_url, "--output-dir", str(blocker), "--quiet")
        assert done.returncode == 2 and "is a file, not a folder" in done.stderr
        assert server.timings == []  # nothing was sent
        out = tmp_path / "results"
        for _ in range(2):
            done = cli("--url", server.base_url, "--isl", "30", "--osl", "4", "--requests", "2", "--quiet",
                       "--output-dir", str(out))
            assert done.returncode == 0, done.stderr
    first = (out / "bench.json").read_text()
    assert (out / "bench-2.json").is_file() and (out / "bench-2-figures.html").is_file()
    assert json.loads(first)["records"] != json.loads((out / "bench-2.json").read_text())["records"]


def test_custom_shape_is_not_called_a_preset() -> None:
    assert preset_config("smoke", url="http://x").shape_label == "preset smoke"
    assert preset_config("smoke", url="http://x", input_tokens=64).shape_label.startswith("custom shape")


def test_no_tokenize_counts_with_the_models_tokenizer(demo_model_dir: Path) -> None:
    server = FixedRateServer(prefill_rate=0, decode_rate=400, tokenize=False, tokenizer=str(demo_model_dir))
    with server.in_subprocess() as url:
        assert httpx.post(f"{url}/tokenize", json={}).status_code == 404
        with pytest.raises(WorkbenchError) as info:
            run_benchmark(BenchConfig(url=url, input_tokens=100, output_tokens=4, requests=2))
        assert "has no /tokenize" in info.value.message and "tokenizer folder" in info.value.hint
        assert "tokenizer" in info.value.settings
        result = run_benchmark(BenchConfig(url=url, input_tokens=100, output_tokens=4, concurrency=2, requests=4,
                                           tokenizer=str(demo_model_dir)))
    # The server counted with the same tokenizer's chat template: every prompt exactly 100.
    assert [r.prompt_tokens for r in result.records] == [100] * 4
    assert result.input_length_mismatches == 0 and "the model's tokenizer" in result.input_lengths_from

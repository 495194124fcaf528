"""A benchmark records the GPUs beside the server over its measured window (mean utilization,
power, peak memory, energy, tokens per joule), against the fixed-rate server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.fixed_rate_server import FixedRateServer
from workbench.bench import BenchConfig, run_benchmark
from workbench.bench.report import format_result
from workbench.bench.results import BenchResult
from workbench.telemetry import source as telemetry_source
from workbench.telemetry.nvml import NvmlUnavailable, RecordedSeries

RECORDING = json.loads((Path(__file__).parent / "fixtures" / "nvidia-h200-telemetry" / "nvml-recording.json")
                       .read_text())


def _run(duration_s: float = 1.0) -> BenchResult:
    with FixedRateServer(prefill_rate=0, decode_rate=400) as server:
        config = BenchConfig(url=server.base_url, input_tokens=30, output_tokens=8, concurrency=2,
                             requests=None, duration_s=duration_s, warmup_requests=0)
        return run_benchmark(config)


def test_with_the_h200_recording_replayed_a_run_gets_its_gpu_figures_and_tokens_per_joule(monkeypatch, tmp_path):
    # NVML answers as the H200 did under the matmul load (the real library is swapped for its replay).
    monkeypatch.setattr(telemetry_source, "PynvmlApi", lambda: RecordedSeries(RECORDING["phases"]["load"][-8:]))
    result = _run()
    gpu = result.gpu
    assert gpu is not None and gpu.source == "nvml" and len(gpu.gpus) == 1
    span = gpu.gpus[0]
    assert span.samples >= 3 and span.mean_utilization_pct == 100 and span.name == "NVIDIA H200"
    assert 600 < gpu.mean_power_w <= 700
    # energy is power integrated over the window: between the lowest and highest power times its length
    length = gpu.end - gpu.start
    assert 600 * (length - 1.0) < gpu.energy_j < 700 * length
    assert result.tokens_per_joule == pytest.approx(result.summary.output_tokens / gpu.energy_j)
    assert "GPU: 1 GPU (nvml), mean utilization 100 %" in format_result(result)
    assert "output tokens per joule" in format_result(result)
    from workbench.notebook.bench_view import bench_table

    assert "GPU: 1 GPU (nvml), mean utilization 100 %" in bench_table(result)
    again = BenchResult.from_dict(json.loads(json.dumps(result.to_dict())))
    assert again.gpu == gpu and again.tokens_per_joule == result.tokens_per_joule
    paths = result.save(tmp_path)
    summary_csv = paths["summary_csv"].read_text()
    assert "tokens_per_joule" in summary_csv and "gpu_power_w_mean" in summary_csv


def test_without_a_gpu_the_run_says_so(monkeypatch):
    def no_nvml():
        raise NvmlUnavailable("NVML did not start: NVML Shared Library Not Found")

    monkeypatch.setattr(telemetry_source, "PynvmlApi", no_nvml)
    monkeypatch.setattr(telemetry_source.shutil, "which", lambda name: None)
    result = _run(0.5)
    assert result.gpu is not None and result.gpu.source == "none" and not result.gpu.gpus
    assert result.tokens_per_joule is None
    assert "GPU: no NVIDIA GPU (NVML did not start" in format_result(result)
    from workbench.notebook.bench_view import bench_table

    assert "GPU: no NVIDIA GPU (NVML did not start" in bench_table(result)
    row = result.to_dict()
    assert row["gpu"]["source"] == "none" and row["tokens_per_joule"] is None

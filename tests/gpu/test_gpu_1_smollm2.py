"""SmolLM2 on the GPU with CUDA graphs, launched as a user launches it: `serve --recipe smollm2`.

Detection, the start-up phases, the planner against vLLM's KV line, NVML beside the
engine, a benchmark at 1, 16 and 64 streams against the server's own counters, two
failures diagnosed (a second server with no GPU memory left, a flag this vLLM lacks), and
the stop: processes gone, GPU memory released.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.gpu.harness import (
    Report, Served, alive, find_server, gpu_memory_used_gib, kv_tokens, process_tree, read_gpus, readings_jsonl, serve_cli,
    stop_cli, wait_for, workbench,
)
from workbench.bench import BenchConfig, run_benchmark
from workbench.demo.models import DEMO_MODEL_NAME, cache_dir
from workbench.planner import planner_vs_log
from workbench.server import free_port
from workbench.server.hardware import Detection
from workbench.server.phases import PHASE_ORDER
from workbench.telemetry import GpuReading

pytestmark = pytest.mark.gpu


def test_detection_names_the_gpu(gpu_machine: Detection, report: Report) -> None:
    report.section("Detection", f"hardware {gpu_machine.hardware_id} from {gpu_machine.source}: "
                   f"{gpu_machine.reason}; {gpu_machine.memory_gb:.1f} GB per GPU")
    assert gpu_machine.source == "nvml"
    assert gpu_machine.hardware_id in ("h100", "h200")
    assert gpu_machine.gpus[0].compute_cap == "9.0"


@pytest.fixture(scope="module")
def smollm2(gpu_machine: Detection, gpu_state_dir: Path, report: Report) -> Iterator[Served]:
    served = serve_cli("--recipe", "smollm2", port=free_port(), state_dir=gpu_state_dir)
    report.section("serve --recipe smollm2 (CUDA graphs)", served.transcript())
    if served.handle is not None:
        report.keep("smollm2_cudagraphs.log", served.log_text)
    assert served.returncode == 0 and served.handle is not None, served.stderr[-3000:]
    yield served
    stop_cli(served.port, gpu_state_dir)


def test_smollm2_runs_on_the_detected_gpu_with_cuda_graphs(smollm2: Served, gpu_machine: Detection) -> None:
    assert smollm2.handle is not None
    plan = smollm2.handle.plan or {}
    assert plan["hardware"] == gpu_machine.hardware_id
    assert "--enforce-eager" not in smollm2.handle.argv
    assert "VLLM_CPU_KVCACHE_SPACE" not in plan["env"]
    names = [p.name for p in smollm2.phases]
    assert names == sorted(set(names), key=[p.value for p in PHASE_ORDER].index), names
    assert {"loading_weights", "compiling", "kv_cache", "capturing_graphs", "http_up", "ready"} <= set(names)


def test_planner_equals_vllms_kv_line_smollm2(smollm2: Served, gpu_machine: Detection, report: Report) -> None:
    comparison = planner_vs_log(smollm2.log_text, model_dir=cache_dir() / DEMO_MODEL_NAME,
                                hardware=gpu_machine.hardware_id)
    report.section("Planner vs vLLM: SmolLM2, CUDA graphs", comparison.describe())
    report.keep("planner_smollm2.json", _json(comparison.to_dict()))
    assert comparison.tokens_pct is not None and abs(comparison.tokens_pct) <= 2.0
    assert abs(comparison.tokens_from_estimate.diff_pct or 100.0) <= 2.0
    assert comparison.tokens_from_estimate.vllm == kv_tokens(smollm2.log_text)


def test_telemetry_beside_the_engine_agrees_with_the_server(smollm2: Served, report: Report) -> None:
    assert smollm2.handle is not None
    reading = read_gpus()
    ours = process_tree(smollm2.handle.pid or 0)
    listed = {p.pid for p in reading.gpus[0].processes or ()}
    held = sum(p.used_memory_bytes or 0 for p in reading.gpus[0].processes or () if p.pid in ours) / 2**30
    report.section("NVML beside the engine", f"memory used {gpu_memory_used_gib(reading)[0]:.2f} GiB; "
                   f"processes {sorted(listed)}; the server's tree {sorted(ours)}; held by it {held:.2f} GiB")
    report.keep("nvml_beside_smollm2.json", _json(reading.to_dict()))
    assert listed & ours, "NVML lists none of the server's processes"
    # vLLM takes --gpu-memory-utilization 0.9 of the GPU: NVML's memory in use says the same.
    total = (reading.gpus[0].memory_total_bytes or 1) / 2**30
    assert gpu_memory_used_gib(reading)[0] >= 0.85 * total
    if held:
        assert held >= 0.8 * total


def test_benchmark_at_1_16_64_streams_counts_what_the_server_counts(smollm2: Served, report: Report) -> None:
    assert smollm2.handle is not None
    lines, samples = [], []
    for concurrency in (1, 16, 64):
        config = BenchConfig(url=smollm2.handle.base_url, input_tokens=256, output_tokens=64,
                             concurrency=concurrency, requests=2 * concurrency, warmup_requests=2,
                             label=f"smollm2-graphs @ {concurrency}")
        result = run_benchmark(config)
        samples.append(read_gpus())
        s, counters = result.summary, result.server_counters
        lines.append(f"c={concurrency:<3} requests {s.succeeded}/{2 * concurrency}  TTFT p50 "
                     f"{_f(s.ttft_ms.p50)} ms  TPOT p50 {_f(s.tpot_ms.p50, 2)} ms  decode/user "
                     f"{_f(s.decode_tok_s_per_user.mean, 0)} tok/s  output {_f(s.output_tok_s, 0)} tok/s  "
                     f"client tokens {s.input_tokens}/{s.output_tokens}  server {counters.prompt_tokens}/"
                     f"{counters.generation_tokens}")
        report.keep(f"bench_smollm2_c{concurrency}.json", _json(result.to_dict()))
        assert (s.succeeded, s.errors) == (2 * concurrency, 0)
        assert counters.prompt_tokens == s.input_tokens
        assert counters.generation_tokens == s.output_tokens == 64 * 2 * concurrency
    report.section("Benchmark, SmolLM2 with CUDA graphs", "\n".join(lines))
    report.keep("nvml_during_bench.jsonl", readings_jsonl(samples))
    report.keep("metrics_after_bench.prom", httpx.get(f"{smollm2.handle.base_url}/metrics", timeout=10).text)


def test_a_second_server_without_gpu_memory_is_diagnosed(smollm2: Served, gpu_state_dir: Path,
                                                          report: Report) -> None:
    port = free_port()
    done = workbench("serve", "--recipe", "smollm2", "--server-port", str(port), "--timeout", "240", "--keep",
                     state_dir=gpu_state_dir, timeout=300)
    if done.returncode == 0:  # it started after all: stop it before saying so
        stop_cli(port, gpu_state_dir)
    report.section("A second server while the first holds the GPU", done.stdout[-1500:] + done.stderr[-2500:])
    second = find_server(gpu_state_dir, port)
    if second is not None:
        report.keep("vllm_serve_second_server_no_memory.log", second.log_text())
    assert done.returncode != 0
    assert "Another process holds the GPU's memory" in done.stderr
    assert "--gpu-memory-utilization below" in done.stderr


def test_a_flag_this_vllm_lacks_is_diagnosed_with_the_versions(gpu_state_dir: Path, report: Report,
                                                                 smollm2: Served) -> None:
    port = free_port()
    done = workbench("serve", "--recipe", "smollm2", "--server-port", str(port), "--timeout", "120",
                     "--extra", "--mamba-ssu-algorithm horizontal", state_dir=gpu_state_dir, timeout=180)
    report.section("A flag vLLM 0.26.0 does not know", done.stderr[-2000:])
    assert done.returncode != 0
    assert "does not know the argument(s) --mamba-ssu-algorithm" in done.stderr


def test_stop_leaves_no_process_and_frees_the_gpu(smollm2: Served, gpu_state_dir: Path, report: Report) -> None:
    assert smollm2.handle is not None
    tree = process_tree(smollm2.handle.pid or 0)
    before = read_gpus()
    done = stop_cli(smollm2.port, gpu_state_dir)
    assert done.returncode == 0, done.stderr
    gone = wait_for(lambda: not any(alive(pid) for pid in tree), timeout=30)
    after: list[GpuReading] = []
    freed = wait_for(lambda: after.append(read_gpus()) or gpu_memory_used_gib(after[-1])[0] < 1.0, timeout=60)
    report.section("Stop", f"{done.stdout.strip()}\nprocesses {sorted(tree)} gone: {gone}\n"
                   f"GPU memory in use: {gpu_memory_used_gib(before)[0]:.2f} GiB before, "
                   f"{gpu_memory_used_gib(after[-1])[0]:.2f} GiB after; processes listed after: "
                   f"{[p.pid for p in after[-1].gpus[0].processes or ()]}")
    assert gone and freed


def _json(data: object) -> str:
    return json.dumps(data, indent=1, default=str)


def _f(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"

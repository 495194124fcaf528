"""What a CUDA vLLM printed on a real H100, replayed: the workbench reads it as it reads the CPU build.

The recordings are vLLM 0.26.0's on an H100 80GB (tests/fixtures/vllm-0.26.0-cuda-h100/,
README there): start-up phases from its log, failures diagnosed with the change to make,
NVML beside the engine, /metrics after a benchmark, and an experiment's crossover.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from workbench.experiment.analysis import Crossover, CrossoverVerdict
from workbench.metrics.parse import parse_metrics, sum_named
from workbench.recipes import Selection, load_catalog, render
from workbench.recipes.rehearsal import MachineFacts
from workbench.server.diagnosis import diagnose, known_issues_for_plan
from workbench.server.phases import PhaseDetector
from workbench.telemetry import GpuReading, format_gpu_table

H100 = Path(__file__).parent / "fixtures" / "vllm-0.26.0-cuda-h100"
SR = "stochastic-rounding-triton-needs-sm100"


def _phases(name: str) -> list[tuple[str, str]]:
    detector = PhaseDetector()
    out = []
    for line in (H100 / name).read_text().splitlines():
        out += [(phase.value, detail) for phase, detail, progress in detector.feed(line) if progress is None]
    return out


def test_eager_start_phases_in_order() -> None:
    phases = [p for p, _ in _phases("vllm_serve_smollm2_ngram_eager.excerpt.log")]
    assert [p for i, p in enumerate(phases) if p not in phases[:i]] == [
        "started", "loading_weights", "kv_cache", "http_up"]
    assert ("kv_cache", "GPU KV cache: 3,303,760 tokens") in _phases("vllm_serve_smollm2_ngram_eager.excerpt.log")


def test_a_hybrid_start_with_cuda_graphs_shows_compiling_the_mamba_warmup_and_the_capture() -> None:
    phases = _phases("vllm_serve_tiny_nemotronh_moe.excerpt.log")
    order = [p for i, (p, _) in enumerate(phases) if p not in [q for q, _ in phases[:i]]]
    assert order == ["started", "loading_weights", "compiling", "kv_cache", "capturing_graphs", "http_up"]
    assert ("compiling", "kernel warm-up took 54.70 s") in phases


def test_the_fast_ssm_cache_on_hopper_is_named_with_its_change() -> None:
    plan = render(Selection(hardware="h100", rehearsal=True, machine=MachineFacts("0.26.0"),
                            ignore_known_issues=[SR]), load_catalog())
    log = (H100 / "vllm_serve_stochastic_rounding_sm90_ptxas.log").read_text()
    d = diagnose(log, exit_code=1, known_issues=known_issues_for_plan(plan.to_dict()))
    assert d.known_issue is not None and d.known_issue["id"] == SR
    assert d.summary.startswith("Stochastic rounding of the FP16 Mamba cache fails")
    assert "Feature '.rs' not supported on .target 'sm_90a'" in d.evidence
    assert "--mamba-backend flashinfer" in d.fix and "float32" in d.fix
    # Without the plan, the recipe's entries still name it (a server started elsewhere).
    plain = render(Selection(hardware="h100"), load_catalog())
    assert diagnose(log, exit_code=1, known_issues=known_issues_for_plan(plain.to_dict())).known_issue["id"] == SR


def test_a_flag_older_vllm_lacks_says_both_versions() -> None:
    log = (H100 / "vllm_serve_seed_flags_0.26.log").read_text()
    d = diagnose(log, exit_code=2, installed_vllm="0.26.0", min_vllm="0.27.1")
    assert d.cause == "unrecognized_argument" and "--mamba-ssu-algorithm" in d.summary
    assert "This is vLLM 0.26.0; the recipe asks for vLLM >= 0.27.1." in d.summary
    assert d.fix.startswith("Upgrade vLLM to 0.27.1 or later")
    same = diagnose(log, exit_code=2, installed_vllm="0.28.0", min_vllm="0.27.1")
    assert "Upgrade" not in same.fix and "(This is vLLM 0.28.0.)" in same.fix


def test_nvml_beside_the_engine_reads_as_the_live_view() -> None:
    readings = [GpuReading.from_dict(json.loads(line))
                for line in (H100 / "nvml_beside_vllm.jsonl").read_text().splitlines()]
    idle = GpuReading.from_dict(json.loads((H100 / "nvml_idle.json").read_text()))
    assert idle.gpus[0].memory_used_bytes == 0 and idle.gpus[0].throttle_reasons == ("gpu_idle",)
    busy = readings[0].gpus[0]
    assert busy.name == "NVIDIA H100 80GB HBM3" and busy.compute_capability == "9.0"
    assert 92 < (busy.memory_used_pct or 0) < 93  # vLLM's 0.9 of the GPU, and the CUDA context
    assert busy.processes is None  # recorded before the workbench read NVML's process list
    assert "NVIDIA H100 80GB HBM3" in format_gpu_table(readings[0])


def test_metrics_after_a_benchmark_on_the_gpu() -> None:
    snapshot = parse_metrics((H100 / "metrics_after_bench.prom").read_text())
    assert (sum_named(snapshot.counters, "vllm:generation_tokens_total") or 0) > 128 * 128
    assert (sum_named(snapshot.counters, "vllm:prompt_tokens_total") or 0) > 128 * 512


def test_crossovers_measured_on_the_h100() -> None:
    def crossover(name: str) -> Crossover:
        (x,) = json.loads((H100 / name).read_text())["crossovers"]
        return Crossover(x["label"], x["baseline"], [tuple(p) for p in x["speedups"]],
                         [tuple(p) for p in x["throughput_ratios"]], x["stops_paying_at"])

    graphs = crossover("experiment_off_vs_ngram_cudagraphs.json")
    assert graphs.verdict is CrossoverVerdict.NEVER_PAYS
    assert graphs.summary.startswith("graphs-ngram never pays at the levels measured (concurrency 1 to 64)")
    eager = crossover("experiment_off_vs_ngram_eager.json")
    assert eager.verdict is CrossoverVerdict.AHEAD and "lead shrinks from 1.73x" in eager.summary


# ── this project's own GPU suite run (scripts/gpu_suite.sh smollm2 on an H100; README there) ─────


def test_the_suites_cuda_graph_start_phases_in_order() -> None:
    phases = _phases("vllm_serve_smollm2_cudagraphs.log")
    order = [p for i, (p, _) in enumerate(phases) if p not in [q for q, _ in phases[:i]]]
    assert order == ["started", "loading_weights", "compiling", "kv_cache", "capturing_graphs", "http_up"]
    assert ("kv_cache", "GPU KV cache: 3,364,192 tokens") in phases


def test_nvml_beside_the_engine_names_the_process_holding_the_memory() -> None:
    reading = GpuReading.from_dict(json.loads((H100 / "nvml_beside_smollm2_with_processes.json").read_text()))
    gpu = reading.gpus[0]
    assert gpu.name == "NVIDIA H100 80GB HBM3" and gpu.compute_capability == "9.0"
    assert [p.pid for p in gpu.processes] == [971]  # the engine core (the log's EngineCore pid=971)
    held = sum(p.used_memory_bytes for p in gpu.processes)
    assert gpu.memory_used_bytes - held < 16 << 20  # all but a few MiB of what is used is the engine's


def test_the_counters_after_the_suites_benchmark_are_what_the_client_counted() -> None:
    # 1, 16 and 64 streams: 2 + 32 + 128 measured requests of 256 prompt and 64 output tokens; the server
    # counted those and the benchmark's warm-up requests (the same shape), nothing else
    counters = parse_metrics((H100 / "metrics_after_bench_cudagraphs.prom").read_text()).counters
    report = (H100 / "gpu_suite_report_smollm2.md").read_text()
    client_out = sum(int(n) for n in re.findall(r"client tokens \d+/(\d+)", report))
    client_in = sum(int(n) for n in re.findall(r"client tokens (\d+)/\d+", report))
    assert client_out == 128 + 2048 + 8192 and client_in == 512 + 8192 + 32768
    warmup_out = (sum_named(counters, "vllm:generation_tokens_total") or 0) - client_out
    warmup_in = (sum_named(counters, "vllm:prompt_tokens_total") or 0) - client_in
    assert warmup_out > 0 and warmup_out / 64 == warmup_in / 256 == int(warmup_out / 64)

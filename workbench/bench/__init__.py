"""Benchmark a running vLLM server, with aiperf's definitions.

    config.py   BenchConfig, presets, shape checks, the model card's reference figures
    prompts.py  prompts of an exact chat-formatted length (the server's /tokenize)
    client.py   one streamed request timed event by event; /v1/models, /metrics around a run
    records.py  RequestRecord: raw nanoseconds and usage, per-request figures
    summary.py  the run's summary and the definitions it follows
    runner.py   run_benchmark / run_sweep: warm-up, load, counters, summary
    results.py  BenchResult / SweepResult: saved, loaded, compared
    report.py   the terminal table and progress bar

The layers depend one way: config/records <- summary <- results <- runner, report.
"""

from workbench.bench.config import (
    DGX_SPARK_REFERENCE,
    PRESETS,
    BenchConfig,
    BenchPhase,
    BenchProgress,
    check_fits,
    preset_config,
    sweep_levels,
)
from workbench.bench.results import BenchResult, SweepResult, compare_results, load_result
from workbench.bench.runner import run_benchmark, run_benchmark_async, run_sweep
from workbench.bench.summary import DEFINITIONS, Distribution, Summary
from workbench.errors import BenchShapeError

__all__ = [
    "DEFINITIONS",
    "DGX_SPARK_REFERENCE",
    "PRESETS",
    "BenchConfig",
    "BenchPhase",
    "BenchProgress",
    "BenchResult",
    "BenchShapeError",
    "Distribution",
    "Summary",
    "SweepResult",
    "check_fits",
    "compare_results",
    "load_result",
    "preset_config",
    "run_benchmark",
    "run_benchmark_async",
    "run_sweep",
    "sweep_levels",
]

"""Experiments on the GPU, each configuration launched by the workbench in turn.

`experiment --spec off,ngram` with SmolLM2, with CUDA graphs and eager: the printed winners
table and the crossover verdict are what the closing note quotes. Which configuration wins
is the measurement, not an assertion: the test holds that both ran, that the verdict agrees
with the figures, and that the estimate was the GPU's.

And the rehearsal model's Mamba SSM cache in float32 against float16 (`--vary`), with the
quality pass: random weights say nothing about accuracy, so the agreement of float16's
temperature-0 answers with float32's is the figure that matters there.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.gpu.harness import Report, workbench
from workbench.experiment import load_experiment
from workbench.experiment.analysis import CrossoverVerdict
from workbench.server.hardware import Detection

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("mode", ["cudagraphs", "eager"])
def test_off_vs_ngram(mode: str, gpu_machine: Detection, gpu_state_dir: Path, report: Report,
                      tmp_path: Path) -> None:
    out = tmp_path / f"experiment-{mode}"
    extra = ["--extra=--enforce-eager"] if mode == "eager" else []
    done = workbench("experiment", "--recipe", "smollm2", "--spec", "off,ngram", "--concurrency", "1,16",
                     "--osl", "64", "--output-dir", str(out), "--quiet", *extra, state_dir=gpu_state_dir,
                     timeout=590)
    report.section(f"experiment off vs ngram, {mode}", done.stdout + "\n" + done.stderr[-1500:])
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads((out / "experiment.json").read_text())
    report.keep(f"experiment_off_vs_ngram_{mode}.json", json.dumps(summary, indent=1))
    result = load_experiment(out)
    assert [c.status for c in result.configs] == ["done", "done"]
    assert "on a GPU" in done.stderr  # the estimate was the GPU's, not the CPU's
    (crossover,) = result.crossovers()
    ahead = [r >= 1.0 for _, r in crossover.speedups]
    expected = (CrossoverVerdict.AHEAD if all(ahead) else CrossoverVerdict.NEVER_PAYS if not any(ahead)
                else CrossoverVerdict.STOPS_PAYING if ahead[0] else CrossoverVerdict.PAYS_LATER)
    assert crossover.verdict is expected
    assert crossover.summary in done.stdout or crossover.summary.split(":")[0] in done.stdout


def test_ssm_cache_float32_against_float16_on_the_rehearsal(gpu_machine: Detection, gpu_state_dir: Path,
                                                            report: Report, tmp_path: Path) -> None:
    out = tmp_path / "experiment-ssm"
    # Without the reasoning parser the answers are the model's whole text (its template opens <think>).
    done = workbench("experiment", "--hardware", gpu_machine.hardware_id, "--rehearsal", "--features", "tool_calling",
                     "--vary", "ssm32=--mamba-ssm-cache-dtype float32",
                     "--vary", "ssm16=--mamba-ssm-cache-dtype float16", "--concurrency", "1", "--requests", "8",
                     "--osl", "64",
                     "--quality", "quick", "--output-dir", str(out), "--quiet", state_dir=gpu_state_dir, timeout=590)
    report.section("experiment: the rehearsal's SSM cache, float32 against float16", done.stdout + "\n"
                   + done.stderr[-1500:])
    summary = json.loads((out / "experiment.json").read_text())
    report.keep("experiment_ssm_float32_vs_float16.json", json.dumps(summary, indent=1))
    result = load_experiment(out)
    assert [c.label for c in result.configs] == ["ssm32", "ssm16"]
    assert [c.status for c in result.configs] == ["done", "done"], done.stderr[-2000:]
    rows = {r.label: r for r in result.quality_rows()}
    assert rows["ssm16"].agreement is not None and rows["ssm16"].agreement.compared >= 1

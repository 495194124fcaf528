"""Speculative decoding on the GPU: `experiment --spec off,ngram` with SmolLM2, eager and with CUDA graphs.

Each configuration is launched by the workbench, one after the other, on the GPU; the
printed winners table and the crossover verdict are what the closing note quotes. Which
configuration wins is the measurement, not an assertion: the test holds that both ran,
that the verdict agrees with the figures, and that the estimate was the GPU's.
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


@pytest.mark.parametrize("mode", ["eager", "cudagraphs"])
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

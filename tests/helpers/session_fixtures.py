"""Session fixtures that more than one test file reads (registered in tests/conftest.py).

Each `vllm serve` on the CPU build takes about 40 s to start on a 2-core machine, so what
several files only read is started once per session:

- `off_broken_ngram_experiment`: one real off / broken-flag / ngram experiment with a quick
  quality pass. tests/test_experiment_live.py reads the sweep, the failed launch and the
  winners; tests/test_quality_live.py the agreement and lm-eval's accuracy. Each
  configuration is a real `vllm serve` the experiment launches and stops itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from workbench.experiment import (
    ExperimentProgress,
    ExperimentResult,
    ExperimentSettings,
    QualitySettings,
    builtin_workload,
    configs_from_specs,
    new_experiment,
    parse_config_text,
    run_experiment,
)
from workbench.recipes import Selection, load_catalog
from workbench.server import free_port


@dataclass
class SharedExperiment:
    result: ExperimentResult
    folder: Path  # what run_experiment wrote: experiment.json, report.html, quality/
    port: int  # the one port every configuration was served on
    seen: list[ExperimentProgress]  # every progress report, in order


@pytest.fixture(scope="session")
def off_broken_ngram_experiment(demo_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> SharedExperiment:
    """off, a configuration with a flag vLLM refuses, and ngram; concurrency 1 and 2; quick quality pass."""
    catalog = load_catalog()
    base = Selection(hardware="cpu")
    off, ngram = configs_from_specs("off,ngram", base, catalog)
    broken = parse_config_text("broken:off:--no-such-flag 3", base, catalog)
    quality = QualitySettings("quick", agreement_prompts=3, agreement_tokens=32, accuracy_items=12)
    settings = ExperimentSettings(concurrency=[1, 2], requests_per_level=5, output_tokens=48, warmup_requests=1,
                                  quality=quality)
    root = tmp_path_factory.mktemp("shared-experiment")
    seen: list[ExperimentProgress] = []
    port = free_port()
    result = run_experiment(new_experiment([off, broken, ngram], settings, builtin_workload()), root / "exp", catalog,
                            progress=seen.append, state_dir=root / "state", port=port)
    return SharedExperiment(result, root / "exp", port, seen)


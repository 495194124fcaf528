"""Session fixtures that more than one test file reads (registered in tests/conftest.py).

Each `vllm serve` on the CPU build takes about 40 s to start on a 2-core machine, so what
several files only read is started once per session:

- `off_broken_ngram_experiment`: one real off / broken-flag / ngram experiment with a quick
  quality pass. tests/test_experiment_live.py reads the sweep, the failed launch and the
  winners; tests/test_quality_live.py the agreement and lm-eval's accuracy. Each
  configuration is a real `vllm serve` the experiment launches and stops itself.
- `recipe_ngram_server`: SmolLM2 with the CPU demo recipe's own per-request figures and
  n-gram drafting flags. tests/test_metrics_live.py reads its /metrics spec-decode
  counters, tests/test_server_figures_live.py its per-request figures.

`SideBySide` starts the session's demo and forcing servers together, with test_agents_live.py's
tiny Qwen3 server when that file runs too (tests/conftest.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
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
from workbench.experiment.slo import SloSearch, parse_slos
from tests.helpers.vllm_servers import RunningServer, start_vllm_server
from workbench.recipes import Selection, load_catalog, render
from workbench.server import free_port


@dataclass
class SharedExperiment:
    result: ExperimentResult
    folder: Path  # what run_experiment wrote: experiment.json, report.html, quality/
    port: int  # the one port every configuration was served on
    seen: list[ExperimentProgress]  # every progress report, in order


@pytest.fixture(scope="session")
def off_broken_ngram_experiment(demo_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> SharedExperiment:
    """off, a configuration with a flag vLLM refuses, and ngram; concurrency 1 and 2; an SLO search over those
    levels; quick quality pass."""
    catalog = load_catalog()
    base = Selection(hardware="cpu")
    off, ngram = configs_from_specs("off,ngram", base, catalog)
    broken = parse_config_text("broken:off:--no-such-flag 3", base, catalog)
    quality = QualitySettings("quick", agreement_prompts=3, agreement_tokens=32, accuracy_items=12)
    settings = ExperimentSettings(concurrency=[1, 2], requests_per_level=5, output_tokens=48, warmup_requests=1,
                                  quality=quality)
    # Then the SLO search on the same servers, up to the sweep's levels: its probes are those levels, reused (no
    # request more; notebook 03 measures a probe beyond its sweep).
    settings.slo = SloSearch(parse_slos("tpot_p90:120"), max_concurrency=2).to_dict()
    root = tmp_path_factory.mktemp("shared-experiment")
    seen: list[ExperimentProgress] = []
    port = free_port()
    result = run_experiment(new_experiment([off, broken, ngram], settings, builtin_workload()), root / "exp", catalog,
                            progress=seen.append, state_dir=root / "state", port=port)
    return SharedExperiment(result, root / "exp", port, seen)


def recipe_flags() -> list[str]:
    """What the CPU demo recipe renders with per-request figures and n-gram drafting on,
    less what the test server sets itself (model, port, context)."""
    plan = render(Selection(hardware="cpu", features=["per_request_metrics", "spec_decoding"]), load_catalog())
    flags = plan.argv[3:]
    i = flags.index("--max-model-len")
    return flags[:i] + flags[i + 2:]


@pytest.fixture(scope="session")
def recipe_ngram_server(demo_model_dir: Path, artifacts_dir: Path) -> Iterator[RunningServer]:
    """SmolLM2 (real weights) served with `recipe_flags()`: n-gram drafting, per-request figures."""
    server = start_vllm_server("recipe-ngram", demo_model_dir, "HuggingFaceTB/SmolLM2-135M-Instruct", artifacts_dir,
                               extra_args=recipe_flags())
    yield server
    server.stop()


class SideBySide:
    """Session servers that start together: asking for one also starts, in the background,
    every other registered server that a collected test uses and that is not started yet,
    and waits for all of them.

    A start-up is mostly imports in three processes in turn (API server, engine core,
    worker), which leave part of 2 cores idle: measured, demo + forcing + tiny Qwen3 took
    95 s side by side against 125 s one after another. Nothing starts
    before a test asks for a server, so unit tests that run first are not slowed, and a run
    of one file starts only what that file uses.
    """

    def __init__(self, items: Sequence[pytest.Item]) -> None:
        self._used = {name for item in items for name in getattr(item, "fixturenames", ())}
        self._prepare: dict[str, Callable[[], Callable[[], RunningServer]]] = {}
        self._running: dict[str, Future[RunningServer]] = {}
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="session-server")

    def register(self, fixture_name: str, prepare: Callable[[], Callable[[], RunningServer]]) -> None:
        """`prepare` runs in the test's thread (it may ask pytest for fixtures) and returns the start."""
        self._prepare[fixture_name] = prepare

    def get(self, fixture_name: str) -> RunningServer:
        started = []
        for name, prepare in self._prepare.items():
            if name not in self._running and (name == fixture_name or name in self._used):
                self._running[name] = self._pool.submit(prepare())
                started.append(self._running[name])
        # Every start ends before the test runs: no start-up competes with a test for the cores.
        wait(started)
        return self._running[fixture_name].result()

    def stop(self, fixture_name: str) -> None:
        """Stop one before the session ends (a module's own server, once its tests are done)."""
        future = self._running.pop(fixture_name, None)
        if future is not None and future.exception() is None:
            future.result().stop()

    def stop_all(self) -> None:
        for future in self._running.values():
            if future.exception() is None:
                future.result().stop()
        self._pool.shutdown()

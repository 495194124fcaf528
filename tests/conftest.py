"""Shared fixtures: real vLLM CPU servers, started once per test session."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.session_fixtures import off_broken_ngram_experiment, recipe_ngram_server  # noqa: F401 (fixtures)
from tests.helpers.vllm_servers import RunningServer, start_vllm_server

FIXTURES = Path(__file__).parent / "fixtures"
RECORDED = FIXTURES / "vllm-0.32.0-cpu"
ARTIFACTS = Path(__file__).parent.parent / "test-artifacts"


@pytest.fixture(scope="session")
def artifacts_dir() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


@pytest.fixture(scope="session")
def demo_model_dir() -> Path:
    from workbench.demo.models import build_demo_model

    return build_demo_model().path


@pytest.fixture(scope="session")
def forcing_model_dir() -> Path:
    from workbench.demo.models import build_forcing_model

    return build_forcing_model().path


@pytest.fixture(scope="session")
def demo_server(demo_model_dir: Path, artifacts_dir: Path):
    """SmolLM2-135M-Instruct (real weights) on vLLM's CPU build."""
    # Prompt-token details: each answer's usage says how many prompt tokens the prefix cache
    # served (the session benchmarks check them against /metrics).
    server = start_vllm_server(
        "demo", demo_model_dir, "HuggingFaceTB/SmolLM2-135M-Instruct", artifacts_dir,
        extra_args=("--enable-prompt-tokens-details",),
    )
    yield server
    server.stop()


@pytest.fixture(scope="session")
def forcing_server(forcing_model_dir: Path, artifacts_dir: Path) -> RunningServer:
    """The tiny forcing model with Nemotron's reasoning and tool parsers on."""
    from workbench.demo.models import special_token_ids
    from workbench.demo.forcing import FORCING_SERVER_FLAGS

    server = start_vllm_server(
        "forcing",
        forcing_model_dir,
        "forcing-tiny",
        artifacts_dir,
        extra_args=FORCING_SERVER_FLAGS,
    )
    server.special_token_ids = special_token_ids(forcing_model_dir)
    yield server
    server.stop()

"""Shared fixtures: real vLLM CPU servers, started once per test session."""

from __future__ import annotations

from pathlib import Path

import pytest

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


# ── the fast tier: `pytest -m "not slow"` (README, "Tests") ─────────────────────────────────
# Marked here, once, rather than file by file: a test is slow when it needs vLLM, a browser or a
# GPU (its markers), or asks for a fixture that starts vLLM or builds a model. A test that asks for
# a server fixture needs vLLM, so it is also marked `vllm` (select or skip them with -m).
SERVER_FIXTURES = frozenset({"demo_server", "forcing_server"})
BUILD_FIXTURES = frozenset({"demo_model_dir", "forcing_model_dir"})
SLOW_MARKERS = ("vllm", "browser", "gpu", "slow")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if fixtures & SERVER_FIXTURES and item.get_closest_marker("vllm") is None:
            item.add_marker(pytest.mark.vllm)
        if fixtures & (SERVER_FIXTURES | BUILD_FIXTURES) or any(item.get_closest_marker(m) for m in SLOW_MARKERS):
            item.add_marker(pytest.mark.slow)

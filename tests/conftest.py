"""Shared fixtures: real vLLM CPU servers, started once per test session."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.session_fixtures import SideBySide
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
def side_by_side(request: pytest.FixtureRequest, artifacts_dir: Path):
    """The session's servers, started together when the first is asked for (tests/helpers/session_fixtures.py)."""
    from workbench.demo.models import build_demo_model, build_forcing_model, special_token_ids
    from workbench.demo.forcing import FORCING_SERVER_FLAGS

    # Each `prepare` builds its model here (as demo_model_dir and forcing_model_dir do: once,
    # then from the cache) and returns the start, which runs in a background thread.
    def demo():
        model_dir = build_demo_model().path
        # Prompt-token details: each answer's usage says how many prompt tokens the prefix cache
        # served (the session benchmarks check them against /metrics).
        return lambda: start_vllm_server(
            "demo", model_dir, "HuggingFaceTB/SmolLM2-135M-Instruct", artifacts_dir,
            extra_args=("--enable-prompt-tokens-details",),
        )

    def forcing():
        model_dir = build_forcing_model().path

        def start() -> RunningServer:
            server = start_vllm_server("forcing", model_dir, "forcing-tiny", artifacts_dir,
                                       extra_args=FORCING_SERVER_FLAGS)
            server.special_token_ids = special_token_ids(model_dir)
            return server
        return start

    def tiny_qwen3():  # test_agents_live.py's own server: it stops it when its tests are done
        from workbench.demo.tiny_qwen3 import TINY_QWEN3_NAME, TINY_QWEN3_SERVER_FLAGS, build_tiny_qwen3

        model_dir = build_tiny_qwen3().path

        def start() -> RunningServer:
            server = start_vllm_server("qwen3-tiny", model_dir, TINY_QWEN3_NAME, artifacts_dir,
                                       extra_args=TINY_QWEN3_SERVER_FLAGS)
            server.special_token_ids = special_token_ids(model_dir)
            return server
        return start

    servers = SideBySide(request.session.items)
    servers.register("demo_server", demo)
    servers.register("forcing_server", forcing)
    servers.register("tiny_qwen3_server", tiny_qwen3)
    yield servers
    servers.stop_all()


@pytest.fixture(scope="session")
def demo_server(side_by_side: SideBySide) -> RunningServer:
    """SmolLM2-135M-Instruct (real weights) on vLLM's CPU build."""
    return side_by_side.get("demo_server")


@pytest.fixture(scope="session")
def forcing_server(side_by_side: SideBySide) -> RunningServer:
    """The tiny forcing model with Nemotron's reasoning and tool parsers on."""
    return side_by_side.get("forcing_server")

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


# ── the fast tier: `pytest -m "not slow"` (README, "Tests") ─────────────────────────────────
# Marked here, once, rather than file by file: a test is slow when it needs vLLM, a browser or a
# GPU (its markers), or asks for a fixture that starts vLLM or builds a model. A test that asks for
# a server fixture needs vLLM, so it is also marked `vllm` (select or skip them with -m).
SERVER_FIXTURES = frozenset({"demo_server", "forcing_server", "side_by_side", "tiny_qwen3_server",
                             "recipe_ngram_server", "off_broken_ngram_experiment"})
BUILD_FIXTURES = frozenset({"demo_model_dir", "forcing_model_dir"})
SLOW_MARKERS = ("vllm", "browser", "gpu", "slow")
# Over 3.5 s each in the fast tier's own `--durations` on the 2-core machine (415 s before they left it):
# fuzzing, room loads, signals to a real UI or JupyterLab, waits on timeouts, model builds.
SLOW_TESTS = frozenset({
    "tests/test_workshop_attack_live.py::test_the_audits_attacks_hold_and_a_flood_leaves_others_within_a_second",
    "tests/test_fuzz_ui.py::test_every_public_endpoint_survives_hostile_values",
    "tests/test_workshop_load_live.py::test_32_attendees_at_once_arrive_and_finish_within_a_second",
    "tests/test_quality.py::test_an_unknown_task_and_a_task_whose_data_is_not_here",
    "tests/test_quality.py::test_a_server_that_is_not_there_fails_both_halves_clearly",
    "tests/test_server.py::test_another_pythons_module_form_is_used_with_python",
    "tests/test_rehearsal.py::test_the_stand_in_has_nemotrons_shape_and_tokens",
    "tests/test_signals_live.py::test_the_web_ui_exits_on_a_signal",
    "tests/test_notebooks_command.py::test_a_signal_stops_jupyterlab",
    "tests/test_planner.py::test_nano_config_counts_the_parameters_transformers_builds",
    "tests/test_planner_offline.py::test_the_gguf_header_reader_agrees_with_the_gguf_library",
    "tests/test_mcp_tools.py::test_a_server_that_never_answers_is_stopped_when_given_up_on",
    "tests/test_mcp_tools.py::test_servers_that_cannot_be_reached_say_why",
    "tests/test_server_state.py::test_an_orphaned_group_is_cleaned_when_its_leader_dies",
    "tests/test_experiment_failures.py::test_a_start_past_the_timeout_says_how_long_it_was_waited_for",
    "tests/test_readiness.py::test_a_timeout_says_how_long_it_waited_and_the_server_still_runs",
    "tests/test_chat_replay.py::test_a_turn_closed_from_a_running_loop_hangs_up_on_the_server",
    # SLO searches against the fixed-rate server: each probe is a timed level (11-43 s a search)
    "tests/test_experiment_slo.py::test_the_search_finds_the_known_capacity_within_one_step",
    "tests/test_experiment_slo.py::test_the_search_by_rate_starts_from_one_user_at_a_time",
    "tests/test_experiment_slo.py::test_a_client_bound_probe_is_marked_and_kept_out_of_the_answer",
})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if fixtures & SERVER_FIXTURES and item.get_closest_marker("vllm") is None:
            item.add_marker(pytest.mark.vllm)
        slow = item.nodeid.split("[")[0] in SLOW_TESTS or fixtures & (SERVER_FIXTURES | BUILD_FIXTURES)
        if slow or any(item.get_closest_marker(m) for m in SLOW_MARKERS):
            item.add_marker(pytest.mark.slow)

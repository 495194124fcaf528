"""`verify` and `connect` against real vLLM CPU servers: the forcing model (Nemotron's
parsers), SmolLM2 (no parsers: "not applicable", not failures), and a tiny random-weight
Qwen3ForCausalLM served with the Qwen3-0.6B recipe's `qwen3` + `hermes` parsers."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib

import pytest

from workbench.agents.harnesses import connection_for, render_harness
from workbench.agents.verify import CHECK_KEYS, ExpectedParsers, verify_endpoint
from workbench.demo.forcing import FORCING_SERVER_FLAGS, verify_request_fields
from workbench.recipes import Selection, load_catalog, render

pytestmark = pytest.mark.vllm


def outcomes(report) -> dict[str, str]:
    return {c.key: c.outcome for c in report.checks}


def test_verify_passes_on_the_forcing_models_server(forcing_server):
    report = verify_endpoint(forcing_server.base_url,
                             request_fields=verify_request_fields(forcing_server.special_token_ids),
                             expected=ExpectedParsers.from_argv(list(FORCING_SERVER_FLAGS)))
    assert outcomes(report) == {key: "pass" for key in CHECK_KEYS}, report.to_dict()
    assert report.reasoning_field == "reasoning"  # vLLM 0.32's field name
    assert "get_weather" in report.check("tool_call").found and "Paris" in report.check("tool_call").found
    assert "21 °C" in report.check("multi_step").found


def test_verify_names_what_is_wrong_when_the_recipe_expects_other_parsers(forcing_server):
    report = verify_endpoint(forcing_server.base_url,
                             request_fields=verify_request_fields(forcing_server.special_token_ids),
                             expected=ExpectedParsers(None, None, False))
    check = report.check("parsers_match")
    assert check.outcome == "fail" and "no --reasoning-parser" in check.found and "Restart" in check.change
    assert not report.ok


def test_verify_on_smollm2_marks_what_it_lacks_not_applicable(demo_server):
    report = verify_endpoint(demo_server.base_url, max_tokens=24, expected=ExpectedParsers(None, None, False))
    got = outcomes(report)
    assert got["models"] == got["stream"] == got["parsers_match"] == "pass", report.to_dict()
    for key in ("reasoning", "reasoning_off", "tool_call", "multi_step", "server_figures"):
        assert got[key] == "not_applicable", (key, report.to_dict())
    assert "no tool-call parser" in report.check("tool_call").found
    assert report.ok


def test_cli_verify_json_and_exit_codes(forcing_server, demo_server):
    # The forcing model is recognised by its served name: its replies are forced, and every check passes.
    run = subprocess.run([sys.executable, "-m", "workbench", "verify", forcing_server.base_url, "--json"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    data = json.loads(run.stdout)
    assert data["ok"] and {c["key"]: c["outcome"] for c in data["checks"]} == {k: "pass" for k in CHECK_KEYS} | {
        "parsers_match": "not_applicable"}
    assert "forcing model" in run.stderr
    # SmolLM2 compared with the Qwen3 recipe: no reasoning, no tool calls where the recipe has both -> exit 1.
    run = subprocess.run([sys.executable, "-m", "workbench", "verify", demo_server.base_url, "--recipe",
                          "Qwen/Qwen3-0.6B", "--max-tokens", "16"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "[FAIL] reasoning arrives apart from the content" in run.stdout
    assert "--reasoning-parser qwen3" in run.stdout and "what to change:" in run.stdout


def test_connect_fills_in_the_servers_real_values(forcing_server):
    connection = connection_for(forcing_server.base_url)
    assert connection.model == "forcing-tiny" and connection.context_length == 4096
    codex = tomllib.loads(render_harness("codex", connection).text)
    assert codex["model"] == "forcing-tiny" and codex["model_context_window"] == 4096
    run = subprocess.run([sys.executable, "-m", "workbench", "connect", "--harness", "opencode", "--url",
                          forcing_server.base_url, "--json"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    config = json.loads(json.loads(run.stdout)["files"][0]["text"])
    assert config["provider"]["vllm"]["options"]["baseURL"] == f"{forcing_server.base_url}/v1"
    assert config["provider"]["vllm"]["models"]["forcing-tiny"]["limit"]["context"] == 4096


@pytest.fixture(scope="module")
def tiny_qwen3_server(side_by_side):
    # Built and started in tests/conftest.py, beside the demo and forcing servers; stopped here.
    yield side_by_side.get("tiny_qwen3_server")
    side_by_side.stop("tiny_qwen3_server")


def test_qwen3_and_hermes_parsers_on_a_tiny_qwen3(tiny_qwen3_server):
    architecture = json.loads((tiny_qwen3_server.model_dir / "config.json").read_text())["architectures"]
    assert architecture == ["Qwen3ForCausalLM"]
    recipe_plan = render(Selection(recipe="Qwen/Qwen3-0.6B"), load_catalog())
    report = verify_endpoint(
        tiny_qwen3_server.base_url,
        request_fields=verify_request_fields(tiny_qwen3_server.special_token_ids, call_format="hermes",
                                             model_opens_think=True),
        expected=ExpectedParsers.from_argv(recipe_plan.argv))
    assert outcomes(report) == {key: "pass" for key in CHECK_KEYS}, report.to_dict()
    assert 'get_weather({"city": "Paris"})' in report.check("tool_call").found
    assert "reasoning parser qwen3" in report.check("parsers_match").found


def test_day_of_checks_include_the_agent_checks(demo_server):
    from workbench.agents.checks import agent_endpoint_checks

    plan = render(Selection(hardware="cpu"), load_catalog())  # renders --enable-per-request-metrics
    checks = {c.name: c for c in agent_endpoint_checks(demo_server.base_url, plan_argv=plan.argv)}
    tool = checks["agents: a native tool call is parsed (get_weather)"]
    assert tool.status == "ok" and tool.found.startswith("not applicable: the server has no tool-call parser")
    # The fixture's server runs without the flag the plan renders: the day-of check says so.
    figures = checks["agents: per-request server figures (response `metrics`)"]
    assert figures.status == "missing" and "Restart the server" in figures.fix

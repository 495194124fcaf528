"""Agent readiness without a server: vLLM's per-request figures read from a recording,
the harness configs parsed in their own formats, the verifier's plan comparison, and the
Qwen3-0.6B recipe (its parsers are checked against vLLM 0.32's registries by
tests/test_vllm_cli_accepts_renders.py, which renders every recipe)."""

from __future__ import annotations

import ast
import json
import tomllib
from pathlib import Path

import pytest
import yaml

from workbench.agents.harnesses import HARNESSES, Connection, render_harness
from workbench.agents.verify import ExpectedParsers
from workbench.chat.events import TurnStats
from workbench.chat.server_metrics import (
    RequestServerFigures,
    TurnServerFigures,
    request_figures_from_response,
)
from workbench.chat.transcript import format_ms, server_stats_rows
from workbench.errors import InputError
from workbench.recipes import Selection, load_catalog, render

RECORDED = Path(__file__).parent / "fixtures" / "vllm-0.32.0-cpu" / "per_request_metrics.json"


@pytest.fixture(scope="module")
def recording() -> dict:
    return json.loads(RECORDED.read_text())


def test_streamed_metrics_ride_on_the_final_usage_chunk(recording):
    chunks = [json.loads(line[5:]) for line in recording["stream_sse_lines"]
              if line.startswith("data:") and line[5:].strip() != "[DONE]"]
    carrying = [c for c in chunks if "metrics" in c]
    assert len(carrying) == 1 and carrying[0] is chunks[-1] and carrying[0]["choices"] == []
    assert "usage" in carrying[0]
    figures = request_figures_from_response(carrying[0])
    raw = carrying[0]["metrics"]
    assert figures == RequestServerFigures(
        queue_ms=raw["queue_time_ms"], prefill_ms=raw["time_to_first_token_ms"], decode_ms=raw["generation_time_ms"],
        mean_itl_ms=raw["mean_itl_ms"], tokens_per_s=raw["tokens_per_second"], spec_decode=figures.spec_decode)
    spec = raw["speculative_decoding"]
    assert figures.spec_decode.spec_steps == spec["num_spec_steps"]
    assert figures.spec_decode.acceptance_rate == pytest.approx(spec["draft_acceptance_rate"])
    assert figures.spec_decode.mean_acceptance_length == pytest.approx(spec["mean_acceptance_length"])
    # generated tokens - 1 = decode window / mean inter-token latency
    completion = carrying[0]["usage"]["completion_tokens"]
    assert figures.decode_intervals == pytest.approx(completion - 1)


def test_non_streamed_metrics_and_absent_metrics(recording):
    figures = request_figures_from_response(recording["response"])
    assert figures is not None and figures.prefill_ms == recording["response"]["metrics"]["time_to_first_token_ms"]
    assert request_figures_from_response({"usage": {}}) is None
    assert request_figures_from_response({"metrics": "garbage"}) is None
    odd = request_figures_from_response({"metrics": {"queue_time_ms": "1", "speculative_decoding": None}})
    assert odd == RequestServerFigures()


def test_a_turn_sums_its_requests_and_survives_a_save():
    a = RequestServerFigures(queue_ms=1.0, prefill_ms=10.0, decode_ms=90.0, mean_itl_ms=10.0)
    b = RequestServerFigures(queue_ms=None, prefill_ms=5.0, decode_ms=30.0, mean_itl_ms=5.0)
    turn = TurnServerFigures().add(a).add(b)
    assert (turn.requests, turn.queue_ms, turn.prefill_ms, turn.decode_ms) == (2, 1.0, 15.0, 120.0)
    assert turn.decode_tokens_per_s == pytest.approx((9 + 6) / 0.120)
    stats = TurnStats(requests=3, server=turn)
    assert TurnStats.from_dict(json.loads(json.dumps(stats.to_dict()))) == stats
    rows = {r.key: r.value for r in server_stats_rows(stats)}
    assert rows["server_prefill"] == "15 ms" and rows["server_queue"] == "1 ms" and rows["server_requests"] == "2 of 3"
    assert server_stats_rows(TurnStats()) == []
    assert [format_ms(v) for v in (None, 0.0376, 108.85, 2620.4)] == ["–", "0.04 ms", "109 ms", "2.62 s"]


def test_expected_parsers_read_off_rendered_plans():
    catalog = load_catalog()
    qwen = render(Selection(recipe="Qwen/Qwen3-0.6B"), catalog)
    assert ExpectedParsers.from_argv(qwen.argv) == ExpectedParsers("qwen3", "hermes", True)
    smol = render(Selection(hardware="cpu"), catalog)
    assert ExpectedParsers.from_argv(smol.argv) == ExpectedParsers(None, None, True)
    nemo = render(Selection(hardware="h200"), catalog)
    assert ExpectedParsers.from_argv(nemo.argv) == ExpectedParsers("nemotron_v3", "qwen3_coder", False)
    assert ExpectedParsers.from_argv(["--reasoning-parser=x"]).reasoning_parser == "x"


def test_qwen3_recipe_renders_its_parsers_and_metrics_and_is_not_the_offline_default():
    catalog = load_catalog()
    plan = render(Selection(recipe="Qwen/Qwen3-0.6B"), catalog)
    assert plan.argv == ["vllm", "serve", "Qwen/Qwen3-0.6B", "--enforce-eager", "--max-model-len", "8192",
                         "--tensor-parallel-size", "1", "--reasoning-parser", "qwen3", "--enable-auto-tool-choice",
                         "--tool-call-parser", "hermes", "--enable-per-request-metrics"]
    assert plan.hardware == "cpu" and plan.local_build is None  # downloaded, not built
    assert any("downloaded" in n for n in plan.notes)
    assert render(Selection(hardware="cpu"), catalog).recipe_id == "HuggingFaceTB/SmolLM2-135M-Instruct"


def test_nemotron_spec_decoding_metrics_come_with_spec_decoding_only():
    catalog = load_catalog()
    both = render(Selection(hardware="h200", features=["per_request_metrics", "spec_decoding"]), catalog).argv
    assert both[both.index("--per-request-spec-decode-metrics") + 1] == "summary"
    alone = render(Selection(hardware="h200", features=["per_request_metrics"]), catalog).argv
    assert "--enable-per-request-metrics" in alone and "--per-request-spec-decode-metrics" not in alone
    default = render(Selection(hardware="h200"), catalog).argv
    assert "--enable-per-request-metrics" not in default  # opt-in: the recipes.vllm.ai command is unchanged


CONNECTION = Connection("http://10.0.0.5:8123", "nvidia/NVIDIA-Nemotron-3.5-Lightning-30B-A3B-NVFP4", 262144,
                        "MY_VLLM_KEY")


def _parsed(fmt: str, text: str):
    if fmt == "json":
        return json.loads(text)
    if fmt == "toml":
        return tomllib.loads(text)
    if fmt == "yaml":
        return yaml.safe_load(text)
    assert fmt == "python"
    return ast.parse(text)


@pytest.mark.parametrize("name", sorted(HARNESSES))
def test_each_harness_config_parses_and_carries_the_servers_values(name):
    rendered = render_harness(name, CONNECTION)
    assert rendered.doc_url.startswith("https://")
    parsed = [_parsed(f.format, f.text) for f in rendered.files]
    flat = "\n".join(f.text for f in rendered.files) + json.dumps(rendered.env)
    assert "http://10.0.0.5:8123/v1" in flat and CONNECTION.model in flat
    assert "MY_VLLM_KEY" in flat
    if name != "openai-sdk":
        assert "262144" in flat  # the context length
    first = parsed[0]
    if name == "opencode":
        provider = first["provider"]["vllm"]
        assert provider["npm"] == "@ai-sdk/openai-compatible"
        assert provider["options"] == {"baseURL": "http://10.0.0.5:8123/v1", "apiKey": "{env:MY_VLLM_KEY}"}
        model = provider["models"][CONNECTION.model]
        assert model["limit"]["context"] == 262144 and model["tool_call"] and model["reasoning"]
        assert first["model"] == f"vllm/{CONNECTION.model}"
    elif name == "codex":
        assert first["model"] == CONNECTION.model and first["model_context_window"] == 262144
        assert first["model_providers"][first["model_provider"]] == {
            "name": "vLLM (Nemotron workbench)", "base_url": "http://10.0.0.5:8123/v1", "env_key": "MY_VLLM_KEY",
            "wire_api": "responses"}
    elif name == "continue":
        model = first["models"][0]
        assert (model["provider"], model["model"], model["apiBase"]) == ("openai", CONNECTION.model,
                                                                         "http://10.0.0.5:8123/v1")
        assert model["defaultCompletionOptions"]["contextLength"] == 262144 and "tool_use" in model["capabilities"]
    elif name == "aider":
        assert first == {"model": f"openai/{CONNECTION.model}", "openai-api-base": "http://10.0.0.5:8123/v1"}
        assert parsed[1][f"openai/{CONNECTION.model}"]["max_input_tokens"] == 262144
        assert rendered.env == {"OPENAI_API_KEY": "$MY_VLLM_KEY"}
    elif name == "openhands":
        assert first["llm"]["model"] == f"openai/{CONNECTION.model}" and first["llm"]["native_tool_calling"] is True
        assert first["llm"]["base_url"] == "http://10.0.0.5:8123/v1" and first["llm"]["max_input_tokens"] == 262144
    else:
        calls = [n for n in ast.walk(first) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "OpenAI"]
        assert {k.arg for k in calls[0].keywords} == {"base_url", "api_key"}


def test_a_server_without_parsers_gets_configs_that_promise_neither():
    from dataclasses import replace

    plain = replace(CONNECTION, reasoning=False, tool_calls=False)
    opencode = json.loads(render_harness("opencode", plain).files[0].text)
    model = opencode["provider"]["vllm"]["models"][CONNECTION.model]
    assert model["tool_call"] is False and model["reasoning"] is False
    assert tomllib.loads(render_harness("openhands", plain).files[0].text)["llm"]["native_tool_calling"] is False
    assert yaml.safe_load(render_harness("continue", plain).files[0].text)["models"][0]["capabilities"] == []


def test_unknown_harness_is_refused_with_the_choices():
    with pytest.raises(InputError) as err:
        render_harness("cursor", CONNECTION)
    assert "opencode" in err.value.hint

"""The notebooks' ipywidgets views, without a kernel: pickers render real plans,
the chat view draws replayed real vLLM streams, the metrics view scrapes a real server."""

from __future__ import annotations

import json

import pytest

import workbench
from tests.conftest import RECORDED
from tests.helpers.replay import replay_async_client
from workbench import notebook as widgets
from workbench.chat import ChatOptions, ChatSession
from workbench.chat.tools import ToolRegistry
from workbench.notebook.html import esc
from workbench.recipes import Selection, load_catalog, render
from workbench.server import docker_engine_problem


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


# ── RecipePicker ────────────────────────────────────────────────────────────


def test_picker_starts_on_the_given_hardware_with_the_recipe_for_it(catalog):
    picker = widgets.RecipePicker(catalog, "cpu")
    assert picker.plan.hardware == "cpu"
    # the CPU demo's default features: per-request figures on, n-gram drafting opt-in
    assert picker.plan.argv == render(Selection(hardware="cpu"), catalog).argv
    assert "--enable-per-request-metrics" in picker.plan.argv and "--speculative-config" not in picker.plan.argv
    assert "vllm serve HuggingFaceTB/SmolLM2-135M-Instruct" in picker.command.value
    assert "VLLM_CPU_KVCACHE_SPACE=1" in picker.command.value
    # the choice lists come from its recipe
    assert set(picker._feature_boxes) == {"per_request_metrics"}  # spec_decoding is the spec-mode choice
    assert [v for _, v in picker.variant.options] == ["", "default"]


def test_changing_hardware_rebuilds_choices_from_the_recipe_data(catalog):
    picker = widgets.RecipePicker(catalog, "cpu")
    seen = []
    picker.on_change(seen.append)
    picker.hardware.value = "dgx_spark_gb10"
    nemotron = catalog.recipe(catalog.default_recipe_id())
    assert list(picker._feature_boxes) == [f for f in nemotron.features if f != "spec_decoding"]
    assert {name for name, box in picker._feature_boxes.items() if box.value} == set(nemotron.default_features)
    assert [v for _, v in picker.spec.options] == ["none", *nemotron.spec_modes]
    assert [v for _, v in picker.preset.options] == ["", *nemotron.presets]
    expected = render(Selection(hardware="dgx_spark_gb10", features=nemotron.default_features), catalog)
    assert picker.plan.argv == expected.argv
    assert seen[-1].argv == expected.argv  # one render per change reached the callback
    assert "--load-format fastsafetensors" in picker.command.value
    assert "docker run" in picker.docker.value


def test_spec_mode_and_feature_checkbox_change_the_command_and_provenance(catalog):
    picker = widgets.RecipePicker(catalog, "h200")
    picker.spec.value = "mtp"
    assert "spec_decoding" in picker.plan.features and picker.plan.spec_mode == "mtp"
    assert picker.plan.provenance["--speculative-config"] == "mode:mtp"
    assert "mode:mtp" in picker.provenance.value
    assert "&quot;method&quot;:&quot;mtp&quot;" in picker.command.value  # HTML-escaped JSON
    picker._feature_boxes["reasoning"].value = False
    assert "--reasoning-parser" not in picker.plan.argv


def test_provenance_rows_cover_every_flag_and_env_var(catalog):
    plan = render(Selection(hardware="cpu"), catalog)
    rows = workbench.provenance_rows(plan, catalog)
    assert rows[0][:3] == ["VLLM_CPU_KVCACHE_SPACE", "1", "env"]
    flags = [r[0] for r in rows[1:]]
    assert flags == [t for t in plan.argv[3:] if t.startswith("--")]
    by_flag = {r[0]: r for r in rows}
    assert by_flag["--max-model-len"][1:3] == ["4096", "base"]
    assert "KV cache" in by_flag["--max-model-len"][3]  # the recipe's explanation


def test_bad_extra_flags_say_what_to_change_and_keep_no_stale_plan(catalog):
    picker = widgets.RecipePicker(catalog, "cpu")
    picker.extra.value = '--served-model-name "unclosed'
    assert picker.plan is None
    assert "not valid shell words" in picker.error.message and "Close the quote" in picker.error.hint
    assert "Close the quote" in picker.summary.value and picker.command.value == ""
    picker.extra.value = "--max-num-seqs 8"
    assert picker.plan.argv[-2:] == ["--max-num-seqs", "8"]
    assert picker.plan.provenance["--max-num-seqs"] == "user"


def test_unknown_choice_shows_the_valid_values(catalog):
    picker = widgets.RecipePicker(catalog, "cpu")
    picker.recipe.value = catalog.default_recipe_id()  # Nemotron on a CPU: a fallback, said plainly
    assert picker.plan.hardware != "cpu"
    assert picker.plan.fallbacks and "cannot run on cpu" in picker.summary.value


def test_forcing_plan_is_the_cpu_demo_command_with_nemotrons_parsers(catalog):
    from workbench.demo.models import FORCING_MODEL_NAME
    from workbench.demo.forcing import FORCING_SERVER_FLAGS

    plan = workbench.forcing_plan(catalog)
    assert plan.argv[:3] == ["vllm", "serve", FORCING_MODEL_NAME]
    assert plan.local_build == FORCING_MODEL_NAME and plan.served_model_name == FORCING_MODEL_NAME
    assert plan.argv[-len(FORCING_SERVER_FLAGS):] == list(FORCING_SERVER_FLAGS)
    assert json.loads(plan.argv[-1]) == {"enable_in_reasoning": True}
    assert plan.hardware == "cpu" and plan.env == {"VLLM_CPU_KVCACHE_SPACE": "1"}


# ── ChatView over replayed real streams ─────────────────────────────────────


def get_weather(city: str) -> dict:
    """Get weather

    Args:
        city: The city to look up.
    """
    return {"city": city, "forecast": "sunny", "celsius": 21}


def test_chat_view_draws_reasoning_tool_call_and_answer_side_by_side():
    client, _ = replay_async_client([RECORDED / "stream_reasoning_toolcall.sse",
                                     RECORDED / "stream_reasoning_content.sse"])
    session = ChatSession("http://replay.invalid", options=ChatOptions(), tools=ToolRegistry([get_weather]),
                          http_client=client)
    view = widgets.ChatView("replay")
    turn = view.run(session, "What is the weather in Paris?")
    assert turn.error is None and turn.finish_reason == "stop"
    assert turn.reasoning and turn.content
    assert "step 0" in view.reasoning.value and "step 1" in view.reasoning.value
    assert "get_weather({&quot;city&quot;: &quot;Paris&quot;})" in view.tools.value
    assert "sunny" in view.tools.value and " ms)" in view.tools.value
    assert esc(turn.content) in view.answer.value
    assert "finish: <code>stop</code>" in view.footer.value and "requests 2" in view.footer.value


def test_chat_view_shows_the_empty_answer_notice_with_its_fix():
    client, _ = replay_async_client([RECORDED / "stream_plain.sse"])
    session = ChatSession("http://replay.invalid", options=ChatOptions(max_tokens=12), http_client=client)
    view = widgets.ChatView()
    turn = view.run(session, "Hi")
    assert turn.content == "" and turn.finish_reason == "length"
    assert "empty_answer" in view.footer.value and "Raise max_tokens" in view.footer.value
    assert "(no answer yet)" in view.answer.value


def test_chat_view_shows_a_failed_request_and_its_hint():
    session = ChatSession("http://127.0.0.1:9", options=ChatOptions(model="m"))  # nothing listens on port 9
    view = widgets.ChatView()
    turn = view.run(session, "Hi")
    assert turn.error is not None
    assert esc(turn.error.message) in view.footer.value


# ── environment checks ──────────────────────────────────────────────────────


def test_environment_checks_report_this_machine_and_never_raise(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       128452180 kB\nMemFree:  1000 kB\n")
    checks = workbench.environment_checks("nvidia/some-model", meminfo=meminfo)
    by_name = {c.name.split(" ")[0]: c for c in checks}
    assert set(by_name) == {"GPU", "memory", "docker", "model", "free"}
    memory = by_name["memory"]
    assert memory.status == "ok" and memory.found == "132 GB MemTotal"
    # This machine as it is: a GPU check that matches nvidia-smi, a Docker check that matches `docker info`.
    gpu_here = workbench.detect_hardware().gpus
    if gpu_here:
        assert gpu_here[0].name in by_name["GPU"].found
    else:
        assert by_name["GPU"].status == "missing" and "nvidia-smi" in by_name["GPU"].fix
    assert (by_name["docker"].status == "ok") == (docker_engine_problem() is None)
    for check in checks:
        assert check.status == "ok" or check.fix, f"{check.name} failed without saying what to do"
    html = widgets.checks_table(checks)
    assert "what to do" in html and "132 GB MemTotal" in html


def test_environment_checks_with_little_memory_say_what_to_lower(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       16000000 kB\n")
    [memory] = [c for c in workbench.environment_checks("x/y", meminfo=meminfo) if c.name.startswith("memory")]
    assert memory.status == "warning" and "--gpu-memory-utilization" in memory.fix


# ── live: the metrics view and the server helper against vLLM's CPU build ───


@pytest.mark.vllm
def test_throughput_view_scrapes_the_real_server(demo_server):
    view = widgets.ThroughputView(demo_server.base_url, interval=0.5)
    view.scrape()
    session = ChatSession(demo_server.base_url, options=ChatOptions(temperature=0, max_tokens=24))
    session.send("Count to ten.")
    view.scrape()
    view.poller.close()
    assert "decode tok/s" in view.table.value and "KV cache used %" in view.table.value
    assert "not reported" in view.table.value  # no speculative decoding on this server
    assert view.poller.latest.generation_tokens is not None
    # the GPUs beside the server: on a machine without one, said plainly
    if not view.gpus.latest.gpus:
        assert view.gpu_table.value.startswith("<b>GPU</b>: no NVIDIA GPU on this machine (")


@pytest.mark.vllm
def test_ensure_server_reuses_a_running_server_for_the_same_command(demo_server, tmp_path, monkeypatch):
    from workbench.server import attach, list_servers
    from workbench.server.servers import same_command

    plan = render(Selection(hardware="cpu", port=demo_server.port))
    # The session's demo server was not started by the launcher: record it as attached.
    attach(demo_server.base_url, state_dir=tmp_path)
    # An attached record has no plan, so it is not "the same command": ensure_server launches.
    assert not same_command(list_servers(tmp_path)[0], plan)
    monkeypatch.setenv(widgets.KEEP_SERVER_ENV, "1")
    panel = widgets.ServerPanel()
    server = widgets.ensure_server(plan, state_dir=tmp_path, panel=panel)
    try:
        assert server.launched and server.base_url != demo_server.base_url  # the port was taken
        assert f"Port {demo_server.port} is in use" in server.note
        assert "ready" in panel.status.value and "KV cache" in panel.status.value
        again = widgets.ensure_server(plan, state_dir=tmp_path, panel=widgets.ServerPanel())
        assert not again.launched and again.base_url == server.base_url
        assert "not ours to stop" in again.release()
        assert "Left running for the next notebook" in server.release()
        assert server.handle.is_alive()
    finally:
        monkeypatch.delenv(widgets.KEEP_SERVER_ENV)
        message = server.release()
    assert message.startswith("Stopped the server this notebook started")
    assert not server.handle.is_alive()


# ── RecipePicker: known issues and the memory planner ───────────────────────


def test_picker_shows_the_planner_for_the_demo_and_a_stand_in_on_spark(catalog, monkeypatch, tmp_path):
    from workbench.planner import config as planner_config

    planner_config.clear_cache()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path))
    picker = widgets.RecipePicker(catalog, "cpu")
    assert picker.memory is not None and picker.memory.kv_cache_tokens == 46592
    assert "CPU KV cache size: 46,592 tokens" in picker.planner.value and "<table" in picker.planner.value
    picker.hardware.value = "dgx_spark_gb10"
    # Offline, the nearest published architecture stands in, and the planner says so.
    assert picker.memory is not None and "nearest published architecture" in picker.planner.value
    assert "Known issue: --kv-cache-dtype fp8 makes engine initialisation fail" in picker.summary.value


def test_picker_plans_spark_from_a_given_config(catalog):
    from tests.test_planner import NANO_CONFIG

    picker = widgets.RecipePicker(catalog, "dgx_spark_gb10", config_path=str(NANO_CONFIG), memory_gib=121.69)
    assert picker.memory.settings.gpu_memory_utilization == 0.7 and picker.memory.layout.mamba_groups == 4
    assert "GPU KV cache size:" in picker.planner.value and "262,144" in picker.planner.value

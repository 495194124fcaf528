"""The memory planner without a server: config reading, weight counting, vLLM 0.32.0's
cache arithmetic, the recommendation, and `python -m workbench plan`.

The real-vLLM checks (the planner's numbers against vLLM's start-up line) are in
tests/test_planner_live.py; here the one recorded start-up log is used.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from workbench import cli
from workbench.errors import PlannerError
from workbench.planner import plan_command_memory, plan_memory, plan_memory_from_config, read_model_config
from workbench.planner import config as planner_config
from workbench.planner import startup_capacity
from workbench.planner.architecture import architecture_from_config
from workbench.planner.memory import cache_layout, capacity, longest_context
from workbench.planner.weights import parameter_count, weight_bytes
from workbench.recipes import Selection, load_catalog, render
from tests.helpers.hybrid_model import CONFIG as TINY_HYBRID

FIXTURES = Path(__file__).parent / "fixtures"
NANO_CONFIG = FIXTURES / "public-configs" / "nemotron-3-nano-30b-a3b.config.json"
NANO = json.loads(NANO_CONFIG.read_text())
GIB = 1 << 30


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


@pytest.fixture(autouse=True)
def fresh_config_cache(monkeypatch):
    planner_config.clear_cache()
    monkeypatch.setattr("workbench.server.hardware.detect", lambda: "cpu")
    yield
    planner_config.clear_cache()


def nano_plan(catalog, **selection):
    plan = render(Selection(**selection), catalog)
    return plan_memory(plan, catalog, config_path=NANO_CONFIG)


# ── what vLLM logged, and the planner for the same command ───────────────────


def test_recorded_demo_start_is_predicted_exactly(catalog):
    log = (FIXTURES / "launch-logs" / "startup_cpu_smollm2.log").read_text()
    logged = startup_capacity(log)
    assert (logged.device, logged.kv_cache_tokens, logged.max_model_len, logged.max_concurrency) == (
        "CPU", 46592, 4096, 11.38)
    memory = plan_memory(render(Selection(hardware="cpu"), catalog), catalog)
    assert memory.startup_line() in logged.line
    assert memory.capacity.num_blocks == 364 and memory.layout.block_size == 128


def test_startup_line_of_older_builds_on_two_lines():
    text = ("INFO [kv_cache_utils.py:2459] GPU KV cache size: 443,242 tokens\n"
            "INFO [kv_cache_utils.py:2460] Maximum concurrency for 384,000 tokens per request: 1.15x\n")
    got = startup_capacity(text)
    assert (got.device, got.kv_cache_tokens, got.max_model_len, got.max_concurrency) == ("GPU", 443242, 384000, 1.15)
    assert startup_capacity("INFO nothing yet") is None


# ── the architecture and its weights ─────────────────────────────────────────


def _transformers_count(model_cls, config_cls, values):
    import torch

    with torch.device("meta"):
        model = model_cls(config_cls(**values))
    return sum(p.numel() for p in model.parameters()) + sum(b.numel() for b in model.buffers())


def test_nano_config_counts_the_parameters_transformers_builds():
    import transformers

    arch = architecture_from_config(NANO)
    assert (arch.attention_layers, arch.mamba_layers, arch.layer_kinds.count("moe")) == (6, 23, 23)
    values = {k: v for k, v in NANO.items() if k not in ("architectures", "model_type", "dtype")}
    assert parameter_count(arch) == _transformers_count(
        transformers.NemotronHForCausalLM, transformers.NemotronHConfig, values) == 31_577_940_288


def test_latent_moe_and_layer_list_configs_count_like_transformers():
    import transformers

    values = dict(TINY_HYBRID, hybrid_override_pattern="M*EME-", vocab_size=512, n_routed_experts=4,
                  num_experts_per_tok=2, moe_intermediate_size=48, moe_shared_expert_intermediate_size=32,
                  moe_latent_size=24)
    expected = _transformers_count(transformers.NemotronHForCausalLM, transformers.NemotronHConfig, values)
    assert parameter_count(architecture_from_config({"model_type": "nemotron_h", **values})) == expected
    # The newer spelling (what transformers writes today) reads the same.
    listed = {k: v for k, v in values.items() if k != "hybrid_override_pattern"}
    listed["layers_block_type"] = ["linear_attention", "full_attention", "moe", "mamba", "moe", "mlp"]
    assert parameter_count(architecture_from_config({"model_type": "nemotron_h", **listed})) == expected


def test_demo_model_weights_are_counted_in_the_served_dtype(catalog):
    memory = plan_memory(render(Selection(hardware="cpu"), catalog), catalog)
    # float32 on disk, served as bfloat16 (vLLM's auto dtype downcasts float32 checkpoints).
    assert memory.architecture.config_dtype == "float32" and memory.architecture.model_dtype == "bfloat16"
    assert memory.weights.exact and memory.weights.bytes == 134_515_008 * 2


def test_nvfp4_weights_are_an_estimate_and_an_index_makes_them_exact():
    arch = architecture_from_config(NANO)
    estimate = weight_bytes(arch, "nvfp4")
    assert not estimate.exact and "estimate" in estimate.how
    bf16 = weight_bytes(arch, "bf16")
    assert bf16.exact and bf16.bytes == 31_577_940_288 * 2
    assert bf16.bytes / 4 < estimate.bytes < bf16.bytes / 2  # 4.5 bits for most, 16 for embeddings
    quantized = architecture_from_config({**NANO, "quantization_config": {"quant_method": "modelopt",
                                                                           "quant_algo": "NVFP4"}})
    exact = weight_bytes(quantized, "nvfp4", index_total_size=19_000_000_000)
    assert exact.exact and exact.bytes == 19_000_000_000


def test_unmodelled_architectures_are_refused_with_the_reason():
    with pytest.raises(PlannerError, match="sliding-window"):
        architecture_from_config({"model_type": "mistral", "sliding_window": 4096, "num_hidden_layers": 2,
                                  "num_attention_heads": 2, "hidden_size": 64, "vocab_size": 10})
    with pytest.raises(PlannerError, match="names no layers"):
        architecture_from_config({"model_type": "nemotron_h", "hidden_size": 64, "num_attention_heads": 2,
                                  "vocab_size": 10})


# ── vLLM 0.32.0's arithmetic ─────────────────────────────────────────────────


def test_hybrid_page_alignment_groups_and_capacity_follow_vllm():
    # The worked example of the research notes, derived from vLLM 0.32.0's source
    # (40 GiB for the cache, 262,144 tokens, fp8 KV, fp16 SSM state, align mode).
    arch = architecture_from_config(NANO)
    layout = cache_layout(arch, platform="gpu", kv_dtype="fp8", conv_dtype="bfloat16", ssm_dtype="float16",
                          mamba_mode="align")
    assert layout.attention_bytes_per_token_per_layer == 512 and layout.kv_bytes_per_token == 3072
    assert layout.conv_state_bytes == 3 * 6144 * 2 and layout.ssm_state_bytes == 64 * 64 * 128 * 2
    assert layout.block_size == 2128 and layout.page_bytes == 2128 * 512 == 1_089_536
    assert (layout.attention_groups, layout.mamba_groups, layout.group_size, layout.padding_layers) == (1, 4, 6, 1)
    cap = capacity(layout, 40 * GIB, 262144)
    assert (cap.num_blocks, cap.blocks_per_request, cap.kv_cache_tokens) == (6570, 124 + 4 * 3, 12_663_868)
    assert f"{cap.max_concurrency:.2f}" == "48.31"
    # fp8 halves the KV bytes; bf16 KV with an fp32 SSM state doubles the page.
    bf16 = cache_layout(arch, platform="gpu", kv_dtype="bfloat16", conv_dtype="bfloat16", ssm_dtype="float32",
                        mamba_mode="none")
    assert bf16.kv_bytes_per_token == 2 * layout.kv_bytes_per_token and bf16.mamba_blocks_per_group == 1


def test_speculative_tokens_and_tensor_parallel_change_the_state():
    arch = architecture_from_config(NANO)
    common = dict(platform="gpu", kv_dtype="fp8", conv_dtype="bfloat16", ssm_dtype="float16", mamba_mode="align")
    spec = cache_layout(arch, num_speculative_tokens=3, **common)
    assert spec.conv_state_bytes == (3 + 3) * 6144 * 2 and spec.mamba_blocks_per_group == 3 + 3
    tp2 = cache_layout(arch, tensor_parallel_size=2, **common)
    assert tp2.attention_bytes_per_token_per_layer == 256 and tp2.ssm_state_bytes == 32 * 64 * 128 * 2


def test_longest_context_is_the_inverse_of_capacity():
    arch = architecture_from_config(NANO)
    layout = cache_layout(arch, platform="gpu", kv_dtype="fp8", conv_dtype="bfloat16", ssm_dtype="float16",
                          mamba_mode="align")
    longest = longest_context(layout, 6570, 64, 1 << 30)
    assert longest % layout.block_size == 0
    assert capacity(layout, 6570 * layout.bytes_per_block, longest).max_concurrency >= 64
    assert capacity(layout, 6570 * layout.bytes_per_block, longest + layout.block_size).max_concurrency < 64


# ── settings read from the command, with vLLM's defaults ─────────────────────


def test_the_spark_plan_reads_its_flags_and_vllms_defaults(catalog):
    memory = nano_plan(catalog, hardware="dgx_spark_gb10")
    s = memory.settings
    assert s.gpu_memory_utilization == 0.7 and s.kv_cache_dtype == "fp8" and s.ssm_state_dtype == "float16"
    assert s.prefix_caching and s.mamba_mode == "align"
    assert s.max_model_len == 262144 and s.max_num_seqs == 1024  # vLLM's default for >= 70 GiB
    assert not memory.budget.exact and memory.budget.requested_bytes == int(128 * GIB * 0.7) + 1
    assert memory.budget.available_bytes == (memory.budget.requested_bytes - memory.budget.weight_bytes
                                             - memory.budget.held_back_bytes)
    assert any("121.69 GiB" in n for n in memory.notes)
    ids = [k.id for k in memory.known_issues]
    assert "gb10-fp8-kv-cache" in ids


def test_dotted_speculative_flags_of_the_card_preset_count(catalog):
    memory = nano_plan(catalog, preset="dgx_spark_quickstart")
    assert memory.settings.num_speculative_tokens == 3 and memory.settings.speculative_method == "draft model"
    assert memory.layout.mamba_blocks_per_group == 6
    assert any("drafter's own weights" in n for n in memory.notes)


def test_auto_kv_dtype_follows_a_modelopt_checkpoint(catalog):
    plan = render(Selection(hardware="h200", variant="bf16"), catalog)
    config = read_model_config(plan.model_id, config_path=NANO_CONFIG)
    plain = plan_memory_from_config(plan, catalog, config)
    assert plain.settings.kv_cache_dtype == "bfloat16" and "model's dtype" in plain.settings.kv_cache_dtype_why
    fp8 = {**NANO, "quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4",
                                           "kv_cache_quant_algo": "FP8"}}
    quantized = planner_config.ModelConfigFile(plan.model_id, fp8, "test")
    assert plan_memory_from_config(plan, catalog, quantized).settings.kv_cache_dtype == "fp8_e4m3"


def test_mamba_cache_mode_none_with_prefix_caching_on_is_overridden_and_said(catalog):
    memory = nano_plan(catalog, hardware="rtx_pro_6000")
    assert memory.settings.mamba_mode == "align"
    assert any("--mamba-cache-mode none is overridden" in n for n in memory.notes)


# ── the recommendation and the Mamba-blocks check ────────────────────────────


def test_too_many_sequences_for_the_mamba_blocks_is_flagged_with_the_known_issue(catalog):
    memory = nano_plan(catalog, hardware="h200", extra=["--max-num-seqs 2000"])
    small = plan_memory(render(Selection(hardware="h200", extra=["--max-num-seqs 2000"]), catalog), catalog,
                        config_path=NANO_CONFIG, memory_gib=30)
    rec = small.recommendation
    assert rec.mamba_block_limit == small.capacity.num_blocks < 2000 and rec.max_num_seqs_exceeds_mamba_blocks
    assert rec.max_num_seqs <= rec.mamba_block_limit
    assert any("exceeds the" in line and "Mamba cache blocks" in line for line in rec.lines)
    issue = next(k for k in small.known_issues if k.id == "max-num-seqs-above-mamba-cache-blocks")
    assert f"> {small.capacity.num_blocks:,} Mamba cache blocks" in issue.matched
    assert not memory.recommendation.max_num_seqs_exceeds_mamba_blocks  # 141 GiB holds 2000
    eager = plan_memory(render(Selection(hardware="h200", extra=["--max-num-seqs 2000 --enforce-eager"]), catalog),
                        catalog, config_path=NANO_CONFIG, memory_gib=30)
    assert eager.recommendation.mamba_block_limit is None  # no CUDA graphs, no check


def test_a_context_that_does_not_fit_gets_the_longest_that_does(catalog):
    memory = nano_plan(catalog, hardware="h200", max_model_len=1048576, extra=["--kv-cache-memory-bytes 1G"])
    assert memory.budget.exact and memory.budget.available_bytes == 1 << 30
    assert not memory.capacity.fits_one_request
    rec = memory.recommendation
    assert 0 < rec.max_model_len < 1048576 and "does not fit one request" in rec.lines[0]


def test_table_runs_from_4k_to_the_model_maximum(catalog):
    memory = nano_plan(catalog, hardware="h200")
    contexts = [r.context for r in memory.table]
    assert contexts[0] == 4096 and contexts[-1] == 262144 and contexts == sorted(contexts)
    concurrency = [r.max_concurrency for r in memory.table]
    assert concurrency == sorted(concurrency, reverse=True)


def test_command_level_planning_needs_no_recipe(catalog):
    config = planner_config.ModelConfigFile("tiny", {"model_type": "nemotron_h", "vocab_size": 1000,
                                                     **TINY_HYBRID}, "test")
    memory = plan_command_memory("tiny", ["vllm", "serve", "tiny", "--max-model-len", "2k"],
                                 {"VLLM_CPU_KVCACHE_SPACE": "1"}, config, catalog.hardware["cpu"])
    assert memory.settings.max_model_len == 2000 and memory.budget.exact
    assert memory.layout.block_size == 128 and memory.layout.mamba_groups == 3


# ── reading config.json ──────────────────────────────────────────────────────


def test_offline_without_a_cached_config_says_what_it_needs(catalog, monkeypatch, tmp_path):
    # A model the workbench ships no figures for (the recipes' models all have some:
    # tests/test_planner_offline.py).
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path))
    model_id = "acme/not-shipped-7b"
    with pytest.raises(PlannerError) as err:
        read_model_config(model_id)
    assert f"needs {model_id}'s config.json" in err.value.message and "HF_HUB_OFFLINE=1" in err.value.message
    assert f"hf download {model_id} config.json" in err.value.hint and "config" in err.value.settings


def test_config_is_read_from_the_hugging_face_cache(catalog, monkeypatch, tmp_path):
    plan = render(Selection(hardware="h200"), catalog)
    repo = tmp_path / ("models--" + plan.model_id.replace("/", "--"))
    snapshot = repo / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123")
    (snapshot / "config.json").write_text(NANO_CONFIG.read_text())
    (snapshot / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": 123}}))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path))
    found = read_model_config(plan.model_id)
    assert "Hugging Face cache" in found.source and found.data["hidden_size"] == 2688 and found.index_total_size == 123


def test_a_bad_config_path_is_a_clear_error(tmp_path):
    with pytest.raises(PlannerError, match="no such file"):
        read_model_config("x/y", config_path=tmp_path / "missing.json")
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(PlannerError, match="not valid JSON"):
        read_model_config("x/y", config_path=tmp_path)


# ── python -m workbench plan ─────────────────────────────────────────────────


def test_cli_json_carries_the_capacity(capsys):
    code = cli.main(["plan", "--hardware", "cpu", "--format", "json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["kv_cache_tokens"] == 46592 and out["max_concurrency"] == pytest.approx(11.375)
    assert out["table"][0]["context"] == 4096 and out["budget"]["exact"] is True


def test_cli_text_with_config_and_overrides(capsys):
    code = cli.main(["plan", "--hardware", "dgx_spark_gb10", "--config", str(NANO_CONFIG), "--memory-gb", "121.69",
                     "--gpu-memory-utilization", "0.8", "--max-model-len", "65536", "--max-num-seqs", "8"])
    out = capsys.readouterr().out
    assert code == 0
    assert "121.69 GiB x 0.8" in out and "at 65,536 tokens" in out
    assert "vLLM should log: GPU KV cache size:" in out and "Maximum concurrency for 65,536 tokens" in out
    assert "known issue: --kv-cache-dtype fp8 makes engine initialisation fail on DGX Spark" in out
    assert "All 8 sequences" in out


def test_cli_config_error_exits_2_with_the_hint(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path))
    code = cli.main(["plan", "--hardware", "dgx_spark_gb10", "--config", str(tmp_path / "missing.json")])
    err = capsys.readouterr().err
    assert code == 2 and "config.json" in err and "On the command line: --config." in err


def test_cli_refuses_another_engine(capsys):
    code = cli.main(["plan", "--preset", "trtllm_mtp", "--config", str(NANO_CONFIG)])
    assert code == 2 and "planner models vLLM" in capsys.readouterr().err


def test_recipe_tab_planner_gives_the_table_offline_too(catalog, monkeypatch, tmp_path):
    from workbench.ui.recipe_tab import planner_outputs

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path))
    demo = render(Selection(hardware="cpu"), catalog).to_dict()
    text, rows = planner_outputs(catalog, demo, None, "")
    assert "vLLM should log: CPU KV cache size: 46,592 tokens" in text
    assert rows[0] == ["4,096", "11.38", "46,592"]
    spark = render(Selection(hardware="dgx_spark_gb10"), catalog).to_dict()
    text, rows = planner_outputs(catalog, spark, None, "")
    # Offline, the nearest published architecture stands in, said so, with how to get the real one.
    assert rows and "nearest published architecture" in text and "hf download" in text
    text, rows = planner_outputs(catalog, spark, 121.69, f"  {NANO_CONFIG}  ")
    assert "121.69 GiB x 0.7" in text and rows[-1][0] == "262,144"

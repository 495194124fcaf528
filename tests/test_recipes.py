"""Recipes: golden renders against the seed page and the model card, fallbacks,
provenance, user overrides and validation errors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import workbench
from workbench.errors import RecipeError, SelectionError
from workbench.recipes import (
    Catalog, LaunchPlan, Selection, dedupe_args, default_recipes_dir, load_catalog, render, shell_quote,
)

NEMO = "nvidia/NVIDIA-Nemotron-3.5-Lightning-30B-A3B-BF16"
NVFP4 = "nvidia/NVIDIA-Nemotron-3.5-Lightning-30B-A3B-NVFP4"
DSPARK = "nvidia/NVIDIA-Nemotron-3.5-Lightning-30B-A3B-NVFP4-DSpark"

# The seed page's Serve section (hardware h200, single_node_tp, default variant).
SEED_ARGV = ["vllm", "serve", NVFP4,
    "--mamba-backend", "flashinfer",
    "--mamba-cache-mode", "align",
    "--enable-prefix-caching",
    "--kv-cache-dtype", "fp8",
    "--tensor-parallel-size", "1",
    "--quantization", "modelopt_fp4",
    "--moe-backend", "humming",
    "--linear-backend", "humming",
    "--mamba-ssu-algorithm", "horizontal",
    "--async-scheduling",
    "--max-num-seqs", "256",
    "--max-num-batched-tokens", "32768",
    "--reasoning-parser", "nemotron_v3",
    "--enable-auto-tool-choice",
    "--tool-call-parser", "qwen3_coder",
    "--mamba-ssm-cache-dtype", "float16",
    "--enable-mamba-cache-stochastic-rounding",
    "--mamba-cache-philox-rounds", "5",
]
SEED_DOCKER_HEAD = ["docker", "run", "--gpus", "all", "--privileged", "--ipc=host", "-p", "8000:8000",
                    "-v", "~/.cache/huggingface:/root/.cache/huggingface", "vllm/vllm-openai:v0.28.0"]
SEED_SERVE_TEXT = "vllm serve " + NVFP4 + " \\\n  " + " \\\n  ".join([
    "--mamba-backend flashinfer", "--mamba-cache-mode align", "--enable-prefix-caching",
    "--kv-cache-dtype fp8", "--tensor-parallel-size 1", "--quantization modelopt_fp4",
    "--moe-backend humming", "--linear-backend humming", "--mamba-ssu-algorithm horizontal",
    "--async-scheduling", "--max-num-seqs 256", "--max-num-batched-tokens 32768",
    "--reasoning-parser nemotron_v3", "--enable-auto-tool-choice", "--tool-call-parser qwen3_coder",
    "--mamba-ssm-cache-dtype float16", "--enable-mamba-cache-stochastic-rounding",
    "--mamba-cache-philox-rounds 5"])
SEED_DOCKER_TEXT = SEED_SERVE_TEXT.replace(
    "vllm serve " + NVFP4,
    "docker run --gpus all \\\n  --privileged --ipc=host -p 8000:8000 \\\n"
    "  -v ~/.cache/huggingface:/root/.cache/huggingface \\\n  vllm/vllm-openai:v0.28.0 " + NVFP4)

# The model card's commands, flags in the card's order, $MODEL_CKPT / $DSPARK_CKPT substituted.
CARD = {
    "dgx_spark_quickstart": "--moe-backend marlin --kv-cache-dtype fp8 --enable-prefix-caching "
        "--gpu-memory-utilization 0.85 --speculative_config.num_speculative_tokens 3 --mamba-backend flashinfer "
        f"--mamba-cache-mode align --reasoning-parser nemotron_v3 --speculative_config.model {DSPARK} "
        "--tool-call-parser qwen3_coder --enable-auto-tool-choice",
    "max_throughput": "--max-num-seqs 256 --max-num-batched-tokens 16384 --enable-prefix-caching "
        "--async-scheduling --mamba-backend flashinfer --moe-backend humming --linear-backend humming "
        "--mamba-ssu-algorithm horizontal --mamba-cache-mode align --mamba-ssm-cache-dtype float16 "
        "--enable-mamba-cache-stochastic-rounding --mamba-cache-philox-rounds 5 --reasoning-parser nemotron_v3 "
        "--tool-call-parser qwen3_coder --enable-auto-tool-choice",
    "interactive": f"--max-num-seqs 128 --enable-prefix-caching --async-scheduling --speculative_config.model {DSPARK} "
        "--speculative_config.num_speculative_tokens 3 --mamba-backend flashinfer --mamba-ssm-cache-dtype float16 "
        "--mamba-cache-mode align --enable-mamba-cache-stochastic-rounding --mamba-cache-philox-rounds 5 "
        "--reasoning-parser nemotron_v3 --tool-call-parser qwen3_coder --enable-auto-tool-choice",
    "long_context_tp8_ep": "--mamba-backend flashinfer --async-scheduling --enable-prefix-caching "
        "--mamba-cache-mode align --enable-expert-parallel --tensor-parallel-size 8 --reasoning-parser nemotron_v3 "
        "--tool-call-parser qwen3_coder --enable-auto-tool-choice",
    "low_latency": f"--max-num-batched-tokens 10240 --no-enable-prefix-caching --async-scheduling "
        f"--speculative_config.model {DSPARK} --speculative_config.num_speculative_tokens 5 "
        "--mamba-backend flashinfer --reasoning-parser nemotron_v3 --tool-call-parser qwen3_coder "
        "--enable-auto-tool-choice",
    "a100_w4a16": "--moe-backend humming --linear-backend humming --max-num-seqs 256 --max-num-batched-tokens 32768 "
        "--enable-prefix-caching --async-scheduling --quantization modelopt_fp4 --mamba-backend flashinfer "
        "--mamba-cache-mode align --mamba-ssu-algorithm simple --reasoning-parser nemotron_v3 "
        "--tool-call-parser qwen3_coder --enable-auto-tool-choice",
}


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load_catalog()


def nemo(catalog, **kw) -> LaunchPlan:
    return render(Selection(recipe=NEMO, **kw), catalog)


def test_recipes_dir_resolves_from_package_and_env(monkeypatch, tmp_path):
    monkeypatch.delenv("WORKBENCH_RECIPES_DIR", raising=False)
    assert default_recipes_dir() == Path(workbench.__file__).resolve().parent.parent / "recipes"
    monkeypatch.setenv("WORKBENCH_RECIPES_DIR", str(tmp_path))
    assert default_recipes_dir() == tmp_path


def test_default_h200_render_is_the_seed(catalog):
    plan = nemo(catalog)
    assert plan.hardware == "h200" and plan.variant == "default" and plan.strategy == "single_node_tp"
    assert plan.argv == SEED_ARGV
    assert plan.docker_argv == SEED_DOCKER_HEAD + SEED_ARGV[2:]
    assert plan.shell_command() == SEED_SERVE_TEXT
    assert plan.docker_command() == SEED_DOCKER_TEXT
    assert plan.env == {} and plan.fallbacks == []
    assert plan.docker_image == "vllm/vllm-openai:v0.28.0"
    assert plan.min_vllm_version == "0.27.1"
    # The page's three lines: a fresh environment, activated, then vLLM.
    assert plan.install_steps == ["uv venv", "source .venv/bin/activate", "uv pip install -U vllm --torch-backend auto"]
    assert plan.features == ["reasoning", "tool_calling", "mamba_fast_ssm_cache"]
    assert plan.engine == "vllm" and plan.port == 8000 and plan.served_model_name == NVFP4
    # The strategy env is left out at TP=1, and the plan says so.
    assert any("VLLM_ALLREDUCE_USE_FLASHINFER=1" in n and "left out" in n for n in plan.notes)


def test_render_is_deterministic_and_json_safe(catalog):
    a, b = nemo(catalog).to_dict(), nemo(catalog).to_dict()
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    again = LaunchPlan.from_dict(json.loads(json.dumps(a)))
    assert again.argv == SEED_ARGV and again.shell_command() == SEED_SERVE_TEXT


def test_provenance_names_the_layer_of_every_flag(catalog):
    plan = nemo(catalog, extra=["--max-num-seqs 64"])
    flags = [t for t in plan.argv[3:] if t.startswith("--")]
    assert list(plan.provenance) == flags
    assert plan.provenance["--mamba-backend"] == "base"
    assert plan.provenance["--kv-cache-dtype"] == "variant"
    assert plan.provenance["--tensor-parallel-size"] == "strategy"
    assert plan.provenance["--moe-backend"] == "hardware:hopper"
    assert plan.provenance["--reasoning-parser"] == "feature:reasoning"
    assert plan.provenance["--mamba-cache-philox-rounds"] == "feature:mamba_fast_ssm_cache"
    assert plan.provenance["--max-num-seqs"] == "user"
    spark = nemo(catalog, hardware="dgx_spark_gb10", spec="dspark")
    assert spark.provenance["--gpu-memory-utilization"] == "variant:hardware"
    assert spark.provenance["--speculative-config"] == "mode:dspark"
    assert nemo(catalog, preset="low_latency").provenance["--no-enable-prefix-caching"] == "preset:low_latency"


def test_bf16_sets_fastokens_and_installs_it(catalog):
    plan = nemo(catalog, variant="bf16")
    assert plan.model_id == NEMO and plan.argv[2] == NEMO
    assert plan.env == {"VLLM_USE_FASTOKENS": "1"}
    assert 'uv pip install "fastokens>=0.2.0"' in plan.install_steps
    assert ["-e", "VLLM_USE_FASTOKENS=1"] == plan.docker_argv[10:12]
    assert plan.shell_command().startswith("VLLM_USE_FASTOKENS=1 vllm serve " + NEMO)
    assert "--moe-backend" in plan.argv and plan.argv[plan.argv.index("--moe-backend") + 1] == "flashinfer_cutlass"
    assert "fastokens" not in " ".join(nemo(catalog).install_steps)


@pytest.mark.parametrize("name", sorted(CARD))
def test_every_model_card_preset_reproduces_its_command(catalog, name):
    plan = nemo(catalog, preset=name)
    assert plan.argv == ["vllm", "serve", NVFP4, *CARD[name].split()]
    assert plan.preset == name and plan.engine == "vllm" and plan.fallbacks == []
    assert plan.docker_argv[-len(plan.argv) + 2 :] == plan.argv[2:]


def test_preset_picks_its_hardware_and_notes_a_mismatch(catalog):
    assert nemo(catalog, preset="dgx_spark_quickstart").hardware == "dgx_spark_gb10"
    assert nemo(catalog, preset="a100_w4a16").hardware == "a100"
    plan = nemo(catalog, preset="a100_w4a16", hardware="h200")
    assert plan.argv == ["vllm", "serve", NVFP4, *CARD["a100_w4a16"].split()]
    assert any("written for a100" in n for n in plan.notes)
    plan = nemo(catalog, preset="interactive", spec="mtp", variant="bf16")
    assert {f.choice for f in plan.fallbacks} == {"spec", "variant"}


def test_trtllm_preset_is_another_engine(catalog):
    plan = nemo(catalog, preset="trtllm_mtp")
    assert plan.engine == "trtllm"
    assert plan.argv == ["trtllm-serve", NVFP4, "--max_batch_size", "8", "--max_num_tokens", "8192",
                         "--reasoning_parser", "nemotron-v3", "--tool_parser", "qwen3_coder",
                         "--config", "nemotron-35-lightning-nvfp4-mtp.yaml"]
    assert plan.docker_image == "nvcr.io/nvidia/tensorrt-llm/release:1.3.0rc24"
    text = plan.config_files["nemotron-35-lightning-nvfp4-mtp.yaml"]
    assert "decoding_type: MTP" in text and "max_draft_len: 3" in text and "backend: MARLIN" in text
    assert any("Another engine" in n for n in plan.notes)
    assert plan.shell_command(multiline=False).startswith("trtllm-serve " + NVFP4 + " --max_batch_size 8")
    assert "trtllm-serve" in plan.docker_argv and "nvcr.io" in plan.docker_command()


def test_trtllm_in_docker_listens_beyond_the_container_and_gets_only_its_own_options(catalog):
    # trtllm-serve's --host defaults to "localhost" (TensorRT-LLM tensorrt_llm/commands/serve.py):
    # behind `docker run -p 8000:8000` that is unreachable, so the container's command binds 0.0.0.0.
    plan = nemo(catalog, preset="trtllm_mtp", port=9001, served_model_name="nemo", max_model_len=65536,
                extra=["--max-num-seqs 8"])
    image = plan.docker_argv.index(plan.docker_image)
    assert plan.docker_argv[image + 1:][-2:] == ["--host", "0.0.0.0"] and "9001:9001" in plan.docker_argv
    assert "--host" not in plan.argv  # on the host it stays on localhost
    # No --served_model_name (trtllm-serve has none), --max_seq_len for --max-model-len.
    assert "--served_model_name" not in plan.argv and "--served-model-name" not in plan.argv
    assert plan.argv[plan.argv.index("--max_seq_len") + 1] == "65536" and "--port" in plan.argv
    assert plan.served_model_name == NVFP4
    assert any("--served-model-name nemo is not passed: trtllm-serve has no such option" in n for n in plan.notes)
    assert any("vLLM's spelling" in n and "--max-num-seqs" in n for n in plan.notes)


def test_dspark_on_bf16_falls_back_to_mtp_and_says_why(catalog):
    plan = nemo(catalog, variant="bf16", spec="dspark")
    assert plan.spec_mode == "mtp"
    [fb] = plan.fallbacks
    assert (fb.choice, fb.asked, fb.used) == ("spec", "dspark", "mtp")
    assert "no DSpark draft" in fb.reason and "bf16" in fb.reason
    assert plan.argv[-2:] == ["--speculative-config", '{"method":"mtp","num_speculative_tokens":3}']
    assert "spec_decoding" in plan.features  # --spec implies the feature


def test_spec_modes_follow_hardware_overrides(catalog):
    assert nemo(catalog, spec="dspark").argv[-1].endswith('"num_speculative_tokens":3}')
    assert '"num_speculative_tokens":7' in nemo(catalog, hardware="dgx_spark_gb10", spec="dspark").argv[-1]
    assert '"moe_backend":"triton"' in nemo(catalog, hardware="b200", spec="mtp").argv[-1]
    # Without --spec, turning the feature on uses the default mode.
    assert '"method":"dspark"' in nemo(catalog, features=["spec_decoding"]).argv[-1]
    plan = nemo(catalog, features=["spec_decoding"], variant="bf16")
    assert '"method":"mtp"' in plan.argv[-1] and any("defaults to dspark" in n for n in plan.notes)


def test_typos_raise_selection_error_listing_valid_values(catalog):
    with pytest.raises(SelectionError) as e:
        nemo(catalog, hardware="h201")
    assert "did you mean 'h200'" in e.value.message and "dgx_spark_gb10" in e.value.hint
    for kw in ({"variant": "bf61"}, {"strategy": "single_node_tpp"}, {"spec": "dsprak"},
               {"preset": "low_latncy"}, {"features": ["reasoningg"]}, {"hardware": "h 200!"}):
        with pytest.raises(SelectionError) as e:
            nemo(catalog, **kw)
        assert "valid" in e.value.hint
    with pytest.raises(SelectionError):
        render(Selection(recipe="no-such-recipe-xyz"), catalog)


def test_unknown_names_are_refused_with_the_valid_ones(catalog):
    # A name nobody knows is a mistake to fix, not a choice to fall back from (issue 14):
    # rendering H200's plan for "mi300x" looked like an answer.
    with pytest.raises(SelectionError) as err:
        nemo(catalog, hardware="mi300x")
    assert err.value.message == "unknown hardware 'mi300x'; did you mean 'b300'?"
    assert err.value.hint.startswith("valid hardware values: h100, h200, b200")
    with pytest.raises(SelectionError, match="unknown variant 'fp8'"):
        nemo(catalog, variant="fp8")
    for kind in ("strategy", "spec", "preset"):
        with pytest.raises(SelectionError, match=f"unknown {kind} 'nosuch'"):
            nemo(catalog, **{kind: "nosuch"})


def test_incompatible_choices_fall_back_never_crash(catalog):
    plan = nemo(catalog, hardware="cpu")
    assert plan.hardware == "h200"
    assert plan.fallbacks[0].choice == "hardware" and "GPU-only" in plan.fallbacks[0].reason
    plan = nemo(catalog, hardware="dgx_spark_gb10", strategy="single_node_tep")
    assert plan.strategy == "single_node_tp" and "at least 2 GPUs" in plan.fallbacks[0].reason
    plan = nemo(catalog, hardware="dgx_station_gb300", strategy="multi_node_tp", nodes=2)
    assert plan.strategy == "single_node_tp" and plan.nodes == 1
    demo = render(Selection(recipe="Qwen3-0.6B", hardware="h200"), catalog)
    assert demo.hardware == "cpu" and demo.fallbacks[0].choice == "hardware"


def test_builtin_nvfp4_rule_needs_blackwell(catalog, tmp_path):
    root = _copy_recipes(tmp_path)
    path = root / "models/nvidia/NVIDIA-Nemotron-3.5-Lightning-30B-A3B-BF16.yaml"
    path.write_text(path.read_text().replace("    precision_hardware:\n      brand: NVIDIA\n", ""))
    cat = load_catalog(root)
    plan = render(Selection(recipe=NEMO, hardware="h200"), cat)
    assert plan.variant == "bf16" and any("needs NVIDIA blackwell" in n for n in plan.notes)
    plan = render(Selection(recipe=NEMO, hardware="h200", variant="default"), cat)
    assert plan.variant == "bf16" and plan.fallbacks[0].choice == "variant"
    assert render(Selection(recipe=NEMO, hardware="b200"), cat).variant == "default"


def test_extra_overrides_same_named_flags_in_place(catalog):
    plan = nemo(catalog, extra=["--max-num-seqs 64 --kv-cache-dtype auto", "--enforce-eager"])
    assert plan.argv[-5:] == ["--max-num-seqs", "64", "--kv-cache-dtype", "auto", "--enforce-eager"]
    assert plan.argv.count("--max-num-seqs") == 1 and plan.argv.count("--kv-cache-dtype") == 1


def test_user_options_add_flags_only_when_given(catalog):
    assert nemo(catalog, port=8000).argv == SEED_ARGV
    plan = nemo(catalog, port=9001, served_model_name="nemo", max_model_len=65536)
    i = plan.argv.index("--port")
    assert plan.argv[i : i + 6] == ["--port", "9001", "--served-model-name", "nemo", "--max-model-len", "65536"]
    assert plan.served_model_name == "nemo" and plan.port == 9001 and "9001:9001" in plan.docker_argv
    # A later feature wins over the user's option, and the plan says so.
    plan = nemo(catalog, max_model_len=65536, features=["reasoning", "long_context"])
    assert plan.argv[plan.argv.index("--max-model-len") + 1] == "1048576"
    assert plan.env == {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"}
    assert any("--max-model-len 65536 was replaced" in n for n in plan.notes)


def test_tp_auto_fit_and_strategy_env(catalog):
    assert nemo(catalog, hardware="h100", variant="bf16").tensor_parallel_size == 1
    plan = nemo(catalog, hardware="h100", strategy="single_node_tep")
    assert plan.tensor_parallel_size == 8 and "--enable-expert-parallel" in plan.argv
    assert plan.provenance["--enable-expert-parallel"] == "strategy"


def test_variant_tp_map_and_strategy_env_when_tp_above_one(tmp_path):
    root = _copy_recipes(tmp_path)
    path = root / "models/nvidia/NVIDIA-Nemotron-3.5-Lightning-30B-A3B-BF16.yaml"
    path.write_text(path.read_text().replace("    vram_minimum_gb: 72\n", "    vram_minimum_gb: 72\n    tp: {hopper: 2, default: 4}\n"))
    cat = load_catalog(root)
    plan = render(Selection(recipe=NEMO, hardware="h200", variant="bf16"), cat)
    assert plan.tensor_parallel_size == 2
    assert plan.env == {"VLLM_USE_FASTOKENS": "1", "VLLM_ALLREDUCE_USE_FLASHINFER": "1"}
    assert render(Selection(recipe=NEMO, hardware="b200", variant="bf16"), cat).tensor_parallel_size == 4


def test_multi_node_renders_head_and_workers(catalog):
    plan = nemo(catalog, hardware="h200", strategy="multi_node_tp", nodes=3)
    assert plan.deploy_type == "multi_node" and plan.tensor_parallel_size == 24
    a = plan.argv
    assert a[a.index("--tensor-parallel-size") + 1] == "24"
    assert a[a.index("--nnodes") + 1] == "3" and a[a.index("--node-rank") + 1] == "0"
    assert a[a.index("--master-addr") + 1] == "$HEAD_IP" and "--headless" not in a
    assert len(plan.worker_argvs) == 2 and len(plan.worker_docker_argvs) == 2
    for rank, w in enumerate(plan.worker_argvs, start=1):
        assert w[w.index("--node-rank") + 1] == str(rank) and "--headless" in w
    assert plan.env == {"GLOO_SOCKET_IFNAME": "$IFACE_NAME", "NCCL_SOCKET_IFNAME": "$IFACE_NAME"}
    assert "--master-addr $HEAD_IP" in plan.shell_command()
    assert "-e GLOO_SOCKET_IFNAME=$IFACE_NAME" in plan.docker_command(worker=0)
    # Nodes without a strategy picks multi-node TP; a multi-node strategy needs >= 2.
    assert nemo(catalog, nodes=2).strategy == "multi_node_tp"
    plan = nemo(catalog, strategy="multi_node_tep", nodes=1)
    assert plan.nodes == 2 and plan.fallbacks[0].choice == "nodes"
    plan = nemo(catalog, strategy="single_node_tp", nodes=4)
    assert plan.nodes == 1 and plan.fallbacks[0].choice == "nodes"


def test_cpu_demo_recipe(catalog):
    plan = render(Selection(hardware="cpu"), catalog)
    assert plan.recipe_id == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert plan.argv == ["vllm", "serve", "HuggingFaceTB/SmolLM2-135M-Instruct",
                         "--max-model-len", "4096", "--enable-prompt-tokens-details", "--tensor-parallel-size", "1",
                         "--enforce-eager", "--enable-per-request-metrics"]
    assert plan.provenance["--enforce-eager"] == "hardware:cpu"
    assert plan.env == {"VLLM_CPU_KVCACHE_SPACE": "1"}
    assert plan.local_build == "smollm2-135m-instruct"
    assert any("GPU-only" in n and "SmolLM2" in n for n in plan.notes)
    assert plan.docker_argv[:4] == ["docker", "run", "--shm-size", "16g"] and "--gpus" not in plan.docker_argv
    assert plan.docker_image == "vllm/vllm-openai-cpu:latest-x86_64"
    assert plan.docker_command().startswith("docker run --shm-size 16g \\\n  --privileged")
    assert plan.install_steps[:2] == ["uv venv", "source .venv/bin/activate"] and "vllm-cpu" in plan.install_steps[2]


def test_demo_recipe_on_a_gpu_runs_with_cuda_graphs(catalog):
    """The same model on an NVIDIA GPU: no eager mode, no CPU KV-cache setting, one GPU, the CUDA image."""
    for hw in ("h100", "h200", "b200", "a100", "dgx_spark_gb10"):
        plan = render(Selection(recipe="smollm2", hardware=hw), catalog)
        assert plan.hardware == hw and plan.fallbacks == []
        assert plan.argv == ["vllm", "serve", "HuggingFaceTB/SmolLM2-135M-Instruct", "--max-model-len", "4096",
                             "--enable-prompt-tokens-details", "--tensor-parallel-size", "1",
                             "--enable-per-request-metrics"]
        assert plan.env == {} and plan.local_build == "smollm2-135m-instruct"
        assert plan.min_vllm_version == "0.26.0"  # served with 0.26.0 on an H100; the CPU build is 0.32.0
        assert plan.docker_image == "vllm/vllm-openai:latest" and "--gpus" in plan.docker_argv
    recipe = catalog.recipe("smollm2")
    assert "CUDA graphs" in (recipe.engine_note_for("h100", "hopper", "NVIDIA") or "")
    assert "CPU demo engine" in (recipe.engine_note_for("cpu", "cpu", "CPU") or "")


def test_other_hardware_renders(catalog):
    spark = nemo(catalog, hardware="dgx_spark_gb10")
    assert spark.docker_image == "vllm/vllm-openai:nightly"
    assert "uv pip install fastsafetensors" in spark.install_steps
    assert "--load-format" in spark.argv
    # A command that does not load with fastsafetensors does not install it.
    plain = nemo(catalog, hardware="dgx_spark_gb10", extra=["--load-format auto"])
    assert plain.argv[plain.argv.index("--load-format") + 1] == "auto"
    assert "fastsafetensors" not in " ".join(plain.install_steps)
    a100 = nemo(catalog, hardware="a100")
    av = a100.argv
    assert av[av.index("--mamba-ssu-algorithm") + 1] == "simple" and av[av.index("--kv-cache-dtype") + 1] == "auto"
    assert a100.provenance["--moe-backend"] == "variant:hardware"


def test_dedupe_keeps_last_in_later_position():
    assert dedupe_args(["--a", "1", "--b", "--a", "2", "x", "--b"]) == ["--a", "2", "x", "--b"]


def test_shell_quote_like_upstream():
    assert shell_quote("$HEAD_IP") == "$HEAD_IP"
    assert shell_quote('{"a":1}') == '\'{"a":1}\''
    assert shell_quote("it's") == "'it'\\''s'"
    assert shell_quote("fp8") == "fp8"


# ── Validation ──────────────────────────────────────────────────────────────


def _copy_recipes(tmp_path: Path) -> Path:
    root = tmp_path / "recipes"
    shutil.copytree(default_recipes_dir(), root)
    return root


def test_malformed_recipe_reports_every_problem_with_file_and_key(tmp_path):
    root = _copy_recipes(tmp_path)
    bad = root / "models" / "acme" / "Broken.yaml"
    bad.parent.mkdir()
    bad.write_text(
        "meta: {title: Broken}\n"
        "model:\n  model_id: acme/broken\n  base_args: [--max-model-len, 4096]\n"
        "variants:\n  default:\n    extra_args: --oops\n    vram_minimum_gb: lots\n"
        "features:\n  spec_decoding:\n    default_mode: nope\n    modes: {mtp: {args: [--speculative-config, '{}']}}\n"
        "opt_in_features: [missing]\n"
    )
    with pytest.raises(RecipeError) as e:
        load_catalog(root)
    msg = e.value.message
    assert str(bad) in msg and "5 problem(s)" in msg
    assert "model.base_args: expected a list of strings" in msg and "got list" in msg
    assert "variants.default.extra_args: expected a list of strings" in msg
    assert "variants.default.vram_minimum_gb: expected a number of GB, got 'lots'" in msg
    assert "features.spec_decoding.default_mode: expected one of mtp, got 'nope'" in msg
    assert "opt_in_features[0]: expected a feature defined under features, got 'missing'" in msg


def test_malformed_taxonomy_and_yaml(tmp_path):
    root = _copy_recipes(tmp_path)
    (root / "taxonomy.yaml").write_text("hardware_profiles:\n  h200: {brand: NVIDIA, generation: hopper, gpu_count: eight, vram_gb: 1128}\n")
    with pytest.raises(RecipeError, match=r"hardware_profiles.h200.gpu_count: expected an integer, got 'eight'"):
        load_catalog(root)
    root2 = _copy_recipes(tmp_path / "b")
    (root2 / "models" / "x.yaml").write_text("meta: [unclosed\n")
    with pytest.raises(RecipeError, match="not valid YAML"):
        load_catalog(root2)


def test_upstream_shaped_recipe_loads_unchanged(tmp_path):
    """Keys the workbench does not use (guide, strategy_hardware, amd overrides...) are fine."""
    root = _copy_recipes(tmp_path)
    path = root / "models" / "Qwen" / "Qwen3-8B.yaml"
    path.parent.mkdir(exist_ok=True)  # the catalog has a Qwen folder (Qwen3-0.6B)
    path.write_text(
        "meta:\n  title: Qwen3 8B\n  hardware: {mi300x: verified}\n"
        "model:\n  model_id: Qwen/Qwen3-8B\n  min_vllm_version: '0.10.0'\n  architecture: dense\n"
        "  base_args: []\n  base_env: {}\n"
        "features:\n  reasoning: {description: r, args: [--reasoning-parser, qwen3]}\n"
        "  tool_calling: {description: t, args: [--enable-auto-tool-choice, --tool-call-parser, hermes]}\n"
        "opt_in_features: []\n"
        "variants:\n  default: {precision: bf16, vram_minimum_gb: 16}\n"
        "  fp8: {model_id: Qwen/Qwen3-8B-FP8, precision: fp8, vram_minimum_gb: 9,\n"
        "        hardware_overrides: {amd: {extra_args: [--foo]}}}\n"
        "compatible_strategies: [single_node_tp, multi_node_tp, pd_cluster]\n"
        "strategy_hardware: {pd_cluster: {default: unsupported}}\n"
        "hardware_overrides: {hopper: {extra_args: [--max-num-seqs, '128']}}\n"
        "strategy_overrides: {}\n"
        "guide: |\n  Some prose.\n"
    )
    cat = load_catalog(root)
    plan = render(Selection(recipe="Qwen/Qwen3-8B", hardware="h100"), cat)
    assert plan.argv == ["vllm", "serve", "Qwen/Qwen3-8B", "--tensor-parallel-size", "1", "--max-num-seqs", "128",
                         "--reasoning-parser", "qwen3", "--enable-auto-tool-choice", "--tool-call-parser", "hermes"]
    assert plan.docker_image == "vllm/vllm-openai:latest" and plan.provenance["--max-num-seqs"] == "hardware:hopper"

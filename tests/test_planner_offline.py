"""The memory planner before anything is downloaded or built: every recipe model is planned
offline, from the architecture figures the workbench ships (the nearest published
architecture where the model's own config.json is not public, said so), or for the CPU
demo from the GGUF it is built from; a real config.json in the Hugging Face cache (or the
built model's) replaces them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from workbench.demo.build_config import GGUF_TO_CONFIG, build_config, gguf_metadata
from workbench.demo.models import find_gguf
from workbench.planner import plan_memory
from workbench.planner import config as planner_config
from workbench.planner.architecture import architecture_from_config
from workbench.planner.shipped import SHIPPED_FILE
from workbench.recipes import Selection, load_catalog, render
from workbench.recipes.resolve import hardware_supported

NANO_CONFIG = Path(__file__).parent / "fixtures" / "public-configs" / "nemotron-3-nano-30b-a3b.config.json"
LIGHTNING = "nvidia/NVIDIA-Nemotron-3.5-Lightning-30B-A3B-NVFP4"


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


@pytest.fixture
def nothing_downloaded(monkeypatch, tmp_path):
    """Offline, an empty Hugging Face cache, and no demo model built yet."""
    planner_config.clear_cache()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path / "workbench-cache"))
    yield tmp_path
    planner_config.clear_cache()


def test_every_recipe_model_is_planned_before_anything_is_downloaded(catalog, nothing_downloaded):
    planned = 0
    for recipe in catalog.recipes.values():
        for hw in catalog.hardware.values():
            if not hardware_supported(recipe, hw):
                continue
            for variant in recipe.variants:
                plan = render(Selection(recipe=recipe.id, hardware=hw.id, variant=variant), catalog)
                memory = plan_memory(plan, catalog)
                assert memory.kv_cache_tokens > 0 and memory.table, (recipe.id, hw.id, variant)
                planned += 1
                text = memory.describe()
                if plan.model_id.startswith("nvidia/NVIDIA-Nemotron-3.5-Lightning"):
                    # Not the model's own figures: labelled as a stand-in, with how to get the real file.
                    assert "nearest published architecture" in memory.config_source
                    assert f"not {plan.model_id}'s own" in text and f"hf download {plan.model_id}" in text
                elif plan.local_build:
                    assert "not built yet" in memory.config_source and ".gguf" in memory.config_source
                else:
                    assert "public config.json" in memory.config_source and "own" not in text
    assert planned >= 12


def test_the_cpu_demo_is_planned_from_its_gguf_as_vllm_logged_it(catalog, nothing_downloaded):
    memory = plan_memory(render(Selection(hardware="cpu"), catalog), catalog)
    # vLLM 0.32.0 logged this for the built SmolLM2 (tests/test_planner.py's CLI check, the browser test).
    assert memory.startup_line() == ("CPU KV cache size: 46,592 tokens, Maximum concurrency for 4,096 tokens "
                                     "per request: 11.38x")


def test_a_config_json_in_the_cache_replaces_the_stand_in(catalog, nothing_downloaded):
    plan = render(Selection(hardware="dgx_spark_gb10"), catalog)
    assert "nearest published" in plan_memory(plan, catalog).config_source
    snapshot = nothing_downloaded / "hf" / ("models--" + LIGHTNING.replace("/", "--")) / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    (snapshot.parent.parent / "refs").mkdir()
    (snapshot.parent.parent / "refs" / "main").write_text("abc")
    (snapshot / "config.json").write_text(NANO_CONFIG.read_text())
    memory = plan_memory(plan, catalog)  # no restart: the stand-in was never cached
    assert "Hugging Face cache" in memory.config_source and not any("nearest" in n for n in memory.notes)


def test_the_shipped_nano_architecture_is_the_recorded_public_one():
    shipped = yaml.safe_load(SHIPPED_FILE.read_text())
    assert shipped["architectures"]["nemotron-3-nano-30b-a3b"]["config"] == json.loads(NANO_CONFIG.read_text())
    for model_id, entry in shipped["models"].items():
        arch = architecture_from_config(shipped["architectures"][entry["architecture"]]["config"])
        assert arch.num_kv_heads > 0, model_id
        assert entry["exact"] or entry["why"].strip(), model_id


def test_the_gguf_header_reader_agrees_with_the_gguf_library():
    import gguf

    path = find_gguf()
    meta, tensors = gguf_metadata(path)
    reader = gguf.GGUFReader(str(path))
    for key in [f"llama.{k}" for k in GGUF_TO_CONFIG] + ["general.architecture"]:
        field = reader.fields.get(key)
        if field is None:
            assert key not in meta
            continue
        assert meta[key] == pytest.approx(field.contents()), key
    assert tensors == [t.name for t in reader.tensors]
    assert meta["tokenizer.ggml.tokens"] == len(reader.fields["tokenizer.ggml.tokens"].data)


@pytest.mark.vllm
def test_the_demo_build_writes_the_figures_planned_before_it(demo_model_dir):
    built = json.loads((demo_model_dir / "config.json").read_text())
    planned = build_config(find_gguf())
    for field in [*GGUF_TO_CONFIG.values(), "tie_word_embeddings", "model_type", "dtype", "rope_parameters"]:
        if field != "rope_theta":  # written under rope_parameters
            assert planned[field] == pytest.approx(built[field]), field
    assert architecture_from_config(planned) == architecture_from_config(built)

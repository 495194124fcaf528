"""What both recipe pickers (Gradio and notebooks) offer and send: one set of functions."""

from __future__ import annotations

import pytest

from workbench.errors import InputError
from workbench.recipes import Selection, load_catalog, render
from workbench.recipes.choices import NO_SPEC, choices_for, selection_from_choices, summarize_plan


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


def test_empty_picker_values_mean_the_recipe_defaults(catalog):
    # What a Gradio page sends with every optional box left empty: "", None, and 0 from number boxes.
    selection = selection_from_choices(recipe="", hardware="h200", variant="", strategy="", nodes=0,
                                       features=None, spec=NO_SPEC, preset="", port=None, served_model_name="",
                                       max_model_len=0, extra="  ")
    assert selection == Selection(hardware="h200", features=[])
    assert "--max-model-len" not in render(selection, catalog).argv


def test_a_spec_mode_turns_spec_decoding_on_and_extra_flags_stay_one_shell_string(catalog):
    selection = selection_from_choices(hardware="h200", features=["reasoning"], spec="mtp",
                                       extra="--max-num-seqs 8 --speculative-config '{\"a\": 1}'")
    assert selection.features == ["reasoning", "spec_decoding"] and selection.spec == "mtp"
    plan = render(selection, catalog)
    assert plan.argv[-4:] == ["--max-num-seqs", "8", "--speculative-config", '{"a": 1}']


def test_numbers_that_are_not_whole_say_which_box(catalog):
    with pytest.raises(InputError, match="Port must be a whole number"):
        selection_from_choices(hardware="cpu", port="80.5")


def test_choices_list_defaults_first_and_keep_spec_decoding_apart(catalog):
    offered = choices_for(catalog, catalog.default_recipe_id())
    assert offered.variants[0] == ("(recipe default)", "") and offered.presets[0][1] == ""
    assert offered.spec_modes[0] == (NO_SPEC, NO_SPEC)
    assert "spec_decoding" not in [v for _, v in offered.features]
    assert set(offered.default_features) <= {v for _, v in offered.features}


def test_the_summary_names_the_cpu_demo_engine_from_its_recipe(catalog):
    plan = render(Selection(hardware="cpu"), catalog)
    summary = summarize_plan(plan, catalog)
    assert summary.demo_engine and "embedded CPU demo engine" in summary.demo_engine
    assert summary.hardware_name == catalog.hardware["cpu"].display_name
    gpu = summarize_plan(render(Selection(hardware="h200"), catalog), catalog)
    assert gpu.demo_engine is None and any(f.startswith("TP ") for f in gpu.facts)

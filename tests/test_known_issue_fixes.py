"""A known problem whose change is mechanical carries it as data (`fix`); render applies it on
request as the command's last layer ("known problem <id>"), the Recipe tab offers it as one
click (and the seed's command one click back, byte for byte), `render --apply-fix ID` prints it."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest
import yaml

from workbench import cli
from workbench.errors import RecipeError, SelectionError
from workbench.recipes import Selection, load_catalog, provenance_rows, render
from workbench.recipes.argv import units

ROOT = Path(__file__).resolve().parent.parent
SPARK = Selection(hardware="dgx_spark_gb10")
GB10 = "gb10-fp8-kv-cache"


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


@pytest.fixture(autouse=True)
def no_gpu(monkeypatch):
    monkeypatch.setattr("workbench.server.hardware.detect", lambda: "cpu")


def _flags(argv: list[str]) -> list[tuple[str | None, str | None]]:
    return [(u.flag, u.value) for u in units(argv)]


def test_the_spark_fix_changes_one_flag_in_place_and_names_its_layer(catalog):
    seed = render(SPARK, catalog)
    fixed = render(dataclasses.replace(SPARK, apply_fixes=[GB10]), catalog)
    # The page's own warning: the seed says --kv-cache-dtype fp8 fails on GB10.
    assert ("--kv-cache-dtype", "fp8") in _flags(seed.argv) and GB10 in [k.id for k in seed.known_issues]
    assert ("--kv-cache-dtype", "bfloat16") in _flags(fixed.argv)
    # Everything else stays where it was: one token differs.
    assert len(fixed.argv) == len(seed.argv)
    assert [(a, b) for a, b in zip(seed.argv, fixed.argv) if a != b] == [("fp8", "bfloat16")]
    assert fixed.provenance["--kv-cache-dtype"] == f"known problem {GB10}"
    assert GB10 not in [k.id for k in fixed.known_issues]  # the command no longer meets it
    [applied] = fixed.applied_fixes
    assert applied.id == GB10 and applied.describe() == "--kv-cache-dtype fp8 -> --kv-cache-dtype bfloat16"
    assert "--kv-cache-dtype bfloat16" in fixed.docker_command(multiline=False)
    row = next(r for r in provenance_rows(fixed, catalog) if r[0] == "--kv-cache-dtype")
    assert row[1:3] == ["bfloat16", f"known problem {GB10}"]


def test_the_seed_command_is_one_step_back_byte_for_byte(catalog):
    from workbench.ui.recipe_tab import fix_buttons, fixes_to_apply, render_outputs

    values = ["nemotron-3.5-lightning", "dgx_spark_gb10", "", "", 1, ["reasoning", "tool_calling",
              "mamba_fast_ssm_cache"], "none", "", 8000, "", None, ""]
    seed = render_outputs(catalog, *values)
    assert render_outputs(catalog, *values, []) == seed
    apply, undo = fix_buttons(seed[4])
    assert apply.visible and f"known problem {GB10}" in apply.value and not undo.visible
    fixes = fixes_to_apply(seed[4], [])
    assert fixes == [GB10]
    fixed = render_outputs(catalog, *values, fixes)
    assert "--kv-cache-dtype bfloat16" in fixed[1] and "fp8" not in fixed[1].replace("fp8_", "")
    assert f"Changed for known problem `{GB10}`" in fixed[0]
    assert [f"known problem {GB10}"] == [r[2] for r in fixed[3] if r[0] == "--kv-cache-dtype"]
    apply, undo = fix_buttons(fixed[4])
    assert undo.visible and not apply.visible
    back = render_outputs(catalog, *values, [])  # "Back to the seed's command" empties the fixes
    assert back[1] == seed[1] and back[2] == seed[2] and back[3] == seed[3]
    assert back[1] == render(SPARK, catalog).shell_command(multiline=True)


def test_a_preset_gets_the_same_fix(catalog):
    plan = render(Selection(preset="dgx_spark_quickstart", apply_fixes=["all"]), catalog)
    assert ("--kv-cache-dtype", "bfloat16") in _flags(plan.argv)
    assert plan.provenance["--kv-cache-dtype"] == f"known problem {GB10}"
    assert render(Selection(preset="dgx_spark_quickstart"), catalog).provenance["--kv-cache-dtype"] == \
        "preset:dgx_spark_quickstart"


def test_a_switch_replaces_its_pair_and_a_drop_is_shown_as_removed(catalog):
    mtp = Selection(hardware="h200", spec="mtp", extra=["--no-enable-chunked-prefill"])
    seed = render(mtp, catalog)
    assert {"prefix-caching-with-mtp-on-hybrid", "align-mode-needs-chunked-prefill"} <= {k.id for k in seed.known_issues}
    plan = render(dataclasses.replace(mtp, apply_fixes=["all"]), catalog)
    at = seed.argv.index("--enable-prefix-caching")
    assert plan.argv[at] == "--no-enable-prefix-caching" and "--enable-prefix-caching" not in plan.argv
    assert "--no-enable-chunked-prefill" not in plan.argv
    assert {a.id for a in plan.applied_fixes} == {"prefix-caching-with-mtp-on-hybrid", "align-mode-needs-chunked-prefill"}
    rows = provenance_rows(plan, catalog)
    assert ["--no-enable-chunked-prefill", "(removed: --no-enable-chunked-prefill)",
            "known problem align-mode-needs-chunked-prefill"] == next(r[:3] for r in rows if "removed" in r[1])
    assert not {"prefix-caching-with-mtp-on-hybrid", "align-mode-needs-chunked-prefill"} & {
        k.id for k in plan.known_issues}


def test_multi_node_workers_get_the_head_s_fix(catalog):
    plan = render(Selection(hardware="dgx_spark_gb10", strategy="multi_node_tp_dp", nodes=2, apply_fixes=[GB10]),
                  catalog)
    assert plan.worker_argvs and all(("--kv-cache-dtype", "bfloat16") in _flags(w) for w in plan.worker_argvs)


def test_unknown_and_unmet_fixes(catalog):
    with pytest.raises(SelectionError) as err:
        render(dataclasses.replace(SPARK, apply_fixes=["no-such-problem"]), catalog)
    assert GB10 in err.value.hint and err.value.settings == {"apply_fixes": None}
    # A known fix the command does not meet (H200 has no fp8 problem) changes nothing and says so.
    plan = render(Selection(hardware="h200", apply_fixes=[GB10]), catalog)
    assert plan.argv == render(Selection(hardware="h200"), catalog).argv and not plan.applied_fixes
    assert plan.fallbacks[-1].choice == "apply_fix" and "does not meet" in plan.fallbacks[-1].reason


def test_render_cli_offers_and_applies_the_fix(capsys):
    assert cli.main(["render", "--hardware", "dgx_spark_gb10"]) == 0
    out, err = capsys.readouterr()
    assert "--kv-cache-dtype fp8" in out and f"One flag away: --apply-fix {GB10} (--kv-cache-dtype bfloat16)" in err
    assert cli.main(["render", "--hardware", "dgx_spark_gb10", "--apply-fix", GB10]) == 0
    out, err = capsys.readouterr()
    assert "--kv-cache-dtype bfloat16" in out and "fp8 " not in out
    assert f"applied: known problem {GB10}" in err and "--kv-cache-dtype fp8 -> --kv-cache-dtype bfloat16" in err
    assert cli.main(["render", "--hardware", "dgx_spark_gb10", "--apply-fix", "nope"]) == 2
    assert "On the command line: --apply-fix." in capsys.readouterr().err


def test_a_malformed_fix_is_reported_with_its_key(tmp_path):
    shutil.copytree(ROOT / "recipes", tmp_path / "recipes")
    path = tmp_path / "recipes" / "models" / "HuggingFaceTB" / "SmolLM2-135M-Instruct.yaml"
    data = yaml.safe_load(path.read_text())
    data["workbench"]["known_issues"] = [
        {"id": "a", "title": "t", "symptom": "s", "change": "c", "sources": ["https://github.com/x/y/issues/1"],
         "fix": {"set": {"kv-cache-dtype": "bf16", "--ok": False}, "drop": "--x"}},
        {"id": "b", "title": "t", "symptom": "s", "change": "c", "sources": ["https://github.com/x/y/issues/1"],
         "fix": {"replace": {}}},
    ]
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(RecipeError) as err:
        load_catalog(tmp_path / "recipes")
    for key in ("known_issues[0].fix.set", "known_issues[0].fix.drop", "known_issues[1].fix"):
        assert f"workbench.{key}" in err.value.message, key


def test_unknown_hardware_lists_cpu_too(catalog):
    # Without a recipe, every hardware id works (cpu gets the CPU demo recipe).
    with pytest.raises(SelectionError) as err:
        render(Selection(hardware="h2000"), catalog)
    assert err.value.hint.endswith(", a100, cpu") and "h200" in err.value.hint
    # With the Nemotron recipe named, cpu works with another recipe, and the hint says so.
    with pytest.raises(SelectionError) as err:
        render(Selection(recipe="nemotron-3.5-lightning", hardware="h2000"), catalog)
    assert "cpu (with another recipe)" in err.value.hint
    assert render(Selection(hardware="cpu"), catalog).recipe_id != "nemotron-3.5-lightning"

"""Known problems as recipe data: validated on load, matched by render, shown by the CLI and
both views, and named by the launcher's diagnosis when a failed start's log shows them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from workbench import cli
from workbench.errors import RecipeError
from workbench.recipes import LaunchPlan, Selection, load_catalog, render
from workbench.recipes.choices import summarize_plan
from workbench.recipes.known_issues import known_issue_entries
from workbench.server.diagnosis import Diagnosis, diagnose, known_issues_for_plan

ROOT = Path(__file__).resolve().parent.parent
LOGS = Path(__file__).parent / "fixtures" / "launch-logs"
PUBLIC_LOGS = Path(__file__).parent / "fixtures" / "public-logs"


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


@pytest.fixture(autouse=True)
def no_gpu(monkeypatch):
    monkeypatch.setattr("workbench.server.hardware.detect", lambda: "cpu")


def ids(plan: LaunchPlan) -> list[str]:
    return [k.id for k in plan.known_issues]


def test_every_entry_names_a_trigger_symptom_change_and_public_source(catalog):
    recipe = catalog.recipe("nemotron-3.5-lightning")
    entries = known_issue_entries(recipe)
    assert {"gb10-fp8-kv-cache", "prefix-caching-with-mtp-on-hybrid", "max-num-seqs-above-mamba-cache-blocks",
            "spark-first-request-jit"} <= {e.id for e in entries}
    for e in entries:
        assert e.title and e.symptom and e.change and e.sources
        assert all(url.startswith("https://github.com/") for url in e.sources)


def test_the_spark_command_warns_of_the_gb10_fp8_failure(catalog):
    for sel in (Selection(hardware="dgx_spark_gb10"), Selection(preset="dgx_spark_quickstart")):
        plan = render(sel, catalog)
        issue = next(k for k in plan.known_issues if k.id == "gb10-fp8-kv-cache")
        assert "--kv-cache-dtype fp8" in issue.matched and "DGX Spark" in issue.matched
        assert "https://github.com/vllm-project/recipes/issues/836" in issue.sources
    # The same flag on Hopper meets nothing; BF16 (no fp8 KV) on Spark does not warn of it.
    assert "gb10-fp8-kv-cache" not in ids(render(Selection(hardware="h200"), catalog))
    assert "gb10-fp8-kv-cache" not in ids(render(Selection(hardware="dgx_spark_gb10", variant="bf16"), catalog))


def test_mtp_with_prefix_caching_warns_until_either_is_off(catalog):
    assert "prefix-caching-with-mtp-on-hybrid" in ids(render(Selection(hardware="h200", spec="mtp"), catalog))
    off = render(Selection(hardware="h200", spec="mtp", extra=["--no-enable-prefix-caching"]), catalog)
    assert "prefix-caching-with-mtp-on-hybrid" not in ids(off)
    assert "prefix-caching-with-mtp-on-hybrid" not in ids(render(Selection(hardware="h200", spec="dspark"), catalog))


def test_numeric_conditions_use_vllms_default_when_the_flag_is_absent(catalog):
    spark_at = lambda util: render(Selection(hardware="dgx_spark_gb10",  # noqa: E731
                                             extra=[f"--gpu-memory-utilization {util}"]), catalog)
    assert "spark-gpu-memory-utilization" in ids(spark_at(0.9))
    assert "spark-gpu-memory-utilization" not in ids(spark_at(0.85))
    assert "spark-gpu-memory-utilization" not in ids(render(Selection(hardware="dgx_spark_gb10"), catalog))  # 0.7


def test_planner_checks_are_left_to_the_planner(catalog):
    for hw in ("h200", "dgx_spark_gb10", "b200"):
        assert "max-num-seqs-above-mamba-cache-blocks" not in ids(render(Selection(hardware=hw), catalog))


def test_the_cpu_demo_and_the_seed_render_meet_none(catalog):
    assert render(Selection(hardware="cpu"), catalog).known_issues == []
    assert render(Selection(hardware="h200"), catalog).known_issues == []


def test_known_issues_survive_the_plan_round_trip(catalog):
    plan = render(Selection(hardware="dgx_spark_gb10"), catalog)
    again = LaunchPlan.from_dict(json.loads(json.dumps(plan.to_dict())))
    assert again.known_issues == plan.known_issues


def test_render_json_carries_them_and_text_prints_known_issue_lines(capsys):
    assert cli.main(["render", "--hardware", "dgx_spark_gb10", "--format", "json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert "gb10-fp8-kv-cache" in [k["id"] for k in plan["known_issues"]]
    assert cli.main(["render", "--hardware", "dgx_spark_gb10"]) == 0
    out, err = capsys.readouterr()
    assert "known issue" not in out  # stdout stays the command
    lines = [line for line in err.splitlines() if line.startswith("known issue: ")]
    assert any("--kv-cache-dtype fp8 makes engine initialisation fail on DGX Spark" in line
               and "https://github.com/vllm-project/recipes/issues/836" in line for line in lines)


def test_both_views_show_the_warning(catalog):
    from workbench.notebook.recipe_picker import summary_html
    from workbench.ui.recipe_tab import summary_markdown

    summary = summarize_plan(render(Selection(hardware="dgx_spark_gb10"), catalog), catalog)
    markdown = summary_markdown(summary)
    assert "⚠ **Known issue: --kv-cache-dtype fp8 makes engine initialisation fail" in markdown
    assert "[vllm-project/recipes#836](https://github.com/vllm-project/recipes/issues/836)" in markdown
    html = summary_html(summary)
    assert "Known issue: --kv-cache-dtype fp8 makes engine initialisation fail" in html
    assert 'href="https://github.com/vllm-project/recipes/issues/836"' in html


# ── malformed entries are reported with their key ────────────────────────────


def test_malformed_known_issues_are_reported_with_their_keys(tmp_path):
    import shutil

    shutil.copytree(ROOT / "recipes", tmp_path / "recipes")
    path = tmp_path / "recipes" / "models" / "HuggingFaceTB" / "SmolLM2-135M-Instruct.yaml"
    data = yaml.safe_load(path.read_text())
    data["workbench"]["known_issues"] = [
        {"id": "a", "title": "t", "symptom": "s", "change": "c", "sources": ["http://example.org/x"],
         "when": {"flags": {"--x": {"above": "high"}}, "gpu": ["h200"]}, "log_pattern": "(unclosed"},
        {"id": "a", "title": "", "change": "c", "sources": [], "check": "nonsense", "when": {"vllm": "~~1"}},
    ]
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(RecipeError) as err:
        load_catalog(tmp_path / "recipes")
    text = err.value.message
    for key in ("known_issues[0].sources", "known_issues[0].when.flags.--x", "known_issues[0].when.gpu",
                "known_issues[0].log_pattern", "known_issues[1].id", "known_issues[1].title",
                "known_issues[1].symptom", "known_issues[1].check", "known_issues[1].when.vllm"):
        assert f"workbench.{key}" in text, key


def test_image_and_version_conditions(tmp_path):
    import shutil

    shutil.copytree(ROOT / "recipes", tmp_path / "recipes")
    path = tmp_path / "recipes" / "models" / "nvidia" / "NVIDIA-Nemotron-3.5-Lightning-30B-A3B-BF16.yaml"
    data = yaml.safe_load(path.read_text())
    data["workbench"]["known_issues"] = [
        {"id": "old", "title": "old vLLM", "symptom": "s", "change": "c", "sources": ["https://github.com/a/b/issues/1"],
         "when": {"vllm": "<0.28"}},
        {"id": "nightly", "title": "nightly", "symptom": "s", "change": "c",
         "sources": ["https://github.com/a/b/issues/2"], "when": {"images": ["vllm/vllm-openai:nightly*"]}},
    ]
    path.write_text(yaml.safe_dump(data))
    catalog = load_catalog(tmp_path / "recipes")
    h200 = render(Selection(hardware="h200"), catalog)  # image v0.28.0
    assert ids(h200) == []
    spark = render(Selection(hardware="dgx_spark_gb10"), catalog)  # image nightly: names no version
    assert ids(spark) == ["old", "nightly"] and "names no version" in spark.known_issues[0].matched
    preset = render(Selection(preset="dgx_spark_quickstart"), catalog)  # v0.27.1
    assert ids(preset) == ["old"] and preset.known_issues[0].matched == "vLLM 0.27.1"


# ── the diagnosis names the known issue a failed start's log shows ───────────


def test_real_cpu_log_of_align_without_chunked_prefill_is_named(catalog):
    # A real failing start of the tiny Nemotron-H; the rules alone do not know the message.
    text = (LOGS / "hybrid_align_without_chunked_prefill.log").read_text()
    assert diagnose(text, exit_code=1).cause == "unknown"
    issues = known_issues_for_plan(render(Selection(hardware="h200"), catalog).to_dict())
    d = diagnose(text, exit_code=1, known_issues=issues)
    assert d.cause == "known_issue" and d.known_issue["id"] == "align-mode-needs-chunked-prefill"
    assert "Remove --no-enable-chunked-prefill" in d.fix
    assert d.evidence in text and "Chunked prefill is required for mamba cache mode 'align'" in d.evidence
    assert "Known issue: Prefix caching on a hybrid model needs chunked prefill" in d.describe()
    assert Diagnosis.from_dict(d.to_dict()) == d


def test_gb10_fp8_excerpt_names_the_issue_instead_of_a_dead_engine(catalog):
    plan = render(Selection(hardware="dgx_spark_gb10"), catalog).to_dict()
    text = (PUBLIC_LOGS / "gb10_fp8_kv_cache.excerpt.log").read_text()
    assert diagnose(text, exit_code=1).cause == "engine_died"
    d = diagnose(text, exit_code=1, known_issues=known_issues_for_plan(plan))
    assert d.cause == "engine_died" and d.known_issue["id"] == "gb10-fp8-kv-cache"
    assert d.summary.startswith("--kv-cache-dtype fp8 makes engine initialisation fail") and "fp8" in d.fix
    assert "https://github.com/vllm-project/recipes/issues/836" in d.describe()


def test_mamba_blocks_excerpt_is_named_even_when_render_did_not_predict_it(catalog):
    plan = render(Selection(hardware="h200"), catalog)
    assert plan.known_issues == []  # the planner's check, not render's
    text = (PUBLIC_LOGS / "mamba_cache_blocks.excerpt.log").read_text()
    d = diagnose(text, exit_code=1, known_issues=known_issues_for_plan(plan.to_dict()))
    assert d.known_issue["id"] == "max-num-seqs-above-mamba-cache-blocks"
    assert "max_num_seqs (1024) exceeds available Mamba cache blocks (512)" in d.known_issue["evidence"]
    assert "Lower --max-num-seqs" in d.fix


def test_a_specific_rule_keeps_its_fix_and_gains_the_name(catalog):
    # A rule more specific than "engine died" wins; the known issue is still named.
    text = (LOGS / "port_in_use.log").read_text() + "\nChunked prefill is required for mamba cache mode 'align'\n"
    d = diagnose(text, exit_code=1, known_issues=known_issue_entries(catalog.recipe("nemotron-3.5-lightning")))
    assert d.cause == "address_in_use" and "another port" in d.fix and "server_port" in d.settings and d.known_issue is not None


def test_no_plan_no_known_issues():
    assert known_issues_for_plan(None) == []
    assert known_issues_for_plan({"recipe_id": "no/such-recipe"}) == []

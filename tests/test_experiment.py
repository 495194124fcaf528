"""Experiments without a server: configurations, workloads, and the analysis of a real recorded run.

tests/fixtures/experiment-cpu-off-ngram/state.json is what `python -m workbench experiment
--hardware cpu --spec off,ngram --concurrency 1,2 --requests 4 --osl 32` wrote on the
2-core development machine (vLLM 0.32.0 CPU build, SmolLM2-135M): every record, the
/metrics deltas, and the responses' metrics.speculative_decoding as vLLM sent them.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from workbench.bench.client import _StreamReader
from workbench.bench.records import RequestRecord
from workbench.errors import InputError, SelectionError
from workbench.experiment import (
    ExperimentResult,
    builtin_workload,
    configs_from_specs,
    crossovers,
    format_winners,
    level_figures,
    load_dataset,
    load_experiment,
    parse_config_text,
    plan_lines,
    render_config,
    report_html,
)
from workbench.experiment.analysis import LevelFigures
from workbench.experiment.configs import ExperimentConfig
from workbench.experiment.results import ConfigResult
from workbench.experiment.runner import estimate_seconds
from workbench.recipes import Selection, load_catalog

FIXTURE = Path(__file__).parent / "fixtures" / "experiment-cpu-off-ngram"
# The final usage chunk of a streamed answer from vLLM 0.32.0 (CPU build) served with an ngram
# --speculative-config and --per-request-spec-decode-metrics summary (recorded on this machine).
RECORDED_USAGE_CHUNK = (
    '{"id":"chatcmpl-a3cdb5db0ad12f15","object":"chat.completion.chunk","created":1796404371,'
    '"model":"HuggingFaceTB/SmolLM2-135M-Instruct","choices":[],"usage":{"prompt_tokens":62,"total_tokens":94,'
    '"completion_tokens":32},"system_fingerprint":"vllm-0.32.0-df59cf04","metrics":{"speculative_decoding":'
    '{"mean_acceptance_length":4.833333333333334,"draft_acceptance_rate":0.9583333333333334,'
    '"acceptance_histogram":[0,0,0,1,5],"num_spec_steps":6,"num_accepted_draft_tokens":23,"num_draft_tokens":24,'
    '"num_spec_tokens":4}}}'
)


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


@pytest.fixture(scope="module")
def recorded() -> ExperimentResult:
    return ExperimentResult.from_dict(json.loads((FIXTURE / "state.json").read_text()))


# -- workloads ----------------------------------------------------------------

def test_the_builtin_workload_labels_every_prompt_and_interleaves_the_categories() -> None:
    workload = builtin_workload()
    assert workload.categories == ["chat", "code_edit", "copy", "extract", "summarize"]
    assert len(workload.prompts) == 20
    assert all(p.prompt.strip() and p.category for p in workload.prompts)
    # The first five prompts cover all five categories, so a short level still sees each.
    assert sorted(p.category for p in workload.prompts[:5]) == workload.categories


def test_a_dataset_with_bad_lines_names_each_line(tmp_path: Path) -> None:
    good = tmp_path / "good.jsonl"
    good.write_text('{"prompt": "Copy: a b c", "category": "copy", "output_tokens": 16}\n\n{"prompt": "Hi"}\n')
    workload = load_dataset(good)
    assert [(p.category, p.output_tokens) for p in workload.prompts] == [("copy", 16), ("uncategorised", None)]
    assert workload.bench_prompts()[0] == {"messages": [{"role": "user", "content": "Copy: a b c"}],
                                           "category": "copy", "output_tokens": 16}
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "ok"}\nnot json\n[1]\n{"prompt": ""}\n{"prompt": "x", "output_tokens": 0}\n'
                   '{"prompt": "x", "category": 5}\n')
    with pytest.raises(InputError) as err:
        load_dataset(bad)
    message = err.value.message
    for line in ("line 2: not JSON", "line 3: not a JSON object", 'line 4: no "prompt"', "line 5: \"output_tokens\"",
                 'line 6: "category"'):
        assert line in message
    assert "line 1" not in message
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(InputError, match="holds no prompts"):
        load_dataset(empty)
    with pytest.raises(InputError, match="Cannot read"):
        load_dataset(tmp_path / "missing.jsonl")


# -- configurations -----------------------------------------------------------

def test_spec_short_form_on_the_cpu_recipe(catalog) -> None:
    off, ngram = configs_from_specs("off,ngram", Selection(hardware="cpu"), catalog)
    assert (off.label, ngram.label) == ("off", "ngram")
    assert "--speculative-config" not in render_config(off, catalog).argv
    argv = render_config(ngram, catalog).argv
    spec = json.loads(argv[argv.index("--speculative-config") + 1])
    assert spec == {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2, "prompt_lookup_max": 4}


def test_a_spec_mode_the_recipe_lacks_is_refused_with_the_valid_list(catalog) -> None:
    with pytest.raises(SelectionError) as err:
        configs_from_specs("off,mtp", Selection(hardware="cpu"), catalog)
    assert "'mtp' is not in this recipe" in err.value.message
    assert err.value.hint == "Valid modes here: off, ngram." and "spec" in err.value.settings
    with pytest.raises(InputError, match="twice"):
        configs_from_specs("off,none", Selection(hardware="cpu"), catalog)


def test_the_nemotron_recipe_keeps_mtp_dspark_dflash(catalog) -> None:
    configs = configs_from_specs("off,mtp,dspark,dflash", Selection(hardware="h200"), catalog)
    methods = []
    for config in configs[1:]:
        argv = render_config(config, catalog).argv
        methods.append(json.loads(argv[argv.index("--speculative-config") + 1])["method"])
    assert methods == ["mtp", "dspark", "dflash"]
    # DSpark exists in the recipe but has no BF16 draft: refused rather than silently run as another mode.
    with pytest.raises(SelectionError, match="dspark"):
        configs_from_specs("dspark", Selection(hardware="h200", variant="bf16"), catalog)


def test_config_text_carries_extra_flags(catalog) -> None:
    config = parse_config_text('ngram-8:ngram:--max-num-seqs 8', Selection(hardware="cpu"), catalog)
    argv = render_config(config, catalog).argv
    assert config.label == "ngram-8" and argv[argv.index("--max-num-seqs") + 1] == "8"
    assert "--speculative-config" in argv
    with pytest.raises(InputError, match="LABEL:SPEC"):
        parse_config_text("no-colon", Selection(hardware="cpu"), catalog)


# -- per-request acceptance from the stream -----------------------------------

def test_the_usage_chunk_carries_per_request_acceptance() -> None:
    record = RequestRecord(index=0, start_ns=0)
    _StreamReader(record).feed(f"data: {RECORDED_USAGE_CHUNK}\n\n".encode(), 10)
    assert record.completion_tokens == 32
    assert record.spec_decoding is not None
    assert (record.spec_decoding["num_accepted_draft_tokens"], record.spec_decoding["num_draft_tokens"]) == (23, 24)


# -- analysis of the recorded run ---------------------------------------------

def test_recorded_run_ngram_wins_per_user_and_acceptance_agrees(recorded: ExperimentResult) -> None:
    per_user = {w.concurrency: w for w in recorded.winners() if w.metric == "decode_per_user_tps"}
    assert per_user[1].label == "ngram" and per_user[1].runner_up == "off"
    assert per_user[1].lead == pytest.approx(69.82 / 30.38, rel=0.01)
    ngram = {f.concurrency: f for f in recorded.configs[1].figures()}
    for level in ngram.values():
        assert level.acceptance_rate is not None and level.acceptance_agreement is not None
        assert level.acceptance_agreement <= 0.05
        # Position 0 is accepted at least as often as any later one (a draft stops at its first miss).
        positions = level.acceptance_by_position_metrics
        assert positions is not None and positions == sorted(positions, reverse=True)
        assert level.acceptance_by_position == pytest.approx(positions, rel=0.05)
    assert ngram[1].acceptance_rate == pytest.approx(75 / 104)
    assert ngram[1].acceptance_rate_per_request is not None and ngram[1].acceptance_rate_per_request["count"] == 4
    off = recorded.configs[0].figures()
    assert sorted(f.concurrency for f in off) == sorted(ngram)  # a figure per level, as ngram has
    assert all(not f.speculative for f in off)
    assert recorded.baseline() == "off"


def test_crossover_names_where_the_lead_turns(recorded: ExperimentResult) -> None:
    figures = recorded.figures()
    (x,) = recorded.crossovers()
    assert x.stops_paying_at is None and "lead shrinks" in x.summary
    # The same recorded levels with ngram's concurrency-2 figure below off's: the crossover is 2.
    slowed = [f if not (f.label == "ngram" and f.concurrency == 2) else LevelFigures(
        **{**f.__dict__, "decode_per_user_tps": 20.0}) for f in figures]
    (turned,) = crossovers(slowed, ["ngram"], "off")
    assert turned.stops_paying_at == 2 and "stops paying at concurrency 2" in turned.summary


def test_experiment_json_has_exactly_the_named_fields(recorded: ExperimentResult) -> None:
    summary = recorded.summary()
    off, ngram = summary["configs"]
    assert set(off) == {"label", "status", "levels"} and off["status"] == "done"
    assert set(off["levels"][0]) == {"concurrency", "decode_per_user_tps", "output_tps", "ttft_ms_mean"}
    assert set(ngram["levels"][0]) == {"concurrency", "decode_per_user_tps", "output_tps", "ttft_ms_mean",
                                       "acceptance_rate", "acceptance_rate_metrics"}
    assert [lv["concurrency"] for lv in ngram["levels"]] == [1, 2]


def test_the_report_is_self_contained(recorded: ExperimentResult, tmp_path: Path) -> None:
    page = report_html(recorded)
    assert "<svg" in page and "Which configuration wins" in page
    assert not re.search(r'(src|href)="https?:', page)  # nothing fetched from the network
    assert "--speculative-config" in page and "ngram is ahead of off" in page
    raw = re.search(r'<script type="application/json" id="raw-records">(.*?)</script>', page, re.S)
    assert raw is not None
    records = json.loads(raw.group(1))
    assert len(records["ngram"][0]["records"]) == 4
    paths = recorded.save(tmp_path, page)
    again = load_experiment(tmp_path)
    assert again.summary() == recorded.summary()
    assert json.loads(paths["summary"].read_text())["configs"][1]["label"] == "ngram"
    assert "ngram" in format_winners(again)


def test_the_plan_lists_what_is_left(recorded: ExperimentResult) -> None:
    data = recorded.to_dict()
    resumed = ExperimentResult.from_dict(data)
    resumed.configs.append(ConfigResult(ExperimentConfig("again", resumed.configs[0].config.selection)))
    lines = plan_lines(resumed)
    assert lines[0].startswith("Experiment: 3 configuration(s) x 2 level(s)")
    assert "off [done, levels done: 1, 2]" in "\n".join(lines)
    assert lines[-1].startswith("Estimate: about")


def test_the_estimate_is_paced_by_the_machine_not_one_cpu_figure(recorded: ExperimentResult) -> None:
    """On a GPU machine the plan guesses a GPU's pace (eager or with CUDA graphs, as measured on an H100),
    not the CPU build's 25 tok/s: the same experiment is estimated much shorter."""
    def fresh(machine: str, extra: list[str]) -> ExperimentResult:
        data = recorded.to_dict()
        data["machine"] = {**data["machine"], "hardware": machine}
        again = ExperimentResult.from_dict(data)
        for c in again.configs:
            c.status, c.levels = "pending", []
            c.config.selection.extra = list(extra)
            c.config.selection.hardware = machine
        return again

    on_cpu, eager, graphs = fresh("cpu", []), fresh("h100", ["--enforce-eager"]), fresh("h100", [])
    assert "25 tok/s per user at concurrency 1 and 45 s per launch on vLLM's CPU build" in plan_lines(on_cpu)[-1]
    assert "on a GPU, eager" in plan_lines(eager)[-1] and "on a GPU with CUDA graphs" in plan_lines(graphs)[-1]
    # With the launches set apart, the levels take longest on the CPU and least with CUDA graphs.
    assert (estimate_seconds(graphs, launch_s=1.0) < estimate_seconds(eager, launch_s=1.0)
            < estimate_seconds(on_cpu, launch_s=1.0))
    # Measured figures, once a level has run, replace the guess.
    assert estimate_seconds(on_cpu, decode_tps=600.0, launch_s=100.0) == pytest.approx(estimate_seconds(graphs))


def test_level_figures_of_a_level_without_spec_decoding(recorded: ExperimentResult) -> None:
    level = level_figures("off", recorded.configs[0].levels[0])
    assert level.acceptance_rate is None and level.acceptance_rate_metrics is None
    assert level.decode_by_category and level.decode_per_user_tps is not None


def test_the_report_names_each_command_and_its_known_issues(catalog, recorded: ExperimentResult) -> None:
    """A GPU experiment's configurations, rendered (not launched): the MTP command meets a known issue upstream."""
    off, mtp = configs_from_specs("off,mtp", Selection(hardware="h200"), catalog)
    result = ExperimentResult(recorded.settings, recorded.workload, [ConfigResult(off), ConfigResult(mtp)],
                              machine=recorded.machine, started_at=recorded.started_at)
    for c in result.configs:
        plan = render_config(c.config, catalog)
        c.command, c.plan = plan.shell_command(multiline=False), plan.to_dict()
    page = report_html(result)
    assert "--speculative-config &#x27;{&quot;method&quot;:&quot;mtp&quot;" in page
    assert "Prefix caching together with MTP speculative decoding corrupts output" in page
    assert "No known issues recorded for this command." in page  # the off configuration


def test_the_done_when_run_1_4_16_names_ngram_and_where_its_lead_shrinks() -> None:
    """experiment-1-4-16.json: `experiment --hardware cpu --spec off,ngram --concurrency 1,4,16` (built-in
    workload, 128 output tokens) on the shared 2-core machine; its per-level figures, as written."""
    summary = json.loads((FIXTURE / "experiment-1-4-16.json").read_text())
    figures = [LevelFigures(label=c["label"], concurrency=lv["concurrency"], requests=0, errors=0,
                            decode_per_user_tps=lv["decode_per_user_tps"], output_tps=lv["output_tps"],
                            ttft_ms_mean=lv["ttft_ms_mean"], acceptance_rate=lv.get("acceptance_rate"),
                            acceptance_rate_metrics=lv.get("acceptance_rate_metrics"))
               for c in summary["configs"] for lv in c["levels"]]
    from workbench.experiment import winners

    per_user = {w.concurrency: w for w in winners(figures) if w.metric == "decode_per_user_tps"}
    assert per_user[1].label == "ngram" and per_user[1].lead == pytest.approx(1.65, abs=0.01)
    (x,) = crossovers(figures, ["ngram"], "off")
    assert x.stops_paying_at is None
    assert x.summary.endswith("its lead shrinks from 1.65x at concurrency 1 to 1.26x at 4, then 1.60x at 16.")
    for f in figures:
        if f.acceptance_rate is not None:
            assert f.acceptance_agreement is not None and f.acceptance_agreement <= 0.05


def test_goodput_winners_follow_the_slos(recorded: ExperimentResult) -> None:
    """The recorded requests judged against a TTFT SLO: goodput is computed per level and has a winner."""
    from workbench.bench.summary import summarize

    result = ExperimentResult.from_dict(recorded.to_dict())
    for c in result.configs:
        for level in c.levels:
            level.summary = summarize(level.records, {"time_to_first_token": 250.0})
    winners = {(w.concurrency, w.metric): w for w in result.winners()}
    good = winners[(1, "goodput_req_s")]
    figures = {(f.label, f.concurrency): f for f in result.figures()}
    assert good.value == max(figures[("off", 1)].goodput_req_s, figures[("ngram", 1)].goodput_req_s)
    assert all(f.good_fraction is not None for f in figures.values())
    assert "goodput_req_s" in result.summary()["configs"][0]["levels"][0]


def test_the_experiment_tab_and_notebook_view_show_the_recorded_run(recorded: ExperimentResult) -> None:
    from workbench.notebook.experiment_view import experiment_summary
    from workbench.ui.experiment_tab import curves_html, levels_frame, winners_frame

    winners = winners_frame(recorded)
    first = winners[(winners.concurrency == 1) & (winners.figure == "per-user decode tok/s")].iloc[0]
    assert first.winner == "ngram" and first.lead.endswith("over off")
    levels = levels_frame(recorded)
    assert sorted(levels["configuration"]) == ["ngram", "ngram", "off", "off"]
    assert curves_html(recorded).count("<svg") == 2 and "ngram is ahead of off" in curves_html(recorded)
    html = experiment_summary(recorded, Path("report.html"))
    assert "per-user decode tok/s" in html and "<svg" in html and "report.html" in html

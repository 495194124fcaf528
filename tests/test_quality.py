"""Quality beside speed, without a server: the task's items and scoring, the interval, the
agreement and the verdict, the report and experiment.json, the CLI's checks, and lm-eval's
own failures (an unknown task, a task whose data is not here, a server that is not there)
as the quality pass records them.

tests/fixtures/experiment-cpu-quality/state.json is what `python -m workbench experiment
--hardware cpu --spec off,ngram --concurrency 1,2 --requests 4 --osl 64` wrote on the 2-core
development machine (vLLM 0.32.0 CPU build, SmolLM2-135M, lm-eval 0.4.13, --quality quick):
every record, each configuration's agreement answers with their token ids, and lm-eval's scores.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path

import pytest

from workbench import cli
from workbench.errors import InputError
from workbench.experiment import ExperimentResult, ExperimentSettings, builtin_workload, format_quality, report_html
from workbench.experiment.configs import render_config, vary_configs
from workbench.experiment.quality import (
    Accuracy,
    Answer,
    ConfigQuality,
    ProblemKind,
    QualitySettings,
    Verdict,
    agreement,
    quality_rows,
    verdict,
    wilson_interval,
)
from workbench.experiment.quality_run import measure_quality
from workbench.experiment.quality_tasks.workbench_basics.scoring import answer_matches, normalise, read_items
from workbench.recipes import Selection, load_catalog
from workbench.server import free_port

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = Path(__file__).parent / "fixtures" / "experiment-cpu-quality"


@pytest.fixture(scope="module")
def recorded() -> ExperimentResult:
    return ExperimentResult.from_dict(json.loads((FIXTURE / "state.json").read_text()))


# -- the shipped task ---------------------------------------------------------

def test_the_task_file_is_what_its_generator_writes_and_interleaves_the_kinds() -> None:
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import make_quality_task
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    items = read_items()
    assert items == make_quality_task.items()  # the committed JSONL is reproducible
    kinds = ["copy", "extract", "arithmetic", "capitals", "larger", "next"]
    assert len(items) == 300 and len({i["id"] for i in items}) == 300
    assert {k: sum(i["kind"] == k for i in items) for k in kinds} == dict.fromkeys(kinds, 50)
    first = [i["kind"] for i in items[:24]]  # the quick pass: 4 of each kind
    assert {k: first.count(k) for k in kinds} == dict.fromkeys(kinds, 4)
    assert all(i["example_question"] != i["question"] for i in items)


def test_an_answer_counts_only_in_the_format_asked_for() -> None:
    assert answer_matches("Answer: 18.", "18", "caseless")
    assert answer_matches("  `Lyon`\nmore text", "lyon", "caseless")
    assert answer_matches('"garden  stone rabbit"', "garden stone rabbit", "caseless")
    assert not answer_matches("The answer is 18.", "18", "caseless")  # the value only, as each item asks
    assert not answer_matches("9 x 5 = 45", "45", "caseless")
    assert answer_matches("KETTLE", "KETTLE", "exact") and not answer_matches("Kettle", "KETTLE", "exact")
    assert normalise("\n\n**ROCKET**\n") == "ROCKET"


# -- the figures --------------------------------------------------------------

def test_wilson_interval_matches_the_textbook() -> None:
    low, high = wilson_interval(0, 10) or (None, None)
    assert low == 0.0 and high == pytest.approx(0.2775, abs=1e-4)
    low, high = wilson_interval(10, 10) or (None, None)
    assert low == pytest.approx(0.7225, abs=1e-4) and high == pytest.approx(1.0)
    low, high = wilson_interval(18, 48) or (None, None)
    assert low < 18 / 48 < high
    assert wilson_interval(0, 0) is None


def test_agreement_counts_identical_answers_and_the_common_token_prefix() -> None:
    reference = [Answer("a b c", [1, 2, 3]), Answer("x y", [7, 8]), Answer("q", [5])]
    mine = [Answer("a b c", [1, 2, 3]), Answer("x z", [7, 9]), Answer("", [])]
    got = agreement(mine, reference, "off")
    assert got is not None
    assert (got.compared, got.identical, got.unit) == (3, 1, "tokens")
    assert got.common_prefix == (3, 1, 0) and got.mean_common_prefix == pytest.approx(4 / 3)
    assert got.mean_reference_length == pytest.approx(2.0) and got.identical_share == pytest.approx(1 / 3)
    # A server that gave no token ids: characters, and the unit says so.
    by_text = agreement([Answer("abcd", None)], [Answer("abxy", [1, 2])], "off")
    assert by_text is not None and by_text.unit == "characters" and by_text.common_prefix == (2,)
    assert agreement([], reference, "off") is None


def test_a_loss_is_an_interval_wholly_below_the_reference() -> None:
    ref = Accuracy("workbench_basics", "acc", 150, 300)
    assert verdict(Accuracy("workbench_basics", "acc", 110, 300), ref) is Verdict.LOSS  # 31-42 % vs 44-56 %
    assert verdict(Accuracy("workbench_basics", "acc", 120, 300), ref) is Verdict.NO_LOSS  # 35-46 %: overlaps
    assert verdict(Accuracy("workbench_basics", "acc", 190, 300), ref) is Verdict.BETTER
    assert verdict(Accuracy("gsm8k", "exact_match,strict-match", 150, 300), ref) is Verdict.UNKNOWN
    assert verdict(None, ref) is Verdict.UNKNOWN


def test_quality_settings_size_each_mode_and_refuse_bad_values() -> None:
    quick, full = QualitySettings("quick"), QualitySettings("full")
    assert (quick.prompts_for(20), quick.tokens_for(128), quick.items_limit()) == (5, 64, 24)
    assert (full.prompts_for(20), full.tokens_for(128), full.items_limit()) == (20, 128, None)
    assert QualitySettings("quick", agreement_prompts=3, accuracy_items=12).items_limit() == 12
    with pytest.raises(InputError, match="off, quick, full"):
        QualitySettings("fast")  # type: ignore[arg-type]
    with pytest.raises(InputError, match="at least 1"):
        QualitySettings("quick", accuracy_items=0)
    # An experiment saved before quality existed resumes without a quality pass.
    old = ExperimentSettings.from_dict({"concurrency": [1, 2]})
    assert old.quality.mode == "off"
    round_trip = ExperimentSettings.from_dict(json.loads(json.dumps(ExperimentSettings(
        concurrency=[1], quality=QualitySettings("full", task="gsm8k", reference="ngram")).to_dict())))
    assert round_trip.quality == QualitySettings("full", task="gsm8k", reference="ngram")


# -- a recorded run: its report, its experiment.json, the winners --------------

def test_the_recorded_run_says_ngram_agreed_with_off_and_lost_nothing(recorded: ExperimentResult) -> None:
    rows = {r.label: r for r in recorded.quality_rows()}
    assert rows["off"].verdict is Verdict.REFERENCE
    ngram = rows["ngram"]
    assert ngram.agreement is not None and ngram.agreement.unit == "tokens" and ngram.agreement.compared == 5
    assert ngram.accuracy is not None and ngram.accuracy.n == 24 and ngram.accuracy.task == "workbench_basics"
    assert ngram.verdict in (Verdict.NO_LOSS, Verdict.BETTER)
    off_answers = recorded.configs[0].quality.answers if recorded.configs[0].quality else None
    assert off_answers and all(a.token_ids for a in off_answers)  # vLLM's return_token_ids
    text = format_quality(recorded)
    assert "off            reference" in text
    assert "ngram: per-user decode" in text and "at that speed, no loss of quality measured" in text
    summary = recorded.summary()
    entry = next(c for c in summary["configs"] if c["label"] == "ngram")
    assert entry["quality"]["verdict"] == ngram.verdict.value
    assert set(entry["quality"]["agreement"]) >= {"identical_share", "mean_common_prefix", "unit", "interval_95"}
    assert set(entry["quality"]["accuracy"]) >= {"accuracy", "interval_95", "n", "task"}
    assert summary["no_loss_winners"]  # nobody lost quality: the same crown as the winners
    assert [w["label"] for w in summary["no_loss_winners"]] == [w["label"] for w in summary["winners"]]
    page = report_html(recorded)
    assert "Quality beside speed" in page and "fastest with no loss of quality" in page
    assert "Right answers per kind of item" in page and "common prefix" in page


def test_the_experiment_tab_and_notebook_view_show_quality(recorded: ExperimentResult) -> None:
    from workbench.notebook.experiment_view import experiment_summary
    from workbench.ui.experiment_tab import _experiment, quality_frame, winners_frame

    table = quality_frame(recorded)
    assert list(table["configuration"]) == ["off", "ngram"] and list(table["quality"]) == ["reference", "no loss"]
    assert "fastest with no loss of quality" in winners_frame(recorded).columns
    html = experiment_summary(recorded)
    assert "Quality beside speed" in html and "agreement with the reference" in html
    plan = _experiment(load_catalog(), "cpu", "off,ngram", "1", "", "16", "", "", "quick", "", "ngram")
    assert plan.settings.quality == QualitySettings("quick", reference="ngram")
    with pytest.raises(InputError, match="names no configuration"):
        _experiment(load_catalog(), "cpu", "off,ngram", "1", "", "16", "", "", "quick", "", "fp8")


def test_a_faster_configuration_that_lost_quality_is_flagged_not_crowned(recorded: ExperimentResult) -> None:
    """The recorded run judged against ngram, with off's accuracy replaced by a lower one (an
    input to the judgement, not a measurement): off, the fastest per user there, is flagged and
    not crowned; ngram is the fastest that kept quality."""
    result = ExperimentResult.from_dict(recorded.to_dict())
    result.settings.quality.reference = "ngram"
    off = result.configs[0]
    assert off.label == "off" and off.quality is not None and off.quality.accuracy is not None
    off.quality.accuracy = Accuracy("workbench_basics", "acc", 0, 24)
    assert {r.label: r.verdict for r in result.quality_rows()}["off"] is Verdict.LOSS
    per_user = next(w for w in result.winners() if w.metric == "decode_per_user_tps")
    crowned = next(w for w in result.no_loss_winners() if w.metric == "decode_per_user_tps")
    assert per_user.label == "off" and crowned.label == "ngram"
    page = report_html(result)
    assert "off (quality loss)" in page and "a LOSS of quality" in page
    assert "off (quality loss)" in _cli_table(result)


def _cli_table(result: ExperimentResult) -> str:
    from workbench.experiment import format_winners

    return format_winners(result)


def test_the_reference_can_be_any_configuration() -> None:
    answers = [Answer("a", [1]), Answer("b", [2])]
    measured = [("off", ConfigQuality(answers=answers)), ("ngram", ConfigQuality(answers=[Answer("a", [1]),
                                                                                           Answer("c", [3])]))]
    rows = quality_rows(measured, "ngram")
    assert [r.label for r in rows if r.is_reference] == ["ngram"]
    off = next(r for r in rows if r.label == "off")
    assert off.agreement is not None and off.agreement.reference == "ngram" and off.agreement.identical == 1
    assert quality_rows(measured, "nosuch") == []


# -- configurations that differ only by flags -----------------------------------

def test_vary_makes_one_configuration_per_flag_set_for_each_spec_mode() -> None:
    catalog = load_catalog()
    base = Selection(hardware="cpu")
    fp32, bf16 = vary_configs(None, ["fp32=--dtype float32", "bf16=--dtype bfloat16"], base, catalog)
    assert (fp32.label, bf16.label) == ("fp32", "bf16")
    argv = render_config(bf16, catalog).argv
    assert argv[argv.index("--dtype") + 1] == "bfloat16" and "--speculative-config" not in argv
    crossed = vary_configs("off,ngram", ["a=--max-num-seqs 8", "b=--max-num-seqs 16"], base, catalog)
    assert [c.label for c in crossed] == ["off+a", "off+b", "ngram+a", "ngram+b"]
    assert "--speculative-config" in render_config(crossed[3], catalog).argv
    with pytest.raises(InputError, match="LABEL=FLAGS"):
        vary_configs(None, ["no-equals-sign"], base, catalog)
    with pytest.raises(InputError, match="twice"):
        vary_configs(None, ["a=--dtype float32", "a=--dtype float16"], base, catalog)


def _run(argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = cli.main(argv)
    return code, err.getvalue()


def test_the_cli_refuses_a_reference_that_names_no_configuration(tmp_path: Path) -> None:
    code, err = _run(["experiment", "--hardware", "cpu", "--spec", "off,ngram", "--reference", "fp8",
                      "--output-dir", str(tmp_path / "x")])
    assert code == 2 and "--reference 'fp8' names no configuration" in err and "off, ngram" in err
    code, err = _run(["experiment", "--hardware", "cpu", "--vary", "nolabel", "--output-dir", str(tmp_path / "y")])
    assert code == 2 and "LABEL=FLAGS" in err and "--vary" in err  # the CLI names the flag


# -- lm-eval's own failures, recorded (no server needed) -------------------------

def _quality_without_a_server(tmp_path: Path, task: str) -> ConfigQuality:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    return measure_quality(url, "m", builtin_workload().prompts, QualitySettings("quick", task=task,
                           agreement_prompts=1, accuracy_items=2), 16, tmp_path / "quality", "cfg")


def test_a_server_that_is_not_there_fails_both_halves_clearly(tmp_path: Path) -> None:
    quality = _quality_without_a_server(tmp_path, "workbench_basics")
    assert quality.status == "failed" and quality.accuracy is None and quality.answers == []
    kinds = {(p.part, p.kind) for p in quality.problems}
    assert kinds == {("agreement", ProblemKind.SERVER_UNREACHABLE), ("accuracy", ProblemKind.SERVER_UNREACHABLE)}
    assert all("could not" in p.message and p.hint for p in quality.problems)
    assert (tmp_path / "quality" / "cfg-lm-eval.log").stat().st_size > 0  # lm-eval's log is kept


def test_an_unknown_task_and_a_task_whose_data_is_not_here(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # as on a machine with no network: fail at once
    unknown = _quality_without_a_server(tmp_path, "gsm8kk")
    problem = next(p for p in unknown.problems if p.part == "accuracy")
    assert problem.kind is ProblemKind.UNKNOWN_TASK and "no task named 'gsm8kk'" in problem.message
    assert problem.hint and "gsm8k" in problem.hint  # the close names
    missing = _quality_without_a_server(tmp_path, "gsm8k")
    problem = next(p for p in missing.problems if p.part == "accuracy")
    assert problem.kind is ProblemKind.TASK_DATA_MISSING and "'gsm8k' is not on this machine" in problem.message
    assert problem.hint and "Hugging Face" in problem.hint and "workbench_basics" in problem.hint

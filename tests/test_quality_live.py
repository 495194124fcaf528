"""Quality beside speed against the real vLLM CPU build and the real lm-eval.

An experiment launches no drafter and the ngram drafter in turn; after each sweep the same
server answers the agreement prompts (token ids from vLLM) and lm-eval's local-chat-completions
model asks the shipped task. Then: a server that refuses the harness's requests (a model name
it does not serve), and an unknown task on an attached server, which costs the speed figures
nothing.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from workbench.experiment import (
    ExperimentConfig,
    ExperimentSettings,
    QualitySettings,
    builtin_workload,
    configs_from_specs,
    new_experiment,
    run_experiment,
)
from workbench.experiment.quality import ProblemKind, Verdict
from workbench.experiment.quality_run import measure_quality
from workbench.experiment.quality_tasks.workbench_basics.scoring import answer_matches
from workbench.recipes import Selection, load_catalog
from workbench.server import free_port, port_free

pytestmark = pytest.mark.vllm


def test_ngram_against_off_agreement_and_accuracy(demo_model_dir: Path, tmp_path: Path) -> None:
    catalog = load_catalog()
    configs = configs_from_specs("off,ngram", Selection(hardware="cpu"), catalog)
    quality = QualitySettings("quick", agreement_prompts=3, agreement_tokens=32, accuracy_items=12)
    settings = ExperimentSettings(concurrency=[1], requests_per_level=2, output_tokens=16, quality=quality)
    seen = []
    port = free_port()
    result = run_experiment(new_experiment(configs, settings, builtin_workload()), tmp_path / "exp", catalog,
                            progress=seen.append, state_dir=tmp_path / "state", port=port)
    assert result.status == "done" and [c.status for c in result.configs] == ["done", "done"]
    assert port_free("127.0.0.1", port)

    rows = {r.label: r for r in result.quality_rows()}
    assert rows["off"].verdict is Verdict.REFERENCE and not rows["off"].problems and not rows["ngram"].problems
    for c in result.configs:  # vLLM's own token ids, at most the 32 tokens asked
        assert c.quality is not None and c.quality.answers is not None and len(c.quality.answers) == 3
        assert all(a.token_ids and 0 < len(a.token_ids) <= 32 and a.text for a in c.quality.answers)
    agreed = rows["ngram"].agreement
    assert agreed is not None and agreed.unit == "tokens" and agreed.compared == 3 and agreed.reference == "off"
    assert 0 <= agreed.mean_common_prefix <= agreed.mean_reference_length
    # Greedy speculative decoding keeps the model's own answer: identical answers, the whole length in common.
    assert agreed.identical == 3 and agreed.mean_common_prefix == agreed.mean_reference_length

    for label in ("off", "ngram"):
        accuracy = rows[label].accuracy
        assert accuracy is not None and accuracy.task == "workbench_basics" and accuracy.metric == "acc"
        assert accuracy.n == 12 and sum(n for _, n in accuracy.by_kind.values()) == 12
        low, high = accuracy.interval or (1.0, 0.0)
        assert low <= (accuracy.value or 0.0) <= high
        # lm-eval scored each item as the task's own scoring does: read them back and check.
        lines = [json.loads(x) for x in (tmp_path / "exp" / "quality" / f"{label}-samples.jsonl").read_text()
                 .splitlines()]
        assert len(lines) == 12 and sum(x["right"] for x in lines) == accuracy.correct
        assert all(x["right"] == answer_matches(x["response"], x["doc"]["answer"], x["doc"]["match"]) for x in lines)
    assert rows["ngram"].verdict in (Verdict.NO_LOSS, Verdict.BETTER, Verdict.LOSS)

    phases = {(p.config, p.phase, p.total) for p in seen}
    assert {("off", "agreement", 3), ("off", "accuracy", 12), ("ngram", "accuracy", 12)} <= phases
    assert all(p.eta_s is not None for p in seen if p.phase in ("agreement", "accuracy"))
    summary = json.loads((tmp_path / "exp" / "experiment.json").read_text())
    ngram = next(c for c in summary["configs"] if c["label"] == "ngram")
    assert ngram["quality"]["agreement"]["identical_share"] == 1.0 and ngram["quality"]["accuracy"]["n"] == 12
    assert summary["no_loss_winners"]
    assert "Quality beside speed" in (tmp_path / "exp" / "report.html").read_text()


def test_a_server_that_refuses_the_harness_is_named(demo_server, tmp_path: Path) -> None:
    settings = QualitySettings("quick", agreement_prompts=1, agreement_tokens=8, accuracy_items=2)
    quality = measure_quality(demo_server.base_url, "no-such-model", builtin_workload().prompts, settings, 8,
                              tmp_path, "wrong-model")
    assert quality.status == "failed" and quality.accuracy is None
    by_part = {p.part: p for p in quality.problems}
    assert {p.kind for p in quality.problems} == {ProblemKind.SERVER_REFUSED}
    assert "HTTP 404" in by_part["agreement"].message and "no-such-model" in by_part["agreement"].message
    # The harness's requests, refused: vLLM's own words come through lm-eval's log.
    assert "HTTP 404" in by_part["accuracy"].message and "does not exist" in by_part["accuracy"].message


def test_an_unknown_task_costs_an_attached_server_its_accuracy_only(demo_server, tmp_path: Path) -> None:
    quality = QualitySettings("quick", task="no_such_task", agreement_prompts=1, agreement_tokens=8)
    settings = ExperimentSettings(concurrency=[1], requests_per_level=1, output_tokens=8,
                                  attach_url=demo_server.base_url, quality=quality)
    result = run_experiment(new_experiment([ExperimentConfig("mine", Selection())], settings, builtin_workload()),
                            tmp_path / "exp", load_catalog(), state_dir=tmp_path / "state")
    mine = result.configs[0]
    assert result.status == "done" and mine.status == "done" and mine.figures()[0].decode_per_user_tps
    assert mine.quality is not None and mine.quality.answers and mine.quality.accuracy is None
    assert [p.kind for p in mine.quality.problems] == [ProblemKind.UNKNOWN_TASK]
    summary = json.loads((tmp_path / "exp" / "experiment.json").read_text())
    assert summary["configs"][0]["levels"][0]["decode_per_user_tps"] > 0  # the speed figures are kept
    assert summary["configs"][0]["quality"]["problems"][0]["kind"] == "unknown_task"
    assert "no task named &#x27;no_such_task&#x27;" in (tmp_path / "exp" / "report.html").read_text()

"""Experiments: which configuration wins at my concurrency. Launch each, sweep, compare, one report.

    configs.py    a configuration: a label and a recipe Selection; `--spec off,ngram` short form
    workloads.py  the built-in prompt set (categories) and --dataset FILE.jsonl
    runner.py     for each configuration: launch (or attach), warm up, sweep, stop; progress, Ctrl-C, resume
    occupancy.py  before it starts: a server already running, the port taken, (GPU) memory in use
    analysis.py   each level's figures, the winners per concurrency, where spec decoding stops paying
    quality.py    quality beside speed: agreement with a reference, accuracy (lm-eval), the verdict
    quality_run.py  the quality pass on a configuration's server (lm_eval_worker.py runs lm-eval)
    quality_report.py  quality in the report, the terminal and the winners table
    quality_tasks/  the built-in lm-eval task, workbench_basics
    results.py    ExperimentResult: state.json, experiment.json, report.html after every level
    report.py     the self-contained HTML report, and the terminal tables
    slo.py        the SLO search: per configuration, how many users (or req/s) within the objectives
    slo_objectives.py  the objectives (ttft_p90:500 ...) and how a probe's requests are judged
    slo_report.py the search shown: the answer first, then the probes; one picture per objective
    charts.py     the report's SVG line and bar charts

    from workbench.experiment import configs_from_specs, builtin_workload, new_experiment, run_experiment
"""

from workbench.experiment.analysis import Crossover, LevelFigures, Winner, crossovers, level_figures, winners
from workbench.experiment.configs import (
    ExperimentConfig,
    configs_from_specs,
    parse_config_text,
    render_config,
    vary_configs,
)
from workbench.experiment.quality import QualityRow, QualitySettings
from workbench.experiment.report import format_levels, format_quality, format_winners, report_html
from workbench.experiment.results import ConfigResult, ExperimentResult, ExperimentSettings, load_experiment
from workbench.experiment.runner import ExperimentProgress, new_experiment, plan_lines, run_experiment
from workbench.experiment.slo import Capacity, Probe, SloAnswer, SloSearch, parse_slos
from workbench.experiment.slo_report import format_slo, slo_html
from workbench.experiment.workloads import Workload, WorkloadPrompt, builtin_workload, load_dataset

__all__ = [
    "Capacity",
    "ConfigResult",
    "Crossover",
    "ExperimentConfig",
    "ExperimentProgress",
    "ExperimentResult",
    "ExperimentSettings",
    "LevelFigures",
    "Probe",
    "QualityRow",
    "QualitySettings",
    "SloAnswer",
    "SloSearch",
    "Winner",
    "Workload",
    "WorkloadPrompt",
    "builtin_workload",
    "configs_from_specs",
    "crossovers",
    "format_levels",
    "format_quality",
    "format_slo",
    "format_winners",
    "level_figures",
    "load_dataset",
    "load_experiment",
    "new_experiment",
    "parse_config_text",
    "parse_slos",
    "plan_lines",
    "render_config",
    "report_html",
    "run_experiment",
    "slo_html",
    "vary_configs",
    "winners",
]

"""An experiment's results: every configuration, its command, its levels; saved after every level.

Files in the experiment's folder:
    state.json        everything (settings, workload, each level's full BenchResult with its
                      records): what --resume reads
    experiment.json   per configuration `label`, `status` and its `levels` (`concurrency`,
                      `decode_per_user_tps`, `output_tps`, `ttft_ms_mean`, and for a speculative
                      one `acceptance_rate` from the responses and `acceptance_rate_metrics` from
                      the /metrics deltas), and with a quality pass its `quality` (QualityRow:
                      `agreement` with the reference: `identical_share`, `mean_common_prefix`,
                      `unit`; `accuracy`: `task`, `accuracy`, `interval_95`, `n`; `verdict`);
                      plus the winners, the `no_loss_winners` and crossovers; with an SLO
                      search, `slo`: the answer first (each configuration's capacity, the
                      winner and its lead), then every probe (workbench.experiment.slo)
    report.html       one self-contained page (workbench.experiment.report)
"""

from __future__ import annotations

import datetime as dt
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from workbench.bench.results import BenchResult
from workbench.errors import InputError
from workbench.experiment.analysis import (
    Crossover,
    LevelFigures,
    Winner,
    crossovers,
    level_figures,
    winners,
)
from workbench.experiment.configs import ExperimentConfig
from workbench.experiment.quality import ConfigQuality, QualityRow, QualitySettings, no_loss_winners, quality_rows
from workbench.experiment.slo import Probe, SloAnswer, SloSearch, capacity_of, compare
from workbench.experiment.workloads import Workload

__all__ = ["EXPERIMENTS_DIR", "STATE_FILE", "SUMMARY_FILE", "ConfigResult", "ConfigStatus", "ExperimentResult",
           "ExperimentSettings", "default_output_dir", "load_experiment"]

STATE_FILE = "state.json"
SUMMARY_FILE = "experiment.json"
REPORT_FILE = "report.html"
# Results go under this folder (of the folder the workbench runs in) unless told: kept, not temporary.
EXPERIMENTS_DIR = "experiments"


def default_output_dir(root: Path | str | None = None) -> Path:
    """A new experiment's folder: `<root>/<date-time>`, root `experiments` unless given."""
    return Path(root or EXPERIMENTS_DIR) / dt.datetime.now().strftime("%Y%m%d-%H%M%S")
ConfigStatus = Literal["pending", "running", "done", "failed", "partial"]


@dataclass
class ExperimentSettings:
    concurrency: list[int]
    requests_per_level: int | None = None  # None: max(prompts in the workload, 2 x concurrency)
    output_tokens: int = 128
    warmup_requests: int = 1
    temperature: float = 0.0
    goodput: dict[str, float] | None = None
    startup_timeout_s: float = 900.0
    attach_url: str | None = None
    quality: QualitySettings = field(default_factory=QualitySettings)  # off unless asked (the CLI asks quick)
    slo: dict[str, Any] | None = None  # an SLO search after the levels: SloSearch.to_dict()

    def search(self) -> SloSearch | None:
        return None if self.slo is None else SloSearch.from_dict(self.slo)

    def requests_at(self, concurrency: int, prompts: int) -> int:
        if self.requests_per_level is not None:
            return max(self.requests_per_level, concurrency)
        return max(prompts, 2 * concurrency)

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "quality": self.quality.to_dict()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ExperimentSettings:
        values = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        values["quality"] = QualitySettings.from_dict(data.get("quality") or {})
        return cls(**values)


@dataclass
class ConfigResult:
    config: ExperimentConfig
    status: ConfigStatus = "pending"
    command: str | None = None  # the exact command, as the plan renders it
    plan: dict[str, Any] | None = None  # LaunchPlan.to_dict(): argv, env, known issues
    diagnosis: dict[str, Any] | None = None  # why it failed to launch: summary, fix, log tail
    levels: list[BenchResult] = field(default_factory=list)
    server: dict[str, Any] = field(default_factory=dict)  # base_url, vllm_version, time_to_ready_s
    note: str | None = None  # partial: why
    probes: list[Probe] = field(default_factory=list)  # the SLO search's, in the order run
    quality: ConfigQuality | None = None  # the quality pass on the same server, after the sweep

    @property
    def label(self) -> str:
        return self.config.label

    @property
    def speculative(self) -> bool:
        return self.config.spec is not None or any(f.speculative for f in self.figures())

    def done_levels(self) -> set[int]:
        return {r.config.concurrency for r in self.levels if r.partial is None}

    def figures(self) -> list[LevelFigures]:
        return [level_figures(self.label, r) for r in self.levels]

    def known_issues(self) -> list[dict[str, Any]]:
        return list((self.plan or {}).get("known_issues") or [])

    def to_dict(self) -> dict[str, Any]:
        return {"config": self.config.to_dict(), "status": self.status, "command": self.command, "plan": self.plan,
                "diagnosis": self.diagnosis, "levels": [r.to_dict() for r in self.levels], "server": self.server,
                "note": self.note, "probes": [p.to_dict() for p in self.probes],
                "quality": None if self.quality is None else self.quality.to_dict()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ConfigResult:
        return cls(config=ExperimentConfig.from_dict(data["config"]), status=data.get("status", "pending"),
                   command=data.get("command"), plan=data.get("plan"), diagnosis=data.get("diagnosis"),
                   levels=[BenchResult.from_dict(r) for r in data.get("levels") or []],
                   server=data.get("server") or {}, note=data.get("note"),
                   probes=[Probe.from_dict(p) for p in data.get("probes") or []],
                   quality=None if data.get("quality") is None else ConfigQuality.from_dict(data["quality"]))


@dataclass
class ExperimentResult:
    settings: ExperimentSettings
    workload: Workload
    configs: list[ConfigResult]
    machine: dict[str, Any] = field(default_factory=dict)
    started_at: str = ""
    status: Literal["running", "done", "partial"] = "running"
    partial: str | None = None  # why it ended early

    def figures(self) -> list[LevelFigures]:
        return [f for c in self.configs for f in c.figures()]

    def baseline(self) -> str | None:
        return next((c.label for c in self.configs if not c.speculative and c.levels), None)

    def winners(self) -> list[Winner]:
        return winners(self.figures())

    def quality_rows(self) -> list[QualityRow]:
        """Each checked configuration's agreement and accuracy, judged against the reference."""
        return quality_rows([(c.label, c.quality) for c in self.configs], self.settings.quality.reference)

    def no_loss_winners(self) -> list[Winner]:
        """The winners among the configurations that kept quality; empty without an accuracy to judge by."""
        return no_loss_winners(self.figures(), self.quality_rows())

    def crossovers(self) -> list[Crossover]:
        return crossovers(self.figures(), [c.label for c in self.configs if c.speculative and c.levels],
                          self.baseline())

    def slo_answer(self) -> SloAnswer | None:
        """Each configuration's capacity within the SLO, and the winner (None without a search)."""
        search = self.settings.search()
        if search is None:
            return None
        return compare([capacity_of(c.label, search, c.probes) for c in self.configs if c.status != "failed"])

    def to_dict(self) -> dict[str, Any]:
        return {"settings": self.settings.to_dict(), "workload": self.workload.to_dict(),
                "configs": [c.to_dict() for c in self.configs], "machine": self.machine,
                "started_at": self.started_at, "status": self.status, "partial": self.partial}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ExperimentResult:
        return cls(settings=ExperimentSettings.from_dict(data["settings"]),
                   workload=Workload.from_dict(data["workload"]),
                   configs=[ConfigResult.from_dict(c) for c in data["configs"]],
                   machine=data.get("machine") or {}, started_at=data.get("started_at", ""),
                   status=data.get("status", "partial"), partial=data.get("partial"))

    def summary(self) -> dict[str, Any]:
        """experiment.json: the fields the issue names, then the answer."""
        configs = []
        rows = {r.label: r for r in self.quality_rows()}
        for c in self.configs:
            levels = []
            for f in c.figures():
                level: dict[str, Any] = {"concurrency": f.concurrency, "decode_per_user_tps": f.decode_per_user_tps,
                                         "output_tps": f.output_tps, "ttft_ms_mean": f.ttft_ms_mean}
                if c.speculative:
                    level["acceptance_rate"] = f.acceptance_rate
                    level["acceptance_rate_metrics"] = f.acceptance_rate_metrics
                if f.goodput_req_s is not None:
                    level["goodput_req_s"] = f.goodput_req_s
                if f.partial is not None:
                    level["partial"] = f.partial
                levels.append(level)
            entry: dict[str, Any] = {"label": c.label, "status": c.status, "levels": levels}
            if c.diagnosis:
                entry["diagnosis"] = c.diagnosis
            if c.label in rows:
                entry["quality"] = rows[c.label].to_dict()
            configs.append(entry)
        out: dict[str, Any] = {"status": self.status, "partial": self.partial}
        answer = self.slo_answer()
        if answer is not None:  # the answer first, then every probe (figures only: records are in state.json)
            out["slo"] = {**answer.to_dict(), "search": self.settings.slo,
                          "probes": {c.label: [p.to_dict(records=False) for p in c.probes] for c in self.configs}}
        return {**out, "configs": configs, "winners": [w.to_dict() for w in self.winners()],
                "no_loss_winners": [w.to_dict() for w in self.no_loss_winners()],
                "crossovers": [x.to_dict() for x in self.crossovers()]}

    def save(self, directory: Path | str, report: str) -> dict[str, Path]:
        """Write state.json, experiment.json and `report` (the rendered report.html), each
        replaced whole, never half-written."""
        folder = Path(directory)
        folder.mkdir(parents=True, exist_ok=True)
        paths = {"state": folder / STATE_FILE, "summary": folder / SUMMARY_FILE, "report": folder / REPORT_FILE}
        _replace(paths["state"], json.dumps(self.to_dict()))
        _replace(paths["summary"], json.dumps(self.summary(), indent=1))
        _replace(paths["report"], report)
        return paths


def _replace(path: Path, text: str) -> None:
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(text, encoding="utf-8")
    temporary.replace(path)


def load_experiment(directory: Path | str) -> ExperimentResult:
    path = Path(directory) / STATE_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return ExperimentResult.from_dict(data)
    except FileNotFoundError as exc:
        raise InputError(f"{directory} holds no experiment ({STATE_FILE} is missing).",
                         hint="Give the folder an earlier experiment wrote.", settings=("resume",)) from exc
    except (ValueError, KeyError, TypeError) as exc:
        raise InputError(f"{path} is not an experiment's state ({type(exc).__name__}: {exc}).",
                         hint="Give the folder an earlier experiment wrote.", settings=("resume",)) from exc

"""A run's result: BenchResult / SweepResult, saved as JSON and CSV, loaded, compared.

The data model owns its files (no report module is needed to save one), so the
runner, the report and the views all depend on this module and not on each other.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workbench import __version__
from workbench.bench.config import BenchConfig
from workbench.bench.records import RequestRecord
from workbench.bench.summary import DEFINITIONS, Distribution, ServerCounters, Summary
from workbench.errors import WorkbenchError

__all__ = ["BenchResult", "SweepResult", "compare_results", "load_result"]


@dataclass
class BenchResult:
    config: BenchConfig
    model: str
    max_model_len: int | None
    started_at: str  # wall clock, ISO 8601 UTC
    summary: Summary
    records: list[RequestRecord]
    warmup: int  # warm-up requests sent and not counted
    server_counters: ServerCounters | None
    input_length_mismatches: int  # requests whose usage.prompt_tokens != the target
    definitions: dict[str, str] = field(default_factory=lambda: dict(DEFINITIONS))
    reference: dict[str, Any] | None = None
    workbench_version: str = __version__

    @property
    def label(self) -> str:
        return self.config.label or f"{self.model} @ {self.config.url}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "config": self.config.to_dict(),
            "model": self.model,
            "max_model_len": self.max_model_len,
            "started_at": self.started_at,
            "summary": self.summary.to_dict(),
            "server_counters": None if self.server_counters is None else self.server_counters.to_dict(),
            "input_length_mismatches": self.input_length_mismatches,
            "warmup": self.warmup,
            "definitions": self.definitions,
            "reference": self.reference,
            "workbench_version": self.workbench_version,
            "records": [r.to_dict() for r in self.records],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BenchResult:
        counters = data.get("server_counters")
        return cls(
            config=BenchConfig.from_dict(data["config"]),
            model=data["model"],
            max_model_len=data.get("max_model_len"),
            started_at=data["started_at"],
            summary=Summary.from_dict(data["summary"]),
            records=[RequestRecord.from_dict(r) for r in data.get("records", [])],
            warmup=data.get("warmup", 0),
            server_counters=None if counters is None else ServerCounters.from_dict(counters),
            input_length_mismatches=data.get("input_length_mismatches", 0),
            definitions=data.get("definitions", dict(DEFINITIONS)),
            reference=data.get("reference"),
            workbench_version=data.get("workbench_version", "?"),
        )

    def save(self, directory: Path | str, stem: str = "bench") -> dict[str, Path]:
        """Write <stem>.json (everything), <stem>-requests.csv and <stem>-summary.csv."""
        return write_result_files(self, Path(directory), stem)


@dataclass
class SweepResult:
    """One BenchResult per concurrency level, same shape."""

    levels: list[BenchResult]

    def plot_rows(self) -> list[dict[str, Any]]:
        """Throughput vs concurrency and latency percentiles: one flat row per level."""
        rows = []
        for result in self.levels:
            s = result.summary
            rows.append(
                {
                    "concurrency": result.config.concurrency,
                    "requests": s.requests,
                    "errors": s.errors,
                    "request_throughput": s.request_throughput,
                    "output_tok_s": s.output_tok_s,
                    "total_tok_s": s.total_tok_s,
                    "decode_tok_s_per_user_mean": s.decode_tok_s_per_user.mean,
                    "prefill_tok_s_per_user_mean": s.prefill_tok_s_per_user.mean,
                    **{f"ttft_ms_p{q}": getattr(s.ttft_ms, f"p{q}") for q in (50, 90, 99)},
                    **{f"tpot_ms_p{q}": getattr(s.tpot_ms, f"p{q}") for q in (50, 90, 99)},
                    **{f"e2e_ms_p{q}": getattr(s.e2e_ms, f"p{q}") for q in (50, 90, 99)},
                }
            )
        return rows

    def to_dict(self) -> dict[str, Any]:
        return {"levels": [r.to_dict() for r in self.levels], "plot_rows": self.plot_rows()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SweepResult:
        return cls([BenchResult.from_dict(r) for r in data["levels"]])

    def save(self, directory: Path | str, stem: str = "sweep") -> dict[str, Path]:
        return write_sweep_files(self, Path(directory), stem)
def load_result(path: Path | str) -> BenchResult:
    """A result saved by BenchResult.save (its .json file)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError as exc:
        raise WorkbenchError(f"No such result file: {path}", hint="Pass the .json a benchmark run wrote.") from exc
    except (OSError, ValueError) as exc:
        raise WorkbenchError(f"Cannot read {path} as a benchmark result: {exc}") from exc
    try:
        return BenchResult.from_dict(data)
    except (KeyError, TypeError) as exc:
        raise WorkbenchError(
            f"{path} is not a workbench benchmark result (missing {exc}).",
            hint="Pass the bench.json written by `python -m workbench bench`.",
        ) from exc


_COMPARED = (
    ("requests", "requests", lambda s: s.requests),
    ("errors", "errors", lambda s: s.errors),
    ("output tok/s", "tok/s", lambda s: s.output_tok_s),
    ("total tok/s", "tok/s", lambda s: s.total_tok_s),
    ("requests/s", "req/s", lambda s: s.request_throughput),
    ("TTFT mean", "ms", lambda s: s.ttft_ms.mean),
    ("TTFT p99", "ms", lambda s: s.ttft_ms.p99),
    ("TPOT mean", "ms", lambda s: s.tpot_ms.mean),
    ("ITL p99 (per chunk)", "ms", lambda s: s.itl_ms.p99),
    ("E2E mean", "ms", lambda s: s.e2e_ms.mean),
    ("E2E p99", "ms", lambda s: s.e2e_ms.p99),
    ("decode tok/s per user", "tok/s", lambda s: s.decode_tok_s_per_user.mean),
    ("prefill tok/s per user", "tok/s", lambda s: s.prefill_tok_s_per_user.mean),
)


def compare_results(a: BenchResult, b: BenchResult) -> list[dict[str, Any]]:
    """Side-by-side rows: metric, unit, a, b, and b's change relative to a in %."""
    rows = []
    for name, unit, get in _COMPARED:
        va, vb = get(a.summary), get(b.summary)
        change = None if va in (None, 0) or vb is None else (vb - va) / va * 100
        rows.append({"metric": name, "unit": unit, "a": va, "b": vb, "change_pct": change})
    return rows


def _summary_rows(result: BenchResult) -> list[dict[str, Any]]:
    s = result.summary
    rows: list[dict[str, Any]] = []
    for name in type(s).DISTRIBUTIONS:
        d: Distribution = getattr(s, name)
        rows.append({"metric": name, **d.to_dict()})
    for name in ("requests", "succeeded", "errors", "duration_s", "input_tokens", "output_tokens",
                 "reasoning_tokens", "request_throughput", "output_tok_s", "total_tok_s"):
        rows.append({"metric": name, "mean": getattr(s, name)})
    if result.server_counters is not None:
        for name, value in result.server_counters.to_dict().items():
            rows.append({"metric": f"server_{name}", "mean": value})
    return rows


def _write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    fields: list[str] = []
    for row in rows:
        fields += [k for k in row if k not in fields]
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)


def write_result_files(result: BenchResult, directory: Path, stem: str = "bench") -> dict[str, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    paths = {
        "json": directory / f"{stem}.json",
        "requests_csv": directory / f"{stem}-requests.csv",
        "summary_csv": directory / f"{stem}-summary.csv",
    }
    paths["json"].write_text(json.dumps(result.to_dict(), indent=1))
    _write_csv(paths["requests_csv"], [r.flat_row() for r in result.records])
    _write_csv(paths["summary_csv"], _summary_rows(result))
    return paths


def write_sweep_files(sweep: SweepResult, directory: Path, stem: str = "sweep") -> dict[str, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    paths = {"json": directory / f"{stem}.json", "csv": directory / f"{stem}.csv"}
    paths["json"].write_text(json.dumps(sweep.to_dict(), indent=1))
    _write_csv(paths["csv"], sweep.plot_rows())
    for result in sweep.levels:
        result.save(directory, f"{stem}-c{result.config.concurrency}")

"""A run's result: BenchResult / SweepResult, saved as JSON and CSV, loaded, compared.

The data model owns its files (no report module is needed to save one), so the
runner, the report and the views all depend on this module and not on each other.
Saving never overwrites: an existing <stem>.json makes the new files <stem>-2.*,
<stem>-3.* and so on; `check_output_dir` says before a run whether it can write.
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workbench._version import __version__
from workbench.bench.config import BenchConfig
from workbench.bench.figures import figures_html
from workbench.bench.lag import ClientLag
from workbench.bench.records import RequestRecord
from workbench.bench.summary import DEFINITIONS, Distribution, ServerCounters, Summary
from workbench.errors import BenchError, StopReason
from workbench.telemetry import GpuRunFigures

__all__ = ["BenchResult", "SweepResult", "check_output_dir", "compare_results", "free_stem", "load_result"]


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
    client_lag: ClientLag | None = None
    partial: str | None = None  # why the run ended early, in words; None = it ran to its end
    stop_reason: StopReason | None = None  # why it ended early, to branch on (set with `partial`)
    counters_problem: str | None = None  # why the server counters are missing
    input_lengths_from: str | None = None  # who counted the prompts' tokens
    notes: list[str] = field(default_factory=list)
    # The GPUs of the machine that ran the benchmark, over the measured window (NVML).
    gpu: GpuRunFigures | None = None

    @property
    def tokens_per_joule(self) -> float | None:
        """Output tokens over the GPUs' energy in the window; None where the power is not known
        (no NVIDIA GPU here, or the server runs on another machine's GPUs)."""
        return None if self.gpu is None else self.gpu.tokens_per_joule(self.summary.output_tokens)

    @property
    def label(self) -> str:
        return self.config.label or f"{self.model} @ {self.config.url}"

    @property
    def client_bound(self) -> bool:
        return self.client_lag is not None and self.client_lag.client_bound

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
            "partial": self.partial,
            "stop_reason": None if self.stop_reason is None else self.stop_reason.value,
            "client_lag": None if self.client_lag is None else self.client_lag.to_dict(),
            "client_bound": self.client_bound,
            "counters_problem": self.counters_problem,
            "input_lengths_from": self.input_lengths_from,
            "notes": self.notes,
            "gpu": None if self.gpu is None else self.gpu.to_dict(),
            "tokens_per_joule": self.tokens_per_joule,
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
            client_lag=None if data.get("client_lag") is None else ClientLag.from_dict(data["client_lag"]),
            partial=data.get("partial"),
            stop_reason=None if data.get("stop_reason") is None else StopReason(data["stop_reason"]),
            counters_problem=data.get("counters_problem"),
            input_lengths_from=data.get("input_lengths_from"),
            notes=list(data.get("notes") or []),
            gpu=None if data.get("gpu") is None else GpuRunFigures.from_dict(data["gpu"]),
        )

    def save(self, directory: Path | str, stem: str = "bench") -> dict[str, Path]:
        """Write <stem>.json (everything), <stem>-requests.csv, <stem>-summary.csv and
        <stem>-figures.html; a stem already used gets a number, nothing is overwritten."""
        directory = Path(directory)
        return write_result_files(self, directory, free_stem(directory, stem))


@dataclass
class SweepResult:
    """One BenchResult per concurrency level, same shape."""

    levels: list[BenchResult]
    planned: list[int] = field(default_factory=list)  # the concurrencies asked for

    @property
    def partial(self) -> str | None:
        """Why the sweep ended before its last level, if it did."""
        for result in self.levels:
            if result.partial is not None:
                missing = [c for c in self.planned if c not in {r.config.concurrency for r in self.levels}]
                rest = f"; levels {', '.join(map(str, missing))} not run" if missing else ""
                return f"concurrency {result.config.concurrency}: {result.partial}{rest}"
        return None

    @property
    def stop_reason(self) -> StopReason | None:
        """Why the sweep ended before its last level (the level that ended it), if it did."""
        return next((r.stop_reason for r in self.levels if r.partial is not None), None)

    def plot_rows(self) -> list[dict[str, Any]]:
        """Throughput vs concurrency and latency percentiles: one flat row per level."""
        rows = []
        for result in self.levels:
            s = result.summary
            lag = result.client_lag
            goodput = s.goodput
            rows.append(
                {
                    "concurrency": result.config.concurrency,
                    "requests": s.requests,
                    "errors": s.errors,
                    "partial": result.partial is not None,
                    "client_bound": result.client_bound,
                    "client_lag_p99_ms": None if lag is None else lag.p99_ms,
                    "client_cpu_percent": None if lag is None else lag.cpu_percent,
                    "good_fraction": None if goodput is None else goodput.good_fraction,
                    "goodput_req_s": None if goodput is None else goodput.goodput_req_s,
                    "request_throughput": s.request_throughput,
                    "output_tok_s": s.output_tok_s,
                    "total_tok_s": s.total_tok_s,
                    "decode_tok_s_per_user_mean": s.decode_tok_s_per_user.mean,
                    "prefill_tok_s_per_user_mean": s.prefill_tok_s_per_user.mean,
                    **{f"ttft_ms_p{q}": getattr(s.ttft_ms, f"p{q}") for q in (50, 90, 99)},
                    **{f"tpot_ms_p{q}": getattr(s.tpot_ms, f"p{q}") for q in (50, 90, 99)},
                    **{f"e2e_ms_p{q}": getattr(s.e2e_ms, f"p{q}") for q in (50, 90, 99)},
                    **gpu_columns(result),
                }
            )
        return rows

    def to_dict(self) -> dict[str, Any]:
        return {"levels": [r.to_dict() for r in self.levels], "planned": self.planned, "partial": self.partial,
                "stop_reason": None if self.stop_reason is None else self.stop_reason.value,
                "plot_rows": self.plot_rows()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SweepResult:
        return cls([BenchResult.from_dict(r) for r in data["levels"]], list(data.get("planned") or []))

    def save(self, directory: Path | str, stem: str = "sweep") -> dict[str, Path]:
        directory = Path(directory)
        return write_sweep_files(self, directory, free_stem(directory, stem))


def free_stem(directory: Path, stem: str) -> str:
    """`stem`, or stem-2, stem-3, ... : the first whose files do not exist yet."""
    candidate, n = stem, 1
    while any(directory.glob(f"{candidate}.*")) or any(directory.glob(f"{candidate}-*.*")):
        n += 1
        candidate = f"{stem}-{n}"
    return candidate


def check_output_dir(directory: Path | str) -> Path:
    """Create `directory` if needed and prove it is writable, before a run is spent."""
    directory = Path(directory)
    hint = "Give a folder you can write to for the results."
    if directory.exists() and not directory.is_dir():
        raise BenchError(f"The results folder {directory} is a file, not a folder.", hint=hint,
                             settings=("output_dir",))
    try:
        directory.mkdir(parents=True, exist_ok=True)
        probe = directory / f".write-test-{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise BenchError(f"Cannot write results to {directory}: {exc.strerror or exc}.", hint=hint,
                             settings=("output_dir",)) from exc
    return directory


def load_result(path: Path | str) -> BenchResult:
    """A result saved by BenchResult.save (its .json file)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError as exc:
        raise BenchError(f"No such result file: {path}", hint="Pass the .json a benchmark run wrote.") from exc
    except (OSError, ValueError) as exc:
        raise BenchError(f"Cannot read {path} as a benchmark result: {exc}") from exc
    try:
        return BenchResult.from_dict(data)
    except (KeyError, TypeError) as exc:
        raise BenchError(
            f"{path} is not a workbench benchmark result (missing {exc}).",
            hint="Give the bench.json a benchmark wrote.",
        ) from exc


_COMPARED: tuple[tuple[str, str, Callable[[Summary], float | None]], ...] = (
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
    if s.goodput is not None:
        rows.append({"metric": "good_fraction", "mean": s.goodput.good_fraction})
        rows.append({"metric": "goodput_req_s", "mean": s.goodput.goodput_req_s})
    if s.prefix_cache_hit_rate is not None or s.prefix_cache_hit_rate_metrics is not None:
        rows.append({"metric": "prefix_cache_hit_rate", "mean": s.prefix_cache_hit_rate})
        rows.append({"metric": "prefix_cache_hit_rate_metrics", "mean": s.prefix_cache_hit_rate_metrics})
    if result.client_lag is not None:
        rows.append({"metric": "client_lag_p99_ms", "mean": result.client_lag.p99_ms})
        rows.append({"metric": "client_bound", "mean": result.client_bound})
    if result.server_counters is not None:
        for name, value in result.server_counters.to_dict().items():
            rows.append({"metric": f"server_{name}", "mean": value})
    rows += [{"metric": name, "mean": value} for name, value in gpu_columns(result).items()]
    return rows


def gpu_columns(result: BenchResult) -> dict[str, Any]:
    """The GPUs over the run (this machine's, NVML): mean utilization, power, peak memory, tokens per joule."""
    g = result.gpu
    peak = None if g is None else g.peak_memory_used_bytes
    return {
        "gpu_util_pct_mean": None if g is None else g.mean_utilization_pct,
        "gpu_power_w_mean": None if g is None else g.mean_power_w,
        "gpu_memory_used_gb_peak": None if peak is None else peak / 1e9,
        "gpu_energy_j": None if g is None else g.energy_j,
        "tokens_per_joule": result.tokens_per_joule,
    }


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
    if result.summary.per_turn:
        paths["turns_csv"] = directory / f"{stem}-turns.csv"
        _write_csv(paths["turns_csv"], result.summary.per_turn)
    paths["figures_html"] = _write_figures(directory / f"{stem}-figures.html", [result])
    return paths


def write_sweep_files(sweep: SweepResult, directory: Path, stem: str = "sweep") -> dict[str, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    paths = {"json": directory / f"{stem}.json", "csv": directory / f"{stem}.csv"}
    paths["json"].write_text(json.dumps(sweep.to_dict(), indent=1))
    _write_csv(paths["csv"], sweep.plot_rows())
    paths["figures_html"] = _write_figures(directory / f"{stem}-figures.html", sweep.levels)
    for result in sweep.levels:
        write_result_files(result, directory, f"{stem}-c{result.config.concurrency}")
    return paths


def _write_figures(path: Path, levels: list[BenchResult]) -> Path:
    path.write_text(figures_html(levels))
    return path

"""Scrape a vLLM server's `/metrics` and turn its counters and histograms into figures.

The pipeline, each step a plain function the poller only strings together:

    fetch_metrics_text(url) -> text
    parse_metrics(text, taken_at) -> Snapshot      prometheus_client's parser; keeps only
                                                   the vLLM series the figures need, one
                                                   value per label set
    derive_figures(snapshots) -> ThroughputFigures over the snapshots of one window

Rates follow Prometheus' `rate()`: each series' increase is added up over consecutive
scrapes, and a value lower than the one before (or a counter whose `_created` time moved:
the server restarted) is a counter reset, so the new value counts as the increase since
the reset and the figures say a reset happened. Increases are then summed over every label
set (engines, models), as vLLM's own Grafana dashboard does. Unlike `rate()` nothing is
extrapolated: the rate is the increase over the exact time between the window's first and
last scrape.

A metric the server does not expose is None and listed in `ThroughputFigures.not_reported`
("not reported" when displayed), never 0. Metric names are those of vLLM 0.32.0 (see
tests/fixtures/vllm-0.32.0-cpu/*.prom).
"""

from __future__ import annotations

import csv
import json
import math
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

import httpx
from prometheus_client.parser import text_string_to_metric_families

from workbench.errors import WorkbenchError

__all__ = [
    "MetricsError",
    "Snapshot",
    "LatencySummary",
    "ThroughputFigures",
    "MetricsPoller",
    "NOT_REPORTED",
    "SERIES_COLUMNS",
    "metrics_url",
    "fetch_metrics_text",
    "parse_metrics",
    "derive_figures",
    "select_window",
    "histogram_quantile",
]

# vLLM's metric names (vLLM 0.32.0). Counters are named by their `_total` sample.
PROMPT_TOKENS = "vllm:prompt_tokens_total"
GENERATION_TOKENS = "vllm:generation_tokens_total"
PREEMPTIONS = "vllm:num_preemptions_total"
REQUEST_SUCCESS = "vllm:request_success_total"  # label finished_reason
PREFIX_CACHE_QUERIES = "vllm:prefix_cache_queries_total"
PREFIX_CACHE_HITS = "vllm:prefix_cache_hits_total"
SPEC_DRAFTS = "vllm:spec_decode_num_drafts_total"
SPEC_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
SPEC_ACCEPTED_TOKENS = "vllm:spec_decode_num_accepted_tokens_total"
SPEC_ACCEPTED_PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos_total"  # label position
RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
KV_CACHE_USAGE = "vllm:kv_cache_usage_perc"  # a fraction, 1.0 = full, despite the name
TTFT = "vllm:time_to_first_token_seconds"
ITL = "vllm:inter_token_latency_seconds"
TPOT = "vllm:request_time_per_output_token_seconds"
E2E = "vllm:e2e_request_latency_seconds"

COUNTERS = frozenset(
    {
        PROMPT_TOKENS,
        GENERATION_TOKENS,
        PREEMPTIONS,
        REQUEST_SUCCESS,
        PREFIX_CACHE_QUERIES,
        PREFIX_CACHE_HITS,
        SPEC_DRAFTS,
        SPEC_DRAFT_TOKENS,
        SPEC_ACCEPTED_TOKENS,
        SPEC_ACCEPTED_PER_POSITION,
    }
)
GAUGES = frozenset({RUNNING, WAITING, KV_CACHE_USAGE})
HISTOGRAMS = frozenset({TTFT, ITL, TPOT, E2E})
# A histogram's buckets, sum and count are counters too; they are kept under these names.
_HISTOGRAM_SAMPLES = frozenset(
    f"{family}{suffix}" for family in HISTOGRAMS for suffix in ("_bucket", "_sum", "_count")
)
_COUNTER_SAMPLES = COUNTERS | _HISTOGRAM_SAMPLES
_KEPT_FAMILIES = frozenset(
    {name.removesuffix("_total") for name in COUNTERS} | GAUGES | HISTOGRAMS
)
_CREATED_SAMPLES = frozenset(f"{family}_created" for family in _KEPT_FAMILIES)
# Every sample name and `# TYPE` name the parser is given; other lines are dropped first.
_KEPT_NAMES = _COUNTER_SAMPLES | GAUGES | _KEPT_FAMILIES | _CREATED_SAMPLES

NOT_REPORTED = "not reported"
# No value that can be shown yet, though the server reports the metric (no request
# finished in the window, no prefix-cache query, ...).
NO_DATA = "—"

# One label set of one sample: (sample name, sorted (label, value) pairs).
SeriesKey = tuple[str, tuple[tuple[str, str], ...]]

Basis = Literal["window", "since_start"]


class MetricsError(WorkbenchError):
    """/metrics cannot be read or is not a vLLM server's."""


@dataclass(frozen=True)
class Snapshot:
    """One scrape: the vLLM series the figures need, each label set apart.

    `counters` holds counters and histogram buckets/sums/counts, `gauges` the gauges.
    `counters_created_at` is the earliest `_created` time of the counters kept, i.e. when
    they last started from zero; it moves when the server restarts.
    """

    taken_at: float
    counters: Mapping[SeriesKey, float]
    gauges: Mapping[SeriesKey, float]
    counters_created_at: float | None

    def reports(self, name: str) -> bool:
        """Does the server expose this sample name (e.g. 'vllm:generation_tokens_total')?"""
        return any(key[0] == name for key in (*self.counters, *self.gauges))

    def total(self, name: str) -> float | None:
        """The sample summed over every label set; None if the server does not expose it."""
        source = self.counters if name in _COUNTER_SAMPLES else self.gauges
        return _sum_named(source, name)

    def to_dict(self) -> dict[str, Any]:
        def flat(series: Mapping[SeriesKey, float]) -> list[dict[str, Any]]:
            return [{"name": n, "labels": dict(lbl), "value": v} for (n, lbl), v in series.items()]

        return {
            "taken_at": self.taken_at,
            "counters_created_at": self.counters_created_at,
            "counters": flat(self.counters),
            "gauges": flat(self.gauges),
        }


@dataclass(frozen=True)
class LatencySummary:
    """A latency histogram over a window: observations, mean and bucket-interpolated
    percentiles in seconds (None when no observation fell in the window)."""

    count: float
    mean_s: float | None
    p50_s: float | None
    p90_s: float | None
    p99_s: float | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ThroughputFigures:
    """Everything derived from the snapshots of one window.

    Rates are per second over [window_start, window_end]; counts (`*_tokens`,
    `preemptions`, `finished*`, `spec_*` counts) are increases over the window; gauges
    (`running`, `waiting`, `kv_cache_pct`) are the last scrape's. With a single scrape the
    basis is "since_start": counters are taken from zero at `counters_created_at`.
    A field whose metric the server does not expose is None and named in `not_reported`.
    """

    basis: Basis
    window_start: float | None  # unix seconds; None if the start time is unknown
    window_end: float
    window_s: float | None
    scrapes: int
    prefill_tps: float | None  # prompt tokens/s (vllm:prompt_tokens_total)
    decode_tps: float | None  # generated tokens/s (vllm:generation_tokens_total)
    prompt_tokens: float | None
    generation_tokens: float | None
    running: float | None
    waiting: float | None
    preemptions: float | None
    finished: float | None
    finished_by_reason: dict[str, float] | None
    kv_cache_pct: float | None  # 0-100, mean over engines
    prefix_cache_hit_rate: float | None  # 0-1, hits / queries
    ttft: LatencySummary | None
    itl: LatencySummary | None
    tpot: LatencySummary | None
    e2e: LatencySummary | None
    spec_drafts: float | None
    spec_draft_tokens: float | None
    spec_accepted_tokens: float | None
    spec_acceptance_rate: float | None  # 0-1, accepted / draft tokens
    spec_mean_acceptance_length: float | None  # 1 + accepted / drafts
    spec_acceptance_by_position: tuple[float, ...] | None  # accepted at position i / drafts
    counter_reset: bool  # the server restarted within the window (counters reset)
    reset_metrics: tuple[str, ...]  # the counters seen going down
    not_reported: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["spec_acceptance_by_position"] = (
            None
            if self.spec_acceptance_by_position is None
            else list(self.spec_acceptance_by_position)
        )
        out["reset_metrics"] = list(self.reset_metrics)
        out["not_reported"] = list(self.not_reported)
        return out

    def series_row(self) -> dict[str, float | None]:
        """The figures a live plot needs (the columns of SERIES_COLUMNS)."""
        return {
            "time": self.window_end,
            "decode_tps": self.decode_tps,
            "prefill_tps": self.prefill_tps,
            "running": self.running,
            "waiting": self.waiting,
            "kv_pct": self.kv_cache_pct,
            "spec_acceptance": self.spec_acceptance_rate,
        }

    def flat_row(self) -> dict[str, Any]:
        """One flat row for CSV: the series columns first, then every other figure."""
        row: dict[str, Any] = dict(self.series_row())
        row.update(
            basis=self.basis,
            window_start=self.window_start,
            window_s=self.window_s,
            scrapes=self.scrapes,
            prompt_tokens=self.prompt_tokens,
            generation_tokens=self.generation_tokens,
            preemptions=self.preemptions,
            finished=self.finished,
            prefix_cache_hit_rate=self.prefix_cache_hit_rate,
        )
        for name in ("ttft", "itl", "tpot", "e2e"):
            summary: LatencySummary | None = getattr(self, name)
            for part in ("count", "mean_s", "p50_s", "p90_s", "p99_s"):
                row[f"{name}_{part}"] = None if summary is None else getattr(summary, part)
        row.update(
            spec_drafts=self.spec_drafts,
            spec_draft_tokens=self.spec_draft_tokens,
            spec_accepted_tokens=self.spec_accepted_tokens,
            spec_mean_acceptance_length=self.spec_mean_acceptance_length,
            counter_reset=self.counter_reset,
        )
        return row

    def display(self, name: str) -> str:
        """A field as a person reads it: with its unit, "not reported" when the server
        does not expose it, "—" when there is nothing to show yet."""
        if name in self.not_reported:
            return NOT_REPORTED
        value = getattr(self, name)
        if value is None:
            return NO_DATA
        if isinstance(value, LatencySummary):
            return _format_latency(value)
        return _DISPLAY.get(name, _format_number)(value)


SERIES_COLUMNS = ("time", "decode_tps", "prefill_tps", "running", "waiting", "kv_pct", "spec_acceptance")

# Which vLLM sample each figure comes from, to name what is not reported.
_SOURCES: dict[str, str] = {
    "prefill_tps": PROMPT_TOKENS,
    "prompt_tokens": PROMPT_TOKENS,
    "decode_tps": GENERATION_TOKENS,
    "generation_tokens": GENERATION_TOKENS,
    "running": RUNNING,
    "waiting": WAITING,
    "preemptions": PREEMPTIONS,
    "finished": REQUEST_SUCCESS,
    "finished_by_reason": REQUEST_SUCCESS,
    "kv_cache_pct": KV_CACHE_USAGE,
    "prefix_cache_hit_rate": PREFIX_CACHE_QUERIES,
    "ttft": TTFT + "_count",
    "itl": ITL + "_count",
    "tpot": TPOT + "_count",
    "e2e": E2E + "_count",
    "spec_drafts": SPEC_DRAFTS,
    "spec_draft_tokens": SPEC_DRAFT_TOKENS,
    "spec_accepted_tokens": SPEC_ACCEPTED_TOKENS,
    "spec_acceptance_rate": SPEC_DRAFT_TOKENS,
    "spec_mean_acceptance_length": SPEC_DRAFTS,
    "spec_acceptance_by_position": SPEC_ACCEPTED_PER_POSITION,
}


def _format_number(value: float) -> str:
    return f"{value:.0f}" if float(value).is_integer() else f"{value:.2f}"


def _format_seconds(value: float | None) -> str:
    if value is None:
        return NO_DATA
    return f"{value * 1000:.1f} ms" if value < 1 else f"{value:.2f} s"


def _format_latency(summary: LatencySummary) -> str:
    if not summary.count:
        return "no requests"
    return (
        f"mean {_format_seconds(summary.mean_s)}  p50 {_format_seconds(summary.p50_s)}  "
        f"p90 {_format_seconds(summary.p90_s)}  p99 {_format_seconds(summary.p99_s)}"
    )


_DISPLAY = {
    "prefill_tps": lambda v: f"{v:.1f} tok/s",
    "decode_tps": lambda v: f"{v:.1f} tok/s",
    "kv_cache_pct": lambda v: f"{v:.2f} %",
    "prefix_cache_hit_rate": lambda v: f"{v * 100:.1f} %",
    "spec_acceptance_rate": lambda v: f"{v * 100:.1f} %",
    "spec_mean_acceptance_length": lambda v: f"{v:.2f} tokens",
    "spec_acceptance_by_position": lambda v: " ".join(f"{x * 100:.1f}%" for x in v),
    "finished_by_reason": lambda v: ", ".join(f"{k} {_format_number(n)}" for k, n in v.items() if n)
    or "none",
    "window_s": lambda v: f"{v:.1f} s",
}


# --- fetching and parsing ---------------------------------------------------------------


def metrics_url(base_url: str) -> str:
    """http://host:port[/v1][/metrics] -> http://host:port/metrics."""
    parts = urlsplit(base_url.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise MetricsError(
            f"{base_url!r} is not a server address",
            hint="Give the server's URL with its scheme, e.g. --url http://127.0.0.1:8000",
        )
    path = parts.path.rstrip("/")
    for suffix in ("/metrics", "/v1"):
        path = path.removesuffix(suffix)
    return urlunsplit((parts.scheme, parts.netloc, f"{path}/metrics", "", ""))


def fetch_metrics_text(url: str, client: httpx.Client | None = None, timeout: float = 5.0) -> str:
    """GET the /metrics text at `url` (already a /metrics URL)."""
    try:
        response = (client or httpx).get(url, timeout=timeout)
    except httpx.HTTPError as exc:
        raise MetricsError(
            f"cannot read {url}: {exc.__class__.__name__}: {exc}",
            hint="Is the vLLM server running and is this its address? "
            "Start one with `python -m workbench serve` or pass the right --url.",
        ) from exc
    if response.status_code != 200:
        raise MetricsError(
            f"{url} answered HTTP {response.status_code}",
            hint="Point the URL at a vLLM OpenAI-compatible server (`vllm serve`), "
            "which serves Prometheus metrics at /metrics.",
        )
    return response.text


def parse_metrics(text: str, taken_at: float | None = None) -> Snapshot:
    """Parse Prometheus text with prometheus_client's parser into a Snapshot.

    `taken_at` (unix seconds) defaults to now; pass it when replaying recorded text.
    """
    taken_at = time.time() if taken_at is None else taken_at
    counters: dict[SeriesKey, float] = {}
    gauges: dict[SeriesKey, float] = {}
    created: list[float] = []
    if "vllm:" not in text:
        raise MetricsError(
            "the /metrics answer has no vllm: metrics",
            hint="Point the URL at a vLLM OpenAI-compatible server (`vllm serve`), not another program.",
        )
    try:
        for family in text_string_to_metric_families(_kept_lines(text)):
            for sample in family.samples:
                if sample.name in _CREATED_SAMPLES:
                    # vLLM declares each counter's `_created` sample as a gauge family of its own.
                    created.append(sample.value)
                    continue
                key = (sample.name, tuple(sorted(sample.labels.items())))
                if sample.name in _COUNTER_SAMPLES:
                    counters[key] = sample.value
                elif sample.name in GAUGES:
                    gauges[key] = sample.value
    except ValueError as exc:
        raise MetricsError(
            f"the /metrics answer is not Prometheus text: {exc}",
            hint="Point the URL at a vLLM server; another program is answering there.",
        ) from exc
    if not counters and not gauges:
        raise MetricsError(
            "the /metrics answer has none of the vLLM metrics the workbench reads "
            f"(such as {GENERATION_TOKENS})",
            hint="Point the URL at a vLLM OpenAI-compatible server (`vllm serve`).",
        )
    return Snapshot(taken_at, counters, gauges, min(created) if created else None)


def _kept_lines(text: str) -> str:
    """Only the `# TYPE` and sample lines of the metrics the figures use.

    A vLLM answer is ~650 lines, mostly histograms nothing here reads; dropping them
    before the (pure-Python) parser runs cuts the cost of a scrape several times.
    """
    kept = []
    for line in text.splitlines():
        if line.startswith("#"):
            parts = line.split(" ", 3)
            if len(parts) > 2 and parts[1] == "TYPE" and parts[2] in _KEPT_NAMES:
                kept.append(line)
        elif line.split("{", 1)[0].split(" ", 1)[0] in _KEPT_NAMES:
            kept.append(line)
    kept.append("")
    return "\n".join(kept)


# --- deriving figures -------------------------------------------------------------------


def select_window(
    snapshots: Sequence[Snapshot], window_s: float, until: float | None = None
) -> list[Snapshot]:
    """The snapshots covering at least `window_s` seconds up to the last one taken at or
    before `until` (default: the newest): from the newest snapshot at least `window_s`
    older than the end (or the oldest kept, if none is that old) to the end."""
    if until is not None:
        snapshots = [s for s in snapshots if s.taken_at <= until]
    if not snapshots:
        return []
    end = snapshots[-1].taken_at
    # Walk back from the newest: only the window's few snapshots are looked at.
    window: list[Snapshot] = []
    for snapshot in reversed(snapshots):
        window.append(snapshot)
        if snapshot.taken_at <= end - window_s:
            break
    window.reverse()
    return window


def derive_figures(snapshots: Sequence[Snapshot]) -> ThroughputFigures:
    """Figures over the window from the first to the last snapshot (in time order).

    With one snapshot, counters count from zero at their `_created` time ("since_start").
    """
    if not snapshots:
        raise MetricsError(
            "no scrape of /metrics yet", hint="Call scrape_once() (or start the poller) first."
        )
    last = snapshots[-1]
    increases, reset_metrics, counter_reset = _window_increases(snapshots)
    if len(snapshots) == 1:
        basis: Basis = "since_start"
        start = last.counters_created_at
    else:
        basis = "window"
        start = snapshots[0].taken_at
    elapsed = None if start is None or last.taken_at <= start else last.taken_at - start

    grouped = _group(increases)
    gauges = _group(last.gauges)

    def total(name: str) -> float | None:
        return _sum(grouped, name)

    def rate(name: str) -> float | None:
        value = total(name)
        return None if value is None or elapsed is None else value / elapsed

    finished_by_reason = _by_label(grouped, REQUEST_SUCCESS, "finished_reason")
    queries, hits = total(PREFIX_CACHE_QUERIES), total(PREFIX_CACHE_HITS)
    kv = [value for _, value in gauges.get(KV_CACHE_USAGE, [])]

    drafts, draft_tokens = total(SPEC_DRAFTS), total(SPEC_DRAFT_TOKENS)
    accepted = total(SPEC_ACCEPTED_TOKENS)
    per_position = _by_label(grouped, SPEC_ACCEPTED_PER_POSITION, "position")

    figures = dict(
        basis=basis,
        window_start=start,
        window_end=last.taken_at,
        window_s=elapsed,
        scrapes=len(snapshots),
        prefill_tps=rate(PROMPT_TOKENS),
        decode_tps=rate(GENERATION_TOKENS),
        prompt_tokens=total(PROMPT_TOKENS),
        generation_tokens=total(GENERATION_TOKENS),
        running=_sum(gauges, RUNNING),
        waiting=_sum(gauges, WAITING),
        preemptions=total(PREEMPTIONS),
        finished=None if finished_by_reason is None else sum(finished_by_reason.values()),
        finished_by_reason=finished_by_reason,
        # A fraction per engine: averaged, since summing fractions over engines means nothing.
        kv_cache_pct=sum(kv) / len(kv) * 100 if kv else None,
        prefix_cache_hit_rate=_ratio(hits, queries),
        ttft=_latency(grouped, TTFT),
        itl=_latency(grouped, ITL),
        tpot=_latency(grouped, TPOT),
        e2e=_latency(grouped, E2E),
        spec_drafts=drafts,
        spec_draft_tokens=draft_tokens,
        spec_accepted_tokens=accepted,
        spec_acceptance_rate=_ratio(accepted, draft_tokens),
        spec_mean_acceptance_length=None
        if accepted is None or not drafts
        else 1 + accepted / drafts,
        spec_acceptance_by_position=None
        if per_position is None or not drafts
        else tuple(
            per_position[p] / drafts for p in sorted(per_position, key=_position_order)
        ),
        counter_reset=counter_reset,
        reset_metrics=reset_metrics,
    )
    sample_names = {*grouped, *gauges}
    figures["not_reported"] = tuple(
        name for name, source in _SOURCES.items() if source not in sample_names
    )
    return ThroughputFigures(**figures)


def histogram_quantile(q: float, buckets: Sequence[tuple[float, float]]) -> float | None:
    """The q-quantile (0..1) of cumulative buckets [(upper bound, count), ...], as
    Prometheus' histogram_quantile(): linear interpolation inside the bucket holding the
    rank, the first bucket starting at 0, and a rank in the +Inf bucket answered with the
    highest finite bound. None when there are no observations."""
    if not 0 <= q <= 1:
        raise ValueError(f"quantile {q} is not between 0 and 1")
    ordered = sorted(buckets)
    if len(ordered) < 2 or not math.isinf(ordered[-1][0]):
        return None
    # Counts can dip by float error or a scrape between bucket updates: make them monotonic.
    cumulative: list[tuple[float, float]] = []
    running_max = 0.0
    for bound, count in ordered:
        running_max = max(running_max, count)
        cumulative.append((bound, running_max))
    total = cumulative[-1][1]
    if total <= 0:
        return None
    rank = q * total
    # The first bucket whose count reaches the rank; the +Inf bucket if no finite one does.
    index = next(
        (i for i, (_, count) in enumerate(cumulative[:-1]) if count >= rank), len(cumulative) - 1
    )
    if index == len(cumulative) - 1:
        return cumulative[-2][0]
    upper, count = cumulative[index]
    if index == 0:
        if upper <= 0:
            return upper
        lower, below = 0.0, 0.0
    else:
        lower, below = cumulative[index - 1]
    in_bucket = count - below
    if in_bucket <= 0:
        return upper
    return lower + (upper - lower) * (rank - below) / in_bucket


def _window_increases(snapshots: Sequence[Snapshot]) -> tuple[dict[SeriesKey, float], tuple[str, ...], bool]:
    """Each counter series' increase over the snapshots, reset-aware like rate(), and the
    counters seen going down.

    A vLLM counter only goes down when the server restarted, and then every counter
    restarted from zero: so a pair of scrapes where any counter went down (or whose
    `_created` time moved) counts every counter's new value as its increase. Deciding per
    pair rather than per series keeps a histogram's buckets consistent with each other.
    """
    if len(snapshots) == 1:
        return dict(snapshots[0].counters), (), False
    increases: dict[SeriesKey, float] = {}
    went_down: set[str] = set()
    any_restart = False
    for before, after in pairwise(snapshots):
        lower = {
            _metric_of(key[0])
            for key, value in after.counters.items()
            if value < before.counters.get(key, 0.0)
        }
        went_down |= lower
        restarted = bool(lower) or (
            before.counters_created_at is not None
            and after.counters_created_at is not None
            and after.counters_created_at > before.counters_created_at + 1e-3
        )
        any_restart |= restarted
        for key, value in after.counters.items():
            # A series new since the last scrape started at 0, as after a restart.
            delta = value if restarted else value - before.counters.get(key, 0.0)
            increases[key] = increases.get(key, 0.0) + delta
    return increases, tuple(sorted(went_down)), any_restart


def _metric_of(sample_name: str) -> str:
    """A histogram's family name for its bucket/sum/count samples, else the sample name."""
    if sample_name in _HISTOGRAM_SAMPLES:
        return sample_name.rsplit("_", 1)[0]
    return sample_name


# Series grouped by sample name: {name: [(labels, value), ...]}.
_Grouped = dict[str, list[tuple[tuple[tuple[str, str], ...], float]]]


def _group(series: Mapping[SeriesKey, float]) -> _Grouped:
    grouped: _Grouped = {}
    for (name, labels), value in series.items():
        grouped.setdefault(name, []).append((labels, value))
    return grouped


def _sum_named(series: Mapping[SeriesKey, float], name: str) -> float | None:
    values = [value for (sample, _), value in series.items() if sample == name]
    return sum(values) if values else None


def _sum(grouped: _Grouped, name: str) -> float | None:
    found = grouped.get(name)
    return None if found is None else sum(value for _, value in found)


def _by_label(grouped: _Grouped, name: str, label: str) -> dict[str, float] | None:
    if name not in grouped:
        return None
    out: dict[str, float] = {}
    for labels, value in grouped[name]:
        key = dict(labels).get(label, "")
        out[key] = out.get(key, 0.0) + value
    return out


def _latency(grouped: _Grouped, family: str) -> LatencySummary | None:
    count = _sum(grouped, family + "_count")
    if count is None:
        return None
    by_bound = _by_label(grouped, family + "_bucket", "le") or {}
    buckets = sorted((float(bound), n) for bound, n in by_bound.items())
    return LatencySummary(
        count=count,
        mean_s=(_sum(grouped, family + "_sum") or 0.0) / count if count else None,
        p50_s=histogram_quantile(0.5, buckets),
        p90_s=histogram_quantile(0.9, buckets),
        p99_s=histogram_quantile(0.99, buckets),
    )


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or not denominator:
        return None
    return numerator / denominator


def _position_order(position: str) -> tuple[int, str]:
    return (int(position), "") if position.isdigit() else (1 << 30, position)


# --- the poller -------------------------------------------------------------------------


class MetricsPoller:
    """Scrapes one server's /metrics and keeps a bounded history of snapshots and figures.

    Pull (a UI timer):  poller.scrape_once(); poller.latest; poller.series_frame()
    Push (a thread):    poller.start() ... poller.stop()   (or `with MetricsPoller(...)`)

    `interval` is the thread's scrape period, `window` the default span of the figures,
    `history` how many scrapes (snapshots and one figures row each) are kept.
    """

    def __init__(
        self,
        base_url: str,
        interval: float = 1.0,
        window: float = 10.0,
        history: int = 600,
        timeout: float = 5.0,
    ) -> None:
        for name, value in (("interval", interval), ("window", window), ("timeout", timeout)):
            if not value > 0:
                raise MetricsError(f"{name} must be a positive number of seconds, not {value!r}")
        if history < 2:
            raise MetricsError(f"history must keep at least 2 scrapes, not {history!r}")
        self.base_url = base_url
        self.url = metrics_url(base_url)
        self.interval = interval
        self.window = window
        self.timeout = timeout
        # Enough snapshots to cover the window, whatever `history` says.
        self._snapshots: deque[Snapshot] = deque(
            maxlen=max(history, math.ceil(window / interval) + 2)
        )
        self._figures: deque[ThroughputFigures] = deque(maxlen=history)
        self._lock = threading.Lock()
        self._client = httpx.Client(timeout=timeout)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_error: MetricsError | None = None

    # pull API
    def scrape_once(self) -> ThroughputFigures:
        """Scrape now, record the snapshot, and return the figures over `window`."""
        text = fetch_metrics_text(self.url, self._client, self.timeout)
        return self.record(parse_metrics(text, time.time()))

    def record(self, snapshot: Snapshot) -> ThroughputFigures:
        """Add a snapshot (from scrape_once, or replayed text) and derive its figures row."""
        with self._lock:
            if self._snapshots and snapshot.taken_at <= self._snapshots[-1].taken_at:
                raise MetricsError(
                    "snapshots must be recorded in time order",
                    hint=f"this one was taken at {snapshot.taken_at}, "
                    f"the last at {self._snapshots[-1].taken_at}",
                )
            self._snapshots.append(snapshot)
            figures = derive_figures(select_window(self._snapshots, self.window))
            self._figures.append(figures)
            return figures

    def derive(self, window_s: float | None = None, until: float | None = None) -> ThroughputFigures:
        """Figures over the last `window_s` seconds (default: `window`) of what was scraped,
        ending at the last scrape at or before `until` (default: the newest)."""
        with self._lock:
            snapshots = select_window(
                list(self._snapshots), self.window if window_s is None else window_s, until
            )
        return derive_figures(snapshots)

    @property
    def latest(self) -> ThroughputFigures | None:
        """The figures of the newest scrape, None before the first."""
        with self._lock:
            return self._figures[-1] if self._figures else None

    def snapshots(self) -> list[Snapshot]:
        with self._lock:
            return list(self._snapshots)

    def figures(self) -> list[ThroughputFigures]:
        """One figures row per kept scrape, oldest first."""
        with self._lock:
            return list(self._figures)

    def series_frame(self) -> list[dict[str, float | None]]:
        """Rows for a live plot, oldest first, with the keys of SERIES_COLUMNS
        (time in unix seconds; None where there is no value)."""
        return [figures.series_row() for figures in self.figures()]

    # export
    def export_csv(self, path: str | Path) -> Path:
        """Write one row per kept scrape (flat_row columns; empty cell = None)."""
        rows = [figures.flat_row() for figures in self.figures()]
        path = Path(path)
        with path.open("w", newline="") as handle:
            columns = list(rows[0]) if rows else list(SERIES_COLUMNS)
            writer = csv.DictWriter(handle, fieldnames=columns)
            writer.writeheader()
            writer.writerows(rows)
        return path

    def export_json(self, path: str | Path) -> Path:
        """Write the poller's settings and every kept figures row (to_dict) as JSON."""
        path = Path(path)
        document = {
            "url": self.url,
            "interval_s": self.interval,
            "window_s": self.window,
            "figures": [figures.to_dict() for figures in self.figures()],
        }
        path.write_text(json.dumps(document, indent=2, allow_nan=False) + "\n")
        return path

    # push API
    def start(self) -> None:
        """Scrape every `interval` seconds in a daemon thread until stop(). Errors do not
        end the thread (the server may come back); the newest is in `last_error`."""
        if self._thread and self._thread.is_alive():
            return
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._run, name=f"metrics-poller {self.url}", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(self.timeout + self.interval + 1)
            self._thread = None

    def close(self) -> None:
        self.stop()
        self._client.close()

    def __enter__(self) -> MetricsPoller:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _run(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            try:
                self.scrape_once()
                self.last_error = None
            except MetricsError as exc:
                self.last_error = exc
            # Keep to the schedule; after a slow scrape, skip the missed ticks.
            next_at = max(next_at + self.interval, time.monotonic())
            self._stop.wait(next_at - time.monotonic())

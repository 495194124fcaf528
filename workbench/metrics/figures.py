"""Figures over a window of Snapshots: rates, gauges, latency percentiles, spec decoding.

Rates follow Prometheus' `rate()`: each series' increase is added up over consecutive
scrapes, and a value lower than the one before (or a counter whose `_created` time moved:
the server restarted) is a counter reset, so the new value counts as the increase since
the reset and the figures say a reset happened. Increases are then summed over every label
set (engines, models), as vLLM's own Grafana dashboard does. Unlike `rate()` nothing is
extrapolated: the rate is the increase over the exact time between the window's first and
last scrape.

A metric the server does not expose is None and listed in `ThroughputFigures.not_reported`
("not reported" when displayed), never 0.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from itertools import pairwise
from typing import Any, Literal

from workbench.errors import MetricsError
from workbench.metrics.display import NO_DATA, NOT_REPORTED, format_figure
from workbench.metrics.parse import (
    COUNTER_SAMPLES,
    E2E,
    GENERATION_TOKENS,
    HISTOGRAM_SAMPLES,
    ITL,
    KV_CACHE_USAGE,
    PREEMPTIONS,
    PREFIX_CACHE_HITS,
    PREFIX_CACHE_QUERIES,
    PROMPT_TOKENS,
    REQUEST_SUCCESS,
    RUNNING,
    SPEC_ACCEPTED_PER_POSITION,
    SPEC_ACCEPTED_TOKENS,
    SPEC_DRAFT_TOKENS,
    SPEC_DRAFTS,
    TPOT,
    TTFT,
    WAITING,
    SeriesKey,
    Snapshot,
)

__all__ = ["SERIES_COLUMNS", "Basis", "LatencySummary", "ThroughputFigures", "acceptance_rate", "derive_figures",
           "histogram_quantile", "mean_acceptance_length", "select_window"]

Basis = Literal["window", "since_start"]


def acceptance_rate(accepted: float | None, draft_tokens: float | None) -> float | None:
    """Speculative decoding: accepted / draft tokens (0-1); None without drafts."""
    if accepted is None or not draft_tokens:
        return None
    return accepted / draft_tokens


def mean_acceptance_length(accepted: float | None, drafts: float | None) -> float | None:
    """Tokens per forward pass with speculation: 1 + accepted / drafts (vLLM's figure)."""
    if accepted is None or not drafts:
        return None
    return 1 + accepted / drafts


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
    # Generated tokens/s of each engine (vLLM's `engine` label: one per data-parallel rank); decode_tps is their sum.
    decode_tps_by_engine: dict[str, float] | None = None

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
        return NO_DATA if value is None else format_figure(name, value)


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
        spec_acceptance_rate=acceptance_rate(accepted, draft_tokens),
        spec_mean_acceptance_length=mean_acceptance_length(accepted, drafts),
        spec_acceptance_by_position=None
        if per_position is None or not drafts
        else tuple(
            per_position[p] / drafts for p in sorted(per_position, key=_position_order)
        ),
        counter_reset=counter_reset,
        reset_metrics=reset_metrics,
        decode_tps_by_engine=_per_engine_rate(grouped, GENERATION_TOKENS, elapsed),
    )
    sample_names = {*grouped, *gauges}
    figures["not_reported"] = tuple(
        name for name, source in _SOURCES.items() if source not in sample_names
    )
    return ThroughputFigures(**figures)  # type: ignore[arg-type]  # keys are the fields, built above


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
    if sample_name in HISTOGRAM_SAMPLES:
        return sample_name.rsplit("_", 1)[0]
    return sample_name


# Series grouped by sample name: {name: [(labels, value), ...]}.
_Grouped = dict[str, list[tuple[tuple[tuple[str, str], ...], float]]]


def _group(series: Mapping[SeriesKey, float]) -> _Grouped:
    grouped: _Grouped = {}
    for (name, labels), value in series.items():
        grouped.setdefault(name, []).append((labels, value))
    return grouped

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


def _per_engine_rate(grouped: _Grouped, name: str, elapsed: float | None) -> dict[str, float] | None:
    by_engine = _by_label(grouped, name, "engine")
    if by_engine is None or elapsed is None:
        return None
    return {engine: by_engine[engine] / elapsed for engine in sorted(by_engine, key=_position_order)}


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or not denominator:
        return None
    return numerator / denominator


def _position_order(position: str) -> tuple[int, str]:
    return (int(position), "") if position.isdigit() else (1 << 30, position)



"""The one Prometheus parser: a vLLM server's /metrics text -> a Snapshot.

prometheus_client's parser reads only the vLLM series the workbench uses (others
are dropped before it runs); each label set is kept apart. Metric names are
those of vLLM 0.32.0 (see tests/fixtures/vllm-0.32.0-cpu/*.prom). The live
figures (workbench.metrics.figures) and the benchmark's server counters both
read Snapshots.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from workbench.errors import MetricsError

__all__ = ["COUNTER_SAMPLES", "HISTOGRAM_SAMPLES", "SeriesKey", "Snapshot", "fetch_metrics_text", "parse_metrics"]

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
HISTOGRAM_SAMPLES = frozenset(
    f"{family}{suffix}" for family in HISTOGRAMS for suffix in ("_bucket", "_sum", "_count")
)
COUNTER_SAMPLES = COUNTERS | HISTOGRAM_SAMPLES
_KEPT_FAMILIES = frozenset(
    {name.removesuffix("_total") for name in COUNTERS} | GAUGES | HISTOGRAMS
)
_CREATED_SAMPLES = frozenset(f"{family}_created" for family in _KEPT_FAMILIES)
# Every sample name and `# TYPE` name the parser is given; other lines are dropped first.
_KEPT_NAMES = COUNTER_SAMPLES | GAUGES | _KEPT_FAMILIES | _CREATED_SAMPLES
# One label set of one sample: (sample name, sorted (label, value) pairs).
SeriesKey = tuple[str, tuple[tuple[str, str], ...]]


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
        source = self.counters if name in COUNTER_SAMPLES else self.gauges
        return sum_named(source, name)

    def to_dict(self) -> dict[str, Any]:
        def flat(series: Mapping[SeriesKey, float]) -> list[dict[str, Any]]:
            return [{"name": n, "labels": dict(lbl), "value": v} for (n, lbl), v in series.items()]

        return {
            "taken_at": self.taken_at,
            "counters_created_at": self.counters_created_at,
            "counters": flat(self.counters),
            "gauges": flat(self.gauges),
        }

def fetch_metrics_text(url: str, client: httpx.Client | None = None, timeout: float = 5.0) -> str:
    """GET the /metrics text at `url` (already a /metrics URL)."""
    try:
        response = (client or httpx).get(url, timeout=timeout)
    except httpx.HTTPError as exc:
        raise MetricsError(
            f"cannot read {url}: {exc.__class__.__name__}: {exc}",
            hint="Is the vLLM server running and is this its address? Start one, or give the right URL.",
            settings=("url",),
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
                if sample.name in COUNTER_SAMPLES:
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



def sum_named(series: Mapping[SeriesKey, float], name: str) -> float | None:
    values = [value for (sample, _), value in series.items() if sample == name]
    return sum(values) if values else None



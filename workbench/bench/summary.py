"""The math that turns a run's records into its summary, with aiperf's definitions.

The definitions are written out in DEFINITIONS, which every result carries, so
the numbers mean what aiperf's mean.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from workbench.bench.goodput import Goodput, compute_goodput
from workbench.bench.records import NS_PER_MS, NS_PER_S, RequestRecord
from workbench.metrics.figures import acceptance_rate, mean_acceptance_length

__all__ = ["DEFINITIONS", "PERCENTILES", "Distribution", "ServerCounters", "Summary", "cache_hit_rate", "percentile",
           "summarize", "turn_rows"]

PERCENTILES = (50, 90, 99)


DEFINITIONS: dict[str, str] = {
    "token chunk": "an SSE event whose delta has non-empty content, reasoning/reasoning_content "
    "or tool_calls; role-only, usage-only (choices: []) and [DONE] events are not token chunks",
    "start": "time.monotonic_ns() when the POST's bytes are handed to the socket (after the client's own "
    "request preparation, whose length is reported as the client's send delay)",
    "TTFT": "first token chunk - start (reasoning counts)",
    "TTFO": "first content or tool-call chunk - start (time to first output, after reasoning)",
    "E2E": "last token chunk - start (aiperf's request latency)",
    "tokens": "from the server's usage (prompt_tokens, completion_tokens incl. reasoning), "
    "never from counting chunks",
    "first-chunk tokens": "usage.completion_tokens on the first token chunk "
    "(stream_options.continuous_usage_stats); 1 if the server does not report it",
    "TPOT (per token)": "(E2E - TTFT) / (output tokens - first-chunk tokens); "
    "aiperf calls this inter_token_latency, vLLM's bench calls it TPOT",
    "ITL (per chunk)": "gap between consecutive token chunks, over all requests; "
    "vLLM's bench calls this ITL, aiperf calls it inter_chunk_latency",
    "decode tok/s per user": "1 / TPOT per request, then averaged "
    "(aiperf's output_token_throughput_per_user)",
    "prefill tok/s per user": "input tokens / TTFT per request, then averaged "
    "(aiperf's prefill_throughput_per_user)",
    "duration": "last token chunk of any request - first start of any request",
    "request throughput": "successful requests / duration",
    "output tok/s": "sum of output tokens / duration",
    "total tok/s": "sum of input + output tokens / duration",
    "percentiles": "linear interpolation between closest ranks (numpy's default, as aiperf)",
    "goodput": "requests that succeeded and met every SLO given (--goodput; times at most, per-user rates "
    "at least the objective) / duration, in requests/s; good fraction = good / all requests sent (aiperf's)",
    "client lag": "how late a 10 ms timer on the client's event loop fires during the run; p99 over 10 ms "
    "(or a whole core of client CPU) marks the run client-bound",
    "cached tokens": "usage.prompt_tokens_details.cached_tokens: prompt tokens the server's prefix cache "
    "served (vLLM: --enable-prompt-tokens-details)",
    "prefix-cache hit rate": "from the requests: sum of cached tokens / sum of prompt tokens over the requests "
    "that reported cached tokens; from /metrics: the delta of vllm:prefix_cache_hits / "
    "vllm:prefix_cache_queries over the run (tokens). The two should agree within 2 points",
    "turn": "a session workload's request index within its session (1 = the first); per-turn figures are "
    "means over the sessions' requests of that turn; context = prompt + output tokens",
    "server counters": "deltas of the server's /metrics counters over the measured run "
    "(warm-up excluded); spec-decode acceptance rate = accepted / draft tokens, "
    "mean acceptance length = 1 + accepted / drafts",
}

@dataclass
class Distribution:
    """Summary statistics of one per-request (or per-chunk) figure."""

    unit: str
    count: int
    mean: float | None
    std: float | None
    min: float | None
    max: float | None
    p50: float | None
    p90: float | None
    p99: float | None

    @classmethod
    def of(cls, values: Iterable[float | None], unit: str, scale: float = 1.0) -> Distribution:
        data = sorted(v / scale for v in values if v is not None)
        if not data:
            return cls(unit, 0, None, None, None, None, None, None, None)
        mean = math.fsum(data) / len(data)
        std = math.sqrt(math.fsum((v - mean) ** 2 for v in data) / len(data))
        p = {q: percentile(data, q) for q in PERCENTILES}
        return cls(unit, len(data), mean, std, data[0], data[-1], p[50], p[90], p[99])

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """numpy.percentile's default ('linear') on already sorted values."""
    if len(sorted_values) == 1:
        return float(sorted_values[0])
    rank = (len(sorted_values) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (rank - low)


@dataclass
class ServerCounters:
    """Deltas of the server's own /metrics counters over the measured run."""

    prompt_tokens: float | None = None
    generation_tokens: float | None = None
    spec_accepted_tokens: float | None = None
    spec_draft_tokens: float | None = None
    spec_drafts: float | None = None
    spec_accepted_per_position: list[float] | None = None  # accepted tokens at draft position 0, 1, ...
    prefix_cache_queries: float | None = None  # tokens looked up in the prefix cache
    prefix_cache_hits: float | None = None  # of those, tokens found

    @property
    def prefix_cache_hit_rate(self) -> float | None:
        if not self.prefix_cache_queries or self.prefix_cache_hits is None:
            return None
        return self.prefix_cache_hits / self.prefix_cache_queries

    @property
    def spec_acceptance_rate(self) -> float | None:
        return acceptance_rate(self.spec_accepted_tokens or 0, self.spec_draft_tokens)

    @property
    def spec_mean_acceptance_length(self) -> float | None:
        return mean_acceptance_length(self.spec_accepted_tokens or 0, self.spec_drafts)

    def to_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "spec_acceptance_rate": self.spec_acceptance_rate,
            "spec_mean_acceptance_length": self.spec_mean_acceptance_length,
            "prefix_cache_hit_rate": self.prefix_cache_hit_rate,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ServerCounters:
        return cls(**{k: data.get(k) for k in cls.__dataclass_fields__})


@dataclass
class Summary:
    """The run's figures. Latencies in ms, rates in tokens (or requests) per second."""

    requests: int
    succeeded: int
    errors: int
    error_messages: list[str]
    duration_s: float | None
    input_tokens: int
    output_tokens: int
    reasoning_tokens: int
    request_throughput: float | None
    output_tok_s: float | None
    total_tok_s: float | None
    ttft_ms: Distribution
    ttfo_ms: Distribution
    e2e_ms: Distribution
    tpot_ms: Distribution
    itl_ms: Distribution
    decode_tok_s_per_user: Distribution
    prefill_tok_s_per_user: Distribution
    input_tokens_per_request: Distribution
    output_tokens_per_request: Distribution
    goodput: Goodput | None = field(default=None)
    # Prefix caching: from the requests' cached_tokens, and from the server's /metrics
    # counters over the run (set by the runner); fractions, None when not reported.
    prefix_cache_hit_rate: float | None = None
    prefix_cache_hit_rate_metrics: float | None = None
    # Session workloads: one row per turn index (see turn_rows), else None.
    per_turn: list[dict[str, Any]] | None = None

    DISTRIBUTIONS = (
        "ttft_ms",
        "ttfo_ms",
        "e2e_ms",
        "tpot_ms",
        "itl_ms",
        "decode_tok_s_per_user",
        "prefill_tok_s_per_user",
        "input_tokens_per_request",
        "output_tokens_per_request",
    )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Summary:
        values = dict(data)
        for name in cls.DISTRIBUTIONS:
            values[name] = Distribution(**data[name])
        values["goodput"] = None if data.get("goodput") is None else Goodput.from_dict(data["goodput"])
        return cls(**{k: values[k] for k in cls.__dataclass_fields__ if k in values})


def cache_hit_rate(records: Iterable[RequestRecord]) -> float | None:
    """Sum of cached / sum of prompt tokens, over the requests that reported both."""
    reported = [r for r in records if r.ok and r.cached_tokens is not None and r.prompt_tokens]
    prompt = sum(r.prompt_tokens or 0 for r in reported)
    return None if not prompt else sum(r.cached_tokens or 0 for r in reported) / prompt


def turn_rows(records: Sequence[RequestRecord]) -> list[dict[str, Any]] | None:
    """Per turn index of a session workload: TTFT, E2E, decode, context and cache hits."""
    turns = sorted({r.turn for r in records if r.turn is not None})
    if not turns:
        return None
    rows = []
    for turn in turns:
        mine = [r for r in records if r.turn == turn]
        good = [r for r in mine if r.ok]
        ttft = Distribution.of((r.ttft_ns for r in good), "ms", NS_PER_MS)
        cached = [r.cached_tokens for r in good if r.cached_tokens is not None]
        contexts = [(r.prompt_tokens or 0) + (r.completion_tokens or 0) for r in good]
        rows.append({
            "turn": turn,
            "requests": len(mine),
            "errors": len(mine) - len(good),
            "ttft_ms_mean": ttft.mean,
            "ttft_ms_p50": ttft.p50,
            "ttft_ms_p99": ttft.p99,
            "e2e_ms_mean": Distribution.of((r.e2e_ns for r in good), "ms", NS_PER_MS).mean,
            "decode_tok_s_per_user_mean": Distribution.of((r.decode_tok_s for r in good), "tok/s").mean,
            "prompt_tokens_mean": Distribution.of((r.prompt_tokens for r in good), "tokens").mean,
            "cached_tokens_mean": (math.fsum(cached) / len(cached)) if cached else None,
            "cache_hit_rate": cache_hit_rate(good),
            "context_tokens_max": max(contexts) if contexts else None,
        })
    return rows


def summarize(records: Sequence[RequestRecord], slos: dict[str, float] | None = None) -> Summary:
    """Every figure of a run from its records (warm-up requests are not passed in)."""
    good = [r for r in records if r.ok]
    starts = [r.start_ns for r in records if r.ok]
    ends = [r.start_ns + r.e2e_ns for r in good if r.e2e_ns is not None]
    duration_ns = (max(ends) - min(starts)) if good and ends else None
    input_tokens = sum(r.prompt_tokens or 0 for r in good)
    output_tokens = sum(r.completion_tokens or 0 for r in good)

    def per_s(amount: float) -> float | None:
        return None if not duration_ns else amount * NS_PER_S / duration_ns

    errors = [r for r in records if not r.ok]
    duration_s = None if duration_ns is None else duration_ns / NS_PER_S
    goodput = None
    if slos:
        goodput = compute_goodput(records, slos, duration_s)
    return Summary(
        requests=len(records),
        succeeded=len(good),
        errors=len(errors),
        error_messages=sorted({r.error or "no token chunk received" for r in errors})[:10],
        duration_s=duration_s,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        reasoning_tokens=sum(r.reasoning_tokens or 0 for r in good),
        request_throughput=per_s(len(good)),
        output_tok_s=per_s(output_tokens),
        total_tok_s=per_s(input_tokens + output_tokens),
        ttft_ms=Distribution.of((r.ttft_ns for r in good), "ms", NS_PER_MS),
        ttfo_ms=Distribution.of((r.ttfo_ns for r in good), "ms", NS_PER_MS),
        e2e_ms=Distribution.of((r.e2e_ns for r in good), "ms", NS_PER_MS),
        tpot_ms=Distribution.of((r.tpot_ns for r in good), "ms", NS_PER_MS),
        itl_ms=Distribution.of((g for r in good for g in r.chunk_gaps_ns()), "ms", NS_PER_MS),
        decode_tok_s_per_user=Distribution.of((r.decode_tok_s for r in good), "tok/s"),
        prefill_tok_s_per_user=Distribution.of((r.prefill_tok_s for r in good), "tok/s"),
        input_tokens_per_request=Distribution.of((r.prompt_tokens for r in good), "tokens"),
        output_tokens_per_request=Distribution.of((r.completion_tokens for r in good), "tokens"),
        goodput=goodput,
        prefix_cache_hit_rate=cache_hit_rate(good),
        per_turn=turn_rows(records),
    )



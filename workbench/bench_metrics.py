"""Benchmark records and the math that turns them into a summary.

No I/O here: a `RequestRecord` holds raw integer nanoseconds (time.monotonic_ns)
and the server's token counts; `summarize()` computes every figure from them.
The definitions follow aiperf's, so the numbers mean what aiperf's mean; they are
written out in `DEFINITIONS`, which every result carries.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

__all__ = [
    "DEFINITIONS",
    "PERCENTILES",
    "Distribution",
    "EventKind",
    "RequestRecord",
    "ServerCounters",
    "Summary",
    "summarize",
]

PERCENTILES = (50, 90, 99)
NS_PER_S = 1_000_000_000
NS_PER_MS = 1_000_000


class EventKind(str, Enum):
    """What one SSE event was. Only CONTENT, REASONING and TOOL_CALL are token chunks."""

    ROLE = "role"  # {"role": "assistant", "content": ""}: no token
    CONTENT = "content"
    REASONING = "reasoning"
    TOOL_CALL = "tool_call"
    EMPTY = "empty"  # an empty delta, e.g. the one carrying finish_reason
    USAGE = "usage"  # choices: [] with the final usage
    DONE = "done"  # data: [DONE]
    ERROR = "error"

    @property
    def is_token_chunk(self) -> bool:
        return self in _TOKEN_KINDS

    @property
    def is_output(self) -> bool:
        """Counts for time to first *output* (not reasoning)."""
        return self in (EventKind.CONTENT, EventKind.TOOL_CALL)


_TOKEN_KINDS = frozenset({EventKind.CONTENT, EventKind.REASONING, EventKind.TOOL_CALL})
# One character per kind keeps a request's event log small in JSON and CSV.
_KIND_CODE = {
    EventKind.ROLE: "r",
    EventKind.CONTENT: "c",
    EventKind.REASONING: "R",
    EventKind.TOOL_CALL: "t",
    EventKind.EMPTY: "e",
    EventKind.USAGE: "u",
    EventKind.DONE: "D",
    EventKind.ERROR: "E",
}
_CODE_KIND = {code: kind for kind, code in _KIND_CODE.items()}
KIND_CODES = _KIND_CODE


DEFINITIONS: dict[str, str] = {
    "token chunk": "an SSE event whose delta has non-empty content, reasoning/reasoning_content "
    "or tool_calls; role-only, usage-only (choices: []) and [DONE] events are not token chunks",
    "start": "time.monotonic_ns() just before the POST is sent",
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
    "server counters": "deltas of the server's /metrics counters over the measured run "
    "(warm-up excluded); spec-decode acceptance rate = accepted / draft tokens, "
    "mean acceptance length = 1 + accepted / drafts",
}


@dataclass
class RequestRecord:
    """One request as measured: raw monotonic nanoseconds and the server's usage."""

    index: int
    start_ns: int
    end_ns: int = 0  # when the stream closed (or failed)
    event_ns: list[int] = field(default_factory=list)  # arrival of every SSE event
    event_kinds: str = ""  # one code per event, see KIND_CODES
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    reasoning_tokens: int | None = None
    first_chunk_tokens: int | None = None
    error: str | None = None
    target_input_tokens: int | None = None

    def add_event(self, at_ns: int, kind: EventKind) -> None:
        self.event_ns.append(at_ns)
        self.event_kinds += _KIND_CODE[kind]

    @property
    def ok(self) -> bool:
        return self.error is None and self._first_token_ns() is not None

    def kinds(self) -> list[EventKind]:
        return [_CODE_KIND[c] for c in self.event_kinds]

    def token_chunk_ns(self) -> list[int]:
        return [t for t, c in zip(self.event_ns, self.event_kinds) if c in "cRt"]

    def _first_token_ns(self) -> int | None:
        for t, c in zip(self.event_ns, self.event_kinds):
            if c in "cRt":
                return t
        return None

    @property
    def ttft_ns(self) -> int | None:
        first = self._first_token_ns()
        return None if first is None else first - self.start_ns

    @property
    def ttfo_ns(self) -> int | None:
        for t, c in zip(self.event_ns, self.event_kinds):
            if c in "ct":
                return t - self.start_ns
        return None

    @property
    def e2e_ns(self) -> int | None:
        for t, c in zip(reversed(self.event_ns), reversed(self.event_kinds)):
            if c in "cRt":
                return t - self.start_ns
        return None

    @property
    def decode_tokens(self) -> int | None:
        """Tokens after the first chunk: the ones the decode window covers."""
        if self.completion_tokens is None:
            return None
        first = self.first_chunk_tokens if self.first_chunk_tokens and self.first_chunk_tokens > 0 else 1
        decode = self.completion_tokens - first
        # Like aiperf: an inconsistent first-chunk count falls back to output - 1.
        return decode if decode >= 1 else self.completion_tokens - 1

    @property
    def tpot_ns(self) -> float | None:
        ttft, e2e, decode = self.ttft_ns, self.e2e_ns, self.decode_tokens
        if ttft is None or e2e is None or decode is None or decode < 1:
            return None
        return (e2e - ttft) / decode

    @property
    def decode_tok_s(self) -> float | None:
        tpot = self.tpot_ns
        return None if not tpot else NS_PER_S / tpot

    @property
    def prefill_tok_s(self) -> float | None:
        ttft = self.ttft_ns
        if not ttft or self.prompt_tokens is None:
            return None
        return self.prompt_tokens * NS_PER_S / ttft

    def chunk_gaps_ns(self) -> list[int]:
        times = self.token_chunk_ns()
        return [b - a for a, b in zip(times, times[1:])]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RequestRecord:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})

    def flat_row(self) -> dict[str, Any]:
        """One CSV row: the derived figures in ms and tok/s beside the raw counts."""

        def ms(ns: float | None) -> float | None:
            return None if ns is None else round(ns / NS_PER_MS, 4)

        return {
            "index": self.index,
            "ok": self.ok,
            "error": self.error or "",
            "input_tokens": self.prompt_tokens,
            "output_tokens": self.completion_tokens,
            "reasoning_tokens": self.reasoning_tokens,
            "first_chunk_tokens": self.first_chunk_tokens,
            "token_chunks": sum(1 for c in self.event_kinds if c in "cRt"),
            "ttft_ms": ms(self.ttft_ns),
            "ttfo_ms": ms(self.ttfo_ns),
            "e2e_ms": ms(self.e2e_ns),
            "tpot_ms": ms(self.tpot_ns),
            "decode_tok_s_per_user": _round(self.decode_tok_s),
            "prefill_tok_s_per_user": _round(self.prefill_tok_s),
            "start_ns": self.start_ns,
            "end_ns": self.end_ns,
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

    @property
    def spec_acceptance_rate(self) -> float | None:
        if not self.spec_draft_tokens:
            return None
        return (self.spec_accepted_tokens or 0) / self.spec_draft_tokens

    @property
    def spec_mean_acceptance_length(self) -> float | None:
        """Tokens per forward pass with speculation: 1 + accepted / drafts (vLLM's figure)."""
        if not self.spec_drafts:
            return None
        return 1 + (self.spec_accepted_tokens or 0) / self.spec_drafts

    def to_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "spec_acceptance_rate": self.spec_acceptance_rate,
            "spec_mean_acceptance_length": self.spec_mean_acceptance_length,
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
        return cls(**{k: values[k] for k in cls.__dataclass_fields__})


def summarize(records: Sequence[RequestRecord]) -> Summary:
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
    return Summary(
        requests=len(records),
        succeeded=len(good),
        errors=len(errors),
        error_messages=sorted({r.error or "no token chunk received" for r in errors})[:10],
        duration_s=None if duration_ns is None else duration_ns / NS_PER_S,
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
    )


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)

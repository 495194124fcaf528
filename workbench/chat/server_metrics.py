"""vLLM's per-request figures, read from a response: the one place that knows their field names.

A server started with `--enable-per-request-metrics` adds a top-level `metrics`
object to each chat/completion response (vLLM 0.32,
vllm/entrypoints/generate/base/protocol.py `PerRequestMetrics`). Streamed, it rides
on the final usage chunk only, so the request must ask for
`stream_options.include_usage`. With `--per-request-spec-decode-metrics summary`
(which needs `--speculative-config`) it also carries `metrics.speculative_decoding`.
Neither is sent for requests with n > 1.

vLLM's fields, and what they measure (build_per_request_timing_metrics):
    queue_time_ms          queued -> scheduled (waiting for a slot)
    time_to_first_token_ms scheduled -> first token: the prefill (not the client's TTFT)
    generation_time_ms     first token -> last token: the decode
    mean_itl_ms            generation_time_ms / (generated tokens - 1)
    tokens_per_second      generated tokens / (scheduled -> last token)
    speculative_decoding   num_spec_steps, num_draft_tokens, num_accepted_draft_tokens,
                           draft_acceptance_rate, mean_acceptance_length, acceptance_histogram

`request_figures_from_response` reads one response (or the final stream chunk);
`TurnServerFigures.add` sums a turn's requests.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

__all__ = [
    "RequestServerFigures",
    "SpecDecodeAcceptance",
    "TurnServerFigures",
    "request_figures_from_response",
    "response_metrics_field",
]


@dataclass(frozen=True)
class SpecDecodeAcceptance:
    """One request's (or a turn's summed) speculative-decoding acceptance."""

    spec_steps: int = 0  # verify steps
    draft_tokens: int = 0  # tokens the drafter proposed
    accepted_draft_tokens: int = 0  # of those, accepted by the target model

    @property
    def acceptance_rate(self) -> float | None:
        """Accepted / proposed draft tokens (vLLM's draft_acceptance_rate)."""
        return self.accepted_draft_tokens / self.draft_tokens if self.draft_tokens else None

    @property
    def mean_acceptance_length(self) -> float | None:
        """Tokens per verify step, the bonus token included (vLLM's mean_acceptance_length)."""
        return 1.0 + self.accepted_draft_tokens / self.spec_steps if self.spec_steps else None

    def __add__(self, other: SpecDecodeAcceptance) -> SpecDecodeAcceptance:
        return SpecDecodeAcceptance(self.spec_steps + other.spec_steps, self.draft_tokens + other.draft_tokens,
                                    self.accepted_draft_tokens + other.accepted_draft_tokens)


@dataclass(frozen=True)
class RequestServerFigures:
    """What the server measured for one request (milliseconds); None where it did not say."""

    queue_ms: float | None = None
    prefill_ms: float | None = None
    decode_ms: float | None = None
    mean_itl_ms: float | None = None
    tokens_per_s: float | None = None
    spec_decode: SpecDecodeAcceptance | None = None

    @property
    def decode_intervals(self) -> float | None:
        """Generated tokens - 1, recovered from decode_ms / mean_itl_ms."""
        if self.decode_ms is None or not self.mean_itl_ms:
            return None
        return self.decode_ms / self.mean_itl_ms


def response_metrics_field(response: Any) -> Mapping[str, Any] | None:
    """The raw `metrics` object of a response or chunk: a dict, or an openai SDK model
    (which keeps fields it does not know in `model_extra`)."""
    if isinstance(response, Mapping):
        raw = response.get("metrics")
    else:
        raw = getattr(response, "metrics", None)
        if raw is None:
            extra = getattr(response, "model_extra", None)
            raw = extra.get("metrics") if isinstance(extra, Mapping) else None
    if raw is not None and not isinstance(raw, Mapping) and hasattr(raw, "model_dump"):
        raw = raw.model_dump()
    return raw if isinstance(raw, Mapping) else None


def _number(data: Mapping[str, Any], key: str) -> float | None:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _count(data: Mapping[str, Any], key: str) -> int:
    value = data.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _spec_decode(raw: Any) -> SpecDecodeAcceptance | None:
    if not isinstance(raw, Mapping):
        return None
    return SpecDecodeAcceptance(
        spec_steps=_count(raw, "num_spec_steps"),
        draft_tokens=_count(raw, "num_draft_tokens"),
        accepted_draft_tokens=_count(raw, "num_accepted_draft_tokens"),
    )


def request_figures_from_response(response: Any) -> RequestServerFigures | None:
    """The server's figures in a response (or final stream chunk); None when it sent none."""
    raw = response_metrics_field(response)
    if raw is None:
        return None
    return RequestServerFigures(
        queue_ms=_number(raw, "queue_time_ms"),
        prefill_ms=_number(raw, "time_to_first_token_ms"),
        decode_ms=_number(raw, "generation_time_ms"),
        mean_itl_ms=_number(raw, "mean_itl_ms"),
        tokens_per_s=_number(raw, "tokens_per_second"),
        spec_decode=_spec_decode(raw.get("speculative_decoding")),
    )


def _plus(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else a + b


@dataclass(frozen=True)
class TurnServerFigures:
    """A turn's server figures, summed over the requests that reported them."""

    requests: int = 0  # requests whose response carried `metrics`
    queue_ms: float | None = None
    prefill_ms: float | None = None
    decode_ms: float | None = None
    decode_intervals: float | None = None
    spec_decode: SpecDecodeAcceptance | None = None

    def add(self, figures: RequestServerFigures) -> TurnServerFigures:
        spec = self.spec_decode
        if figures.spec_decode is not None:
            spec = figures.spec_decode if spec is None else spec + figures.spec_decode
        return TurnServerFigures(
            requests=self.requests + 1,
            queue_ms=_plus(self.queue_ms, figures.queue_ms),
            prefill_ms=_plus(self.prefill_ms, figures.prefill_ms),
            decode_ms=_plus(self.decode_ms, figures.decode_ms),
            decode_intervals=_plus(self.decode_intervals, figures.decode_intervals),
            spec_decode=spec,
        )

    @property
    def decode_tokens_per_s(self) -> float | None:
        """The server's decode rate: tokens after the first / decode time."""
        if not self.decode_ms or self.decode_intervals is None:
            return None
        return self.decode_intervals / (self.decode_ms / 1000)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> TurnServerFigures | None:
        if not isinstance(data, Mapping):
            return None
        spec = data.get("spec_decode")
        return cls(
            requests=_count(data, "requests"),
            queue_ms=_number(data, "queue_ms"),
            prefill_ms=_number(data, "prefill_ms"),
            decode_ms=_number(data, "decode_ms"),
            decode_intervals=_number(data, "decode_intervals"),
            spec_decode=(SpecDecodeAcceptance(_count(spec, "spec_steps"), _count(spec, "draft_tokens"),
                                              _count(spec, "accepted_draft_tokens"))
                         if isinstance(spec, Mapping) else None),
        )


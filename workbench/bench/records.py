"""One benchmark request as measured: raw monotonic nanoseconds and the server's usage.

No I/O here. Per-request figures (TTFT, TTFO, E2E, TPOT, per-user rates) are
properties computed from the event times; `summary.summarize` aggregates them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

__all__ = ["KIND_CODES", "NS_PER_MS", "NS_PER_S", "ChunkKind", "RequestFailure", "RequestRecord"]

NS_PER_S = 1_000_000_000
NS_PER_MS = 1_000_000


class ChunkKind(str, Enum):
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
        return self in (ChunkKind.CONTENT, ChunkKind.TOOL_CALL)


class RequestFailure(str, Enum):
    """How a request failed (its `error` says it in words)."""

    CONNECT = "connect"  # no connection could be made at all: the server is gone
    CONNECTION = "connection"  # the connection dropped or timed out mid-request
    HTTP_STATUS = "http_status"  # the server answered with a status other than 200
    ERROR_EVENT = "error_event"  # the stream carried an error event
    STREAM_SHAPE = "stream_shape"  # the stream was not the OpenAI chat-chunk shape
    NO_USAGE = "no_usage"  # the stream ended without its usage chunk


_TOKEN_KINDS = frozenset({ChunkKind.CONTENT, ChunkKind.REASONING, ChunkKind.TOOL_CALL})
# One character per kind keeps a request's event log small in JSON and CSV.
_KIND_CODE = {
    ChunkKind.ROLE: "r",
    ChunkKind.CONTENT: "c",
    ChunkKind.REASONING: "R",
    ChunkKind.TOOL_CALL: "t",
    ChunkKind.EMPTY: "e",
    ChunkKind.USAGE: "u",
    ChunkKind.DONE: "D",
    ChunkKind.ERROR: "E",
}
_CODE_KIND = {code: kind for kind, code in _KIND_CODE.items()}
KIND_CODES = _KIND_CODE

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
    queued_ns: int | None = None  # when the client began the request (start_ns: when its bytes were sent)
    # Session workloads (multiturn, agentic, trace): which session and turn (1-based) this was.
    session: int | None = None
    turn: int | None = None
    # usage.prompt_tokens_details.cached_tokens: prompt tokens the server's prefix cache
    # served (vLLM reports it with --enable-prompt-tokens-details; None when not reported).
    cached_tokens: int | None = None
    category: str | None = None  # the workload category of its prompt (fixed-prompt workloads)
    # The response's metrics.speculative_decoding (vLLM --per-request-spec-decode-metrics), as sent.
    spec_decoding: dict[str, Any] | None = None
    failure: RequestFailure | None = None  # how it failed (with `error`); None when it did not

    def fail(self, failure: RequestFailure, error: str) -> None:
        self.failure, self.error = failure, error

    def add_event(self, at_ns: int, kind: ChunkKind) -> None:
        self.event_ns.append(at_ns)
        self.event_kinds += _KIND_CODE[kind]

    @property
    def ok(self) -> bool:
        return self.error is None and self._first_token_ns() is not None

    def kinds(self) -> list[ChunkKind]:
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

    @property
    def send_delay_ns(self) -> int | None:
        """The client's own delay between beginning the request and sending it."""
        return None if self.queued_ns is None else self.start_ns - self.queued_ns

    def chunk_gaps_ns(self) -> list[int]:
        times = self.token_chunk_ns()
        return [b - a for a, b in zip(times, times[1:])]

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["failure"] = None if self.failure is None else self.failure.value
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RequestRecord:
        record = cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data and k != "failure"})
        record.failure = None if data.get("failure") is None else RequestFailure(data["failure"])
        return record

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
            "session": self.session,
            "turn": self.turn,
            "cached_tokens": self.cached_tokens,
        }


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)

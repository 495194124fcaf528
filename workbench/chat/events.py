"""The typed events a chat turn produces; views only render these.

    ReasoningDelta          text of the model's reasoning (vLLM's `reasoning` field)
    ContentDelta            text of the answer
    ToolCallStarted         a tool call opened: step, index, id, name
    ToolCallArgumentsDelta  a fragment of its JSON arguments
    ToolCallComplete        the arguments parsed (or the raw text and the parse error)
    ToolApprovalRequested   an MCP tool call waits for a person's yes (ToolApprovals.answer)
    ToolResult              what the tool returned (or its error), how long it took, how it was approved
    Notice                  something the user should know (empty answer, step limit, stopped)
    TurnFinished            finish reason, summed usage, the turn's client-side stats
    ErrorEvent              the request failed: message and hint; the conversation is kept
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any, Literal, Union

from workbench.chat.server_metrics import TurnServerFigures

__all__ = [
    "ChatEvent",
    "ChatEventKind",
    "ContentDelta",
    "ErrorEvent",
    "FinishReason",
    "Notice",
    "NoticeCode",
    "ReasoningDelta",
    "ToolCallArgumentsDelta",
    "ToolCallComplete",
    "ToolApprovalRequested",
    "ToolCallStarted",
    "ToolResult",
    "TurnFinished",
    "TurnResult",
    "TurnStats",
    "Usage",
    "collect",
]

ChatEventKind = Literal[
    "reasoning",
    "content",
    "tool_call_started",
    "tool_call_arguments",
    "tool_call_complete",
    "tool_approval",
    "tool_result",
    "notice",
    "turn_finished",
    "error",
]
NoticeCode = Literal[
    "empty_answer",  # finish_reason "length" with no answer: reasoning used the budget
    "answer_truncated",  # finish_reason "length" in the middle of the answer
    "tool_step_limit",  # the model still wanted tools after max_tool_steps rounds
    "reasoning_budget",  # the client-side reasoning budget closed the reasoning
    "stopped",  # stop() was called; the partial answer is kept
]
# The turn's finish reason: vLLM's own ("stop", "length", "tool_calls", ...), or ours.
FinishReason = str



@dataclass(frozen=True)
class _Event:
    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["kind"] = self.kind  # type: ignore[attr-defined]
        return data


@dataclass(frozen=True)
class ReasoningDelta(_Event):
    text: str
    step: int = 0
    kind: Literal["reasoning"] = "reasoning"


@dataclass(frozen=True)
class ContentDelta(_Event):
    text: str
    step: int = 0
    kind: Literal["content"] = "content"


@dataclass(frozen=True)
class ToolCallStarted(_Event):
    step: int
    index: int
    id: str
    name: str
    kind: Literal["tool_call_started"] = "tool_call_started"


@dataclass(frozen=True)
class ToolCallArgumentsDelta(_Event):
    step: int
    index: int
    text: str
    kind: Literal["tool_call_arguments"] = "tool_call_arguments"


@dataclass(frozen=True)
class ToolCallComplete(_Event):
    step: int
    index: int
    id: str
    name: str
    arguments: dict[str, Any] | None  # parsed JSON object, or None when it did not parse
    raw_arguments: str
    parse_error: str | None = None
    kind: Literal["tool_call_complete"] = "tool_call_complete"


@dataclass(frozen=True)
class ToolApprovalRequested(_Event):
    step: int
    call_id: str
    name: str
    arguments: dict[str, Any]
    source: str  # the MCP server's label
    kind: Literal["tool_approval"] = "tool_approval"


@dataclass(frozen=True)
class ToolResult(_Event):
    step: int
    call_id: str
    name: str
    arguments: dict[str, Any]
    result: Any = None
    error: str | None = None
    seconds: float = 0.0
    content: str = ""  # exactly what went back to the model as the tool message
    # How an MCP call was allowed: "approved once", "approved always", "allowed by policy",
    # "denied", "denied by policy", "cancelled"; None for built-in tools (never asked).
    approval: str | None = None
    source: str | None = None  # the MCP server's label; None for built-ins
    kind: Literal["tool_result"] = "tool_result"


@dataclass(frozen=True)
class Notice(_Event):
    code: NoticeCode
    message: str
    hint: str | None = None
    kind: Literal["notice"] = "notice"


@dataclass(frozen=True)
class Usage:
    """Token counts from the server's `usage` (summed over the turn's requests)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    reasoning_tokens: int | None = None  # usage.completion_tokens_details.reasoning_tokens

    def __add__(self, other: Usage) -> Usage:
        reasoning = (
            None
            if self.reasoning_tokens is None and other.reasoning_tokens is None
            else (self.reasoning_tokens or 0) + (other.reasoning_tokens or 0)
        )
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.total_tokens + other.total_tokens,
            reasoning,
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Usage:
        return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})


@dataclass(frozen=True)
class TurnStats:
    """What the client measured for one turn (monotonic clock, seconds).

    ttft_s: turn start -> first streamed token (reasoning, content or tool call).
    reasoning_s: first reasoning token -> first answer/tool token (or last reasoning token).
    decode_tokens_per_s: (completion tokens - 1) / (last token - first token), per request, summed.
    tool_s: time spent running tools. total_s: the whole turn, tools included.
    """

    ttft_s: float | None = None
    reasoning_s: float = 0.0
    total_s: float = 0.0
    tool_s: float = 0.0
    decode_tokens_per_s: float | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: int | None = None
    answer_tokens: int | None = None
    requests: int = 0
    tool_calls: int = 0
    # False when a request ended without a usage chunk (stopped): its completion
    # tokens are then counted from the streamed deltas, which vLLM sends one token each.
    usage_complete: bool = True
    # What the server measured (vLLM's per-request `metrics`), when it answered them.
    server: TurnServerFigures | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TurnStats:
        kept = {f.name: data[f.name] for f in fields(cls) if f.name in data}
        kept["server"] = TurnServerFigures.from_dict(data.get("server"))
        return cls(**kept)


@dataclass(frozen=True)
class TurnFinished(_Event):
    finish_reason: FinishReason | None
    usage: Usage
    stats: TurnStats
    kind: Literal["turn_finished"] = "turn_finished"


@dataclass(frozen=True)
class ErrorEvent(_Event):
    message: str
    hint: str | None = None
    status_code: int | None = None
    kind: Literal["error"] = "error"


ChatEvent = Union[
    ReasoningDelta,
    ContentDelta,
    ToolCallStarted,
    ToolCallArgumentsDelta,
    ToolCallComplete,
    ToolApprovalRequested,
    ToolResult,
    Notice,
    TurnFinished,
    ErrorEvent,
]



@dataclass
class TurnResult:
    """A finished turn, for callers that do not render events as they come."""

    events: list[ChatEvent]
    content: str
    reasoning: str
    finish_reason: FinishReason | None
    stats: TurnStats | None
    error: ErrorEvent | None

    def notices(self) -> list[Notice]:
        return [e for e in self.events if isinstance(e, Notice)]


def collect(events: Sequence[ChatEvent]) -> TurnResult:
    finished = next((e for e in reversed(events) if isinstance(e, TurnFinished)), None)
    error = next((e for e in reversed(events) if isinstance(e, ErrorEvent)), None)
    return TurnResult(
        events=list(events),
        content="".join(e.text for e in events if isinstance(e, ContentDelta)),
        reasoning="".join(e.text for e in events if isinstance(e, ReasoningDelta)),
        finish_reason=finished.finish_reason if finished else None,
        stats=finished.stats if finished else None,
        error=error,
    )

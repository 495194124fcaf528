"""One streamed request: vLLM's SSE chunks (through the openai SDK) -> typed events.

A `Step` accumulates what one request produced and when (reasoning, content,
tool calls joined per index, usage, token times); the chunk functions turn each
chunk into the events a view renders.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from workbench.chat.events import (
    ChatEvent,
    ContentDelta,
    ReasoningDelta,
    ToolCallArgumentsDelta,
    ToolCallComplete,
    ToolCallStarted,
    Usage,
)
from workbench.chat.server_metrics import RequestServerFigures, request_figures_from_response

__all__ = ["PendingCall", "Step", "chat_chunk_events", "complete_call", "completion_chunk_events", "usage_from"]


@dataclass
class PendingCall:
    index: int
    id: str = ""
    name: str = ""
    arguments: str = ""
    announced: bool = False


@dataclass
class Step:
    """What one streamed request produced, and when."""

    reasoning: list[str] = field(default_factory=list)
    content: list[str] = field(default_factory=list)
    calls: dict[int, PendingCall] = field(default_factory=dict)
    finish_reason: str | None = None
    usage: Usage = field(default_factory=Usage)
    first_token_t: float | None = None
    last_token_t: float | None = None
    first_reasoning_t: float | None = None
    reasoning_end_t: float | None = None
    stopped: bool = False
    deltas: int = 0  # streamed chunks that carried a token
    continuation: Step | None = None  # the client-side budget's second request
    server_figures: RequestServerFigures | None = None  # vLLM's per-request `metrics`, when sent

    def mark_token(self, now: float, is_reasoning: bool) -> None:
        self.deltas += 1
        if self.first_token_t is None:
            self.first_token_t = now
        self.last_token_t = now
        if is_reasoning:
            if self.first_reasoning_t is None:
                self.first_reasoning_t = now
            self.reasoning_end_t = now
        elif self.first_reasoning_t is not None and self.reasoning_end_t is not None:
            # reasoning ends at the first non-reasoning token
            if not self.content and not self.calls:
                self.reasoning_end_t = now

    @property
    def reasoning_s(self) -> float:
        if self.first_reasoning_t is None or self.reasoning_end_t is None:
            return 0.0
        return self.reasoning_end_t - self.first_reasoning_t


def usage_from(raw: Any) -> Usage:
    if raw is None:
        return Usage()
    details = getattr(raw, "completion_tokens_details", None)
    reasoning = getattr(details, "reasoning_tokens", None) if details is not None else None
    return Usage(
        prompt_tokens=raw.prompt_tokens or 0,
        completion_tokens=raw.completion_tokens or 0,
        total_tokens=raw.total_tokens or 0,
        reasoning_tokens=reasoning,
    )


def delta_reasoning(delta: Any) -> str | None:
    # vLLM >= 0.16 sends `reasoning`; older servers and some proxies `reasoning_content`.
    text = getattr(delta, "reasoning", None)
    if text is None:
        text = getattr(delta, "reasoning_content", None)
    if text is None and getattr(delta, "model_extra", None):
        text = delta.model_extra.get("reasoning") or delta.model_extra.get("reasoning_content")
    return text


def chat_chunk_events(chunk: Any, step: Step, step_number: int) -> list[ChatEvent]:
    """Events of one chat.completion.chunk; `step` records what it carried and when."""
    events: list[ChatEvent] = []
    if getattr(chunk, "usage", None) is not None:
        step.usage = usage_from(chunk.usage)
        step.server_figures = request_figures_from_response(chunk) or step.server_figures
    for choice in chunk.choices or []:
        delta = choice.delta
        now = time.monotonic()
        reasoning = delta_reasoning(delta) if delta is not None else None
        if reasoning:
            step.mark_token(now, True)
            step.reasoning.append(reasoning)
            events.append(ReasoningDelta(reasoning, step_number))
        if delta is not None and delta.content:
            step.mark_token(now, False)
            step.content.append(delta.content)
            events.append(ContentDelta(delta.content, step_number))
        for tc in (delta.tool_calls or []) if delta is not None else []:
            step.mark_token(now, False)
            index = tc.index if tc.index is not None else len(step.calls)
            call = step.calls.setdefault(index, PendingCall(index))
            if tc.id:
                call.id = tc.id
            if tc.function is not None and tc.function.name:
                call.name += tc.function.name
            if not call.announced and call.name:
                call.announced = True
                events.append(ToolCallStarted(step_number, index, call.id, call.name))
            if tc.function is not None and tc.function.arguments:
                call.arguments += tc.function.arguments
                events.append(ToolCallArgumentsDelta(step_number, index, tc.function.arguments))
        if choice.finish_reason:
            step.finish_reason = choice.finish_reason
    return events


def completion_chunk_events(chunk: Any, step: Step, step_number: int) -> list[ChatEvent]:
    """Events of one text_completion chunk (the client-side budget's continuation)."""
    events: list[ChatEvent] = []
    if getattr(chunk, "usage", None) is not None:
        step.usage = usage_from(chunk.usage)
        step.server_figures = request_figures_from_response(chunk) or step.server_figures
    for choice in chunk.choices or []:
        if choice.text:
            step.mark_token(time.monotonic(), False)
            step.content.append(choice.text)
            events.append(ContentDelta(choice.text, step_number))
        if choice.finish_reason:
            step.finish_reason = choice.finish_reason
    return events


def complete_call(call: PendingCall, step_number: int) -> ToolCallComplete:
    raw = call.arguments
    try:
        parsed = json.loads(raw) if raw.strip() else {}
    except json.JSONDecodeError as exc:
        return ToolCallComplete(step_number, call.index, call.id, call.name, None, raw,
                                f"{exc.msg} at character {exc.pos}")
    if not isinstance(parsed, dict):
        return ToolCallComplete(step_number, call.index, call.id, call.name, None, raw,
                                f"expected a JSON object, got {type(parsed).__name__}")
    return ToolCallComplete(step_number, call.index, call.id, call.name, parsed, raw)


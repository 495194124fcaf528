"""The one fold of a turn's chat events into what a view shows. Pure: no UI import.

`TurnTranscript.apply(event)` keeps, in order, the parts of an assistant turn: a
Thinking part per run of reasoning (open while it streams, then closed with its
duration), one ToolCallPart per call (matched to its result by the call's id, so
a model calling one tool twice in a turn gets two parts), Answer parts, notices
and errors; and the turn's statistics as `stats_rows`. The terminal, the Gradio
Chat tab and the notebook ChatView each render this, and only this.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Union

from workbench.chat.events import (
    ChatEvent,
    ContentDelta,
    ErrorEvent,
    Notice,
    ReasoningDelta,
    ToolCallArgumentsDelta,
    ToolCallComplete,
    ToolApprovalRequested,
    ToolCallStarted,
    ToolResult,
    TurnFinished,
    TurnStats,
)

__all__ = ["Answer", "ErrorPart", "NoticePart", "Part", "StatsRow", "Thinking", "ToolCallPart",
           "TurnTranscript", "stats_rows"]

ToolStatus = Literal["pending", "awaiting_approval", "running", "done", "error", "not_run"]


@dataclass
class Thinking:
    step: int
    text: str = ""
    started: float = 0.0
    duration_s: float | None = None  # None while the reasoning still streams

    @property
    def open(self) -> bool:
        return self.duration_s is None


@dataclass
class Answer:
    step: int
    text: str = ""


@dataclass
class ToolCallPart:
    step: int
    index: int
    id: str
    name: str
    arguments_text: str = ""  # as streamed
    arguments: Any = None  # the parsed object, or the raw text when it did not parse
    parse_error: str | None = None
    status: ToolStatus = "pending"
    result: Any = None
    error: str | None = None
    content: str = ""  # what went back to the model
    seconds: float | None = None
    source: str | None = None  # the MCP server's label; None for built-ins
    approval: str | None = None  # how an MCP call was allowed or refused (ToolResult.approval)

    def call_text(self) -> str:
        """name(arguments) as the model wrote them."""
        return f"{self.name}({self.arguments_text})"


@dataclass
class NoticePart:
    code: str
    message: str
    hint: str | None = None


@dataclass
class ErrorPart:
    message: str
    hint: str | None = None


Part = Union[Thinking, Answer, ToolCallPart, NoticePart, ErrorPart]


@dataclass
class TurnTranscript:
    """One turn as a view shows it; `apply` returns True when a part was added
    (worth an immediate redraw) and False when text only grew."""

    user_text: str = ""
    clock: Callable[[], float] = time.monotonic
    parts: list[Part] = field(default_factory=list)
    finished: TurnFinished | None = None
    _calls: dict[str, ToolCallPart] = field(default_factory=dict)
    _by_position: dict[tuple[int, int], ToolCallPart] = field(default_factory=dict)

    # -- folding

    def apply(self, event: ChatEvent) -> bool:
        if isinstance(event, ReasoningDelta):
            return self._reasoning(event)
        self._close_thinking()
        if isinstance(event, ContentDelta):
            last = self.parts[-1] if self.parts else None
            if isinstance(last, Answer):
                last.text += event.text
                return False
            self.parts.append(Answer(event.step, event.text))
            return True
        if isinstance(event, ToolCallStarted):
            part = ToolCallPart(event.step, event.index, event.id, event.name)
            self._by_position[(event.step, event.index)] = part
            if event.id:
                self._calls[event.id] = part
            self.parts.append(part)
            return True
        if isinstance(event, ToolCallArgumentsDelta):
            found = self._by_position.get((event.step, event.index))
            if found is not None:
                found.arguments_text += event.text
            return False
        if isinstance(event, ToolCallComplete):
            return self._complete(event)
        if isinstance(event, ToolResult):
            return self._result(event)
        if isinstance(event, ToolApprovalRequested):
            asked = self._calls.get(event.call_id)
            if asked is not None:
                asked.status, asked.source = "awaiting_approval", event.source
            return asked is not None
        if isinstance(event, Notice):
            self.parts.append(NoticePart(event.code, event.message, event.hint))
            return True
        if isinstance(event, ErrorEvent):
            self.parts.append(ErrorPart(event.message, event.hint))
            return True
        if isinstance(event, TurnFinished):
            self.finished = event
            return True
        return False

    def finish(self) -> None:
        """Close whatever is still open (a stopped or failed turn)."""
        self._close_thinking()
        for part in self.tool_calls():
            if part.status in ("pending", "running", "awaiting_approval"):
                part.status = "not_run"

    # -- reading

    def tool_calls(self) -> list[ToolCallPart]:
        return [p for p in self.parts if isinstance(p, ToolCallPart)]

    def reasoning_text(self) -> str:
        return "\n\n".join(p.text for p in self.parts if isinstance(p, Thinking))

    def answer_text(self) -> str:
        return "".join(p.text for p in self.parts if isinstance(p, Answer))

    def text_by_step(self, kind: type[Thinking] | type[Answer]) -> list[str]:
        """Reasoning (or answer) text per request step, index = step."""
        steps: list[str] = []
        for part in self.parts:
            if isinstance(part, kind):
                while len(steps) <= part.step:
                    steps.append("")
                steps[part.step] += part.text
        return steps

    def awaiting_approval(self) -> list[ToolCallPart]:
        """The MCP calls waiting for a person's answer (ChatSession.approvals.answer)."""
        return [p for p in self.tool_calls() if p.status == "awaiting_approval"]

    def notices(self) -> list[NoticePart]:
        return [p for p in self.parts if isinstance(p, NoticePart)]

    def error(self) -> ErrorPart | None:
        return next((p for p in reversed(self.parts) if isinstance(p, ErrorPart)), None)

    def tool_trace(self) -> list[dict[str, Any]]:
        """The calls as data: step, id, name, arguments, status, result or error, seconds."""
        trace = []
        for c in self.tool_calls():
            row: dict[str, Any] = {"step": c.step, "id": c.id, "name": c.name,
                                   "arguments": c.arguments if c.arguments is not None else c.arguments_text,
                                   "status": c.status}
            if c.parse_error:
                row["parse_error"] = c.parse_error
            if c.source:
                row["mcp_server"] = c.source
            if c.approval:
                row["approval"] = c.approval
            if c.status in ("done", "error"):
                row["error" if c.error else "result"] = c.error or c.result
                row["seconds"] = round(c.seconds or 0.0, 3)
            trace.append(row)
        return trace

    # -- internals

    def _reasoning(self, event: ReasoningDelta) -> bool:
        last = self.parts[-1] if self.parts else None
        if isinstance(last, Thinking) and last.open:
            last.text += event.text
            return False
        self.parts.append(Thinking(event.step, event.text, started=self.clock()))
        return True

    def _close_thinking(self) -> None:
        last = self.parts[-1] if self.parts else None
        if isinstance(last, Thinking) and last.open:
            last.duration_s = round(self.clock() - last.started, 2)

    def _complete(self, event: ToolCallComplete) -> bool:
        part = self._by_position.get((event.step, event.index))
        if part is None:
            part = ToolCallPart(event.step, event.index, event.id, event.name)
            self._by_position[(event.step, event.index)] = part
            self.parts.append(part)
        if event.id:
            part.id = event.id
            self._calls[event.id] = part
        part.arguments_text = event.raw_arguments
        part.arguments = event.arguments if event.arguments is not None else event.raw_arguments
        part.parse_error = event.parse_error
        part.status = "running"
        return True

    def _result(self, event: ToolResult) -> bool:
        part = self._calls.get(event.call_id)
        if part is None:
            # A call without an id: the first unanswered call of that name in the step.
            part = next((c for c in self.tool_calls() if c.step == event.step and c.name == event.name
                         and c.status in ("pending", "running", "awaiting_approval")), None)
        if part is None:
            part = ToolCallPart(event.step, -1, event.call_id, event.name, arguments=event.arguments)
            self.parts.append(part)
        part.status = "error" if event.error else "done"
        part.result, part.error, part.content, part.seconds = event.result, event.error, event.content, event.seconds
        part.source, part.approval = event.source, event.approval
        return True


@dataclass(frozen=True)
class StatsRow:
    key: str  # short name, for key=value output
    label: str
    value: str


def _seconds(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f} s"


def stats_rows(finish_reason: str | None, s: TurnStats) -> list[StatsRow]:
    """A finished turn's client-side statistics, in the order every view shows them."""
    reasoning = "–" if s.reasoning_tokens is None else str(s.reasoning_tokens)
    return [
        StatsRow("finish", "finish reason", finish_reason or "–"),
        StatsRow("ttft", "time to first token", _seconds(s.ttft_s)),
        StatsRow("reasoning", "reasoning", f"{reasoning} tokens, {_seconds(s.reasoning_s)}"),
        StatsRow("answer", "answer tokens", "–" if s.answer_tokens is None else str(s.answer_tokens)),
        StatsRow("decode", "decode", "–" if s.decode_tokens_per_s is None else f"{s.decode_tokens_per_s:.1f} tok/s"),
        StatsRow("tools", "tools", f"{s.tool_calls} calls, {_seconds(s.tool_s)}"),
        StatsRow("tokens", "prompt / completion", f"{s.prompt_tokens} / {s.completion_tokens} tokens"),
        StatsRow("requests", "requests", str(s.requests)),
        StatsRow("turn", "turn", _seconds(s.total_s)),
    ]


def format_ms(value: float | None) -> str:
    """A server duration: milliseconds below a second (a queue wait is often a few hundredths), else seconds."""
    if value is None:
        return "–"
    if value < 1:
        return f"{value:.2f} ms"
    return f"{value:.0f} ms" if value < 1000 else f"{value / 1000:.2f} s"


def server_stats_rows(s: TurnStats) -> list[StatsRow]:
    """The server's own figures for the turn (vLLM's per-request metrics), beside the client's.

    Empty when the server did not report them (started without --enable-per-request-metrics).
    """
    server = s.server
    if server is None:
        return []
    rows = [
        StatsRow("server_queue", "queue (server)", format_ms(server.queue_ms)),
        StatsRow("server_prefill", "prefill (server)", format_ms(server.prefill_ms)),
        StatsRow("server_decode", "decode (server)", format_ms(server.decode_ms) + (
            "" if server.decode_tokens_per_s is None else f", {server.decode_tokens_per_s:.1f} tok/s")),
    ]
    spec = server.spec_decode
    if spec is not None:
        rate, length = spec.acceptance_rate, spec.mean_acceptance_length
        rows.append(StatsRow(
            "server_spec_acceptance", "spec-decode acceptance (server)",
            "–" if rate is None or length is None else
            f"{rate:.0%} of {spec.draft_tokens} drafted, {length:.2f} tokens/step"))
    if server.requests < s.requests:
        rows.append(StatsRow("server_requests", "requests reported by the server", f"{server.requests} of {s.requests}"))
    return rows

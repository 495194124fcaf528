"""Turn chat events into what the Chat tab shows; pure, no Gradio import.

An assistant turn becomes, in order: a collapsible "Thinking" block per run of
reasoning (pending while it streams, then done with its duration), one block
per tool call (name, arguments, result, pending → done, time), and the answer.
The side panels get the turn's reasoning trace, tool-call trace and statistics.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from workbench.chat import (
    ChatEvent,
    ContentDelta,
    ErrorEvent,
    Notice,
    ReasoningDelta,
    ToolCallArgumentsDelta,
    ToolCallComplete,
    ToolCallStarted,
    ToolResult,
    TurnFinished,
)


def _block(title: str, content: str = "", **metadata: Any) -> dict:
    return {"role": "assistant", "content": content, "metadata": {"title": title, **metadata}}


@dataclass
class TurnView:
    """Accumulates one turn's events into chatbot messages and side-panel text."""

    user_text: str
    messages: list[dict] = field(default_factory=list)
    reasoning_trace: list[str] = field(default_factory=list)
    tool_trace: list[dict] = field(default_factory=list)
    answer: str = ""
    stats_md: str = ""
    _thinking: dict | None = None
    _thinking_started: float = 0.0
    _answer_msg: dict | None = None
    _tools: dict[tuple[int, int], dict] = field(default_factory=dict)
    _traces: dict[tuple[int, int], dict] = field(default_factory=dict)
    _key_by_id: dict[str, tuple[int, int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.messages.append({"role": "user", "content": self.user_text})

    # -- events

    def apply(self, event: ChatEvent) -> bool:
        """Fold one event in; True when the structure changed (worth an immediate redraw)."""
        if isinstance(event, ReasoningDelta):
            return self._reasoning(event.text)
        self._close_thinking()
        if isinstance(event, ContentDelta):
            return self._content(event.text)
        if isinstance(event, ToolCallStarted):
            block = _block(f"Tool call · {event.name}", "", status="pending", id=f"tool-{event.step}-{event.index}",
                           log="calling…")
            key = (event.step, event.index)
            self._tools[key] = block
            self._key_by_id[event.id] = key
            self._traces[key] = {"step": event.step, "id": event.id, "name": event.name,
                                 "arguments": "", "status": "pending"}
            self.tool_trace.append(self._traces[key])
            self.messages.append(block)
            return True
        if isinstance(event, ToolCallArgumentsDelta):
            trace = self._traces.get((event.step, event.index))
            if trace is not None and isinstance(trace["arguments"], str):
                trace["arguments"] += event.text
            return False
        if isinstance(event, ToolCallComplete):
            block = self._tools.get((event.step, event.index))
            args = event.arguments if event.arguments is not None else event.raw_arguments
            if block is not None:
                block["content"] = "**Arguments**\n```json\n" + _json(args) + "\n```"
                if event.parse_error:
                    block["content"] += f"\n⚠ arguments did not parse: {event.parse_error}"
                block["metadata"]["log"] = "running…"
            trace = self._traces.get((event.step, event.index))
            if trace is not None:
                trace["arguments"] = args
                if event.parse_error:
                    trace["parse_error"] = event.parse_error
            return True
        if isinstance(event, ToolResult):
            key = self._key_by_id.get(event.call_id)
            block = self._tools.get(key) if key else None
            outcome = f"⚠ error: {event.error}" if event.error else _json(event.result)
            if block is not None:
                block["content"] += "\n**Result**\n```\n" + outcome + "\n```"
                block["metadata"].update(status="done", duration=round(event.seconds, 3),
                                         log="error" if event.error else "done")
            trace = self._traces.get(key) if key else None
            if trace is not None:
                trace.update(status="error" if event.error else "done", seconds=round(event.seconds, 3))
                trace["error" if event.error else "result"] = event.error or event.result
            return True
        if isinstance(event, Notice):
            # Plain messages, not collapsed blocks: the user must see these.
            text = f"ℹ️ {event.message}" + (f" {event.hint}" if event.hint else "")
            self.messages.append({"role": "assistant", "content": text})
            return True
        if isinstance(event, ErrorEvent):
            text = f"⚠ **Error:** {event.message}" + (f"\n\n{event.hint}" if event.hint else "")
            self.messages.append({"role": "assistant", "content": text})
            return True
        if isinstance(event, TurnFinished):
            self.stats_md = format_stats(event)
            return True
        return False

    def finish(self) -> None:
        """Close whatever is still pending (a stopped or failed turn)."""
        self._close_thinking()
        for block in self._tools.values():
            if block["metadata"].get("status") == "pending":
                block["metadata"].update(status="done", log="not run")

    # -- panels

    def reasoning_text(self) -> str:
        return "".join(self.reasoning_trace)

    def tools_text(self) -> str:
        return _json(self.tool_trace) if self.tool_trace else ""

    # -- internals

    def _reasoning(self, text: str) -> bool:
        self.reasoning_trace.append(text)
        if self._thinking is None:
            self._thinking = _block("Thinking", "", status="pending")
            self._thinking_started = time.monotonic()
            self.messages.append(self._thinking)
            self._thinking["content"] += text
            return True
        self._thinking["content"] += text
        return False

    def _close_thinking(self) -> None:
        if self._thinking is not None:
            self._thinking["metadata"].update(
                status="done", duration=round(time.monotonic() - self._thinking_started, 2))
            self._thinking = None
            self.reasoning_trace.append("\n\n")

    def _content(self, text: str) -> bool:
        self.answer += text
        if self._answer_msg is None or self.messages[-1] is not self._answer_msg:
            self._answer_msg = {"role": "assistant", "content": text}
            self.messages.append(self._answer_msg)
            return True
        self._answer_msg["content"] += text
        return False


def _json(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, indent=2, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(value)


def format_stats(event: TurnFinished) -> str:
    s = event.stats

    def sec(v: float | None) -> str:
        return "–" if v is None else f"{v:.2f} s"

    rows = [
        ("time to first token", sec(s.ttft_s)),
        ("reasoning", f"{s.reasoning_tokens if s.reasoning_tokens is not None else '–'} tokens, {sec(s.reasoning_s)}"),
        ("answer tokens", "–" if s.answer_tokens is None else str(s.answer_tokens)),
        ("decode", "–" if s.decode_tokens_per_s is None else f"{s.decode_tokens_per_s:.1f} tok/s"),
        ("tools", f"{s.tool_calls} calls, {sec(s.tool_s)}"),
        ("prompt / completion", f"{s.prompt_tokens} / {s.completion_tokens} tokens"),
        ("requests", str(s.requests)),
        ("turn", sec(s.total_s)),
        ("finish reason", event.finish_reason or "–"),
    ]
    return "**This turn (measured by the client)**\n\n" + "\n".join(f"- {k}: **{v}**" for k, v in rows)

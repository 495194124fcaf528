"""ChatView: one turn at a time, the reasoning, the answer and the tool calls side by side.

It renders workbench.chat.transcript.TurnTranscript, the fold the terminal and
the Gradio Chat tab render too.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Union

import ipywidgets as W

from workbench.chat import ChatEvent, ChatSession, ErrorEvent, TurnFinished, TurnResult, TurnTranscript, server_stats_rows, stats_rows
from workbench.chat.events import ToolApprovalRequested, collect
from workbench.chat.transcript import Answer, Thinking
from workbench.errors import WorkbenchError
from workbench.notebook.html import error_html, esc, pre

__all__ = ["ChatView"]

# How a ChatView answers an MCP tool call that waits for approval: "ask" (a prompt under
# the cell), a fixed answer ("once", "always", "deny"), or a function of the call.
Approver = Union[str, Callable[[ToolApprovalRequested], str]]


def ask_in_cell(call: ToolApprovalRequested) -> str:
    """Ask under the running cell (Jupyter's input box); no way to ask (a notebook run
    unattended) is a denial, which the model is told."""
    question = (f"Run the MCP tool {call.name}({call.arguments}) on {call.source}? "
                f"[y]es once, [a]lways for {call.name}, [n]o: ")
    try:
        reply = input(question).strip().lower()
    except Exception:  # EOFError, or the kernel's StdinNotImplementedError
        print(f"{call.name}: denied, there is no one to ask (pass approve='always' to ChatView to allow it)")
        return "deny"
    return {"y": "once", "yes": "once", "a": "always", "always": "always"}.get(reply, "deny")


class ChatView:
    """One turn at a time: the reasoning, the answer and the tool calls in three columns."""

    def __init__(self, title: str = "", *, redraw_every_s: float = 0.1, approve: Approver = "ask") -> None:
        self.redraw_every_s = redraw_every_s
        self.approve = approve
        box = W.Layout(width="33%", border="1px solid #dee2e6", padding="4px", min_height="6em")
        self.title = W.HTML(f"<b>{esc(title)}</b>" if title else "")
        self.reasoning = W.HTML(layout=box)
        self.answer = W.HTML(layout=box)
        self.tools = W.HTML(layout=box)
        self.footer = W.HTML()
        self.widget = W.VBox([self.title, W.HBox([self.reasoning, self.answer, self.tools]), self.footer])
        self._clear()

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)

    def _clear(self) -> None:
        self.transcript = TurnTranscript()
        self._drawn_at = 0.0
        self._draw()

    def run(self, session: ChatSession, text: str | None) -> TurnResult:
        """Send `text` through `session`, drawing events as they stream; returns the turn."""
        self._clear()
        events: list[ChatEvent] = []
        for event in session.stream(text):
            events.append(event)
            self.add(event)
            if isinstance(event, ToolApprovalRequested):
                self._draw()
                session.approvals.answer(event.call_id, self._decide(event))
        self.transcript.finish()
        self._draw()
        return collect(events)

    def _decide(self, call: ToolApprovalRequested) -> str:
        if callable(self.approve):
            return self.approve(call)
        return ask_in_cell(call) if self.approve == "ask" else self.approve

    def add(self, event: ChatEvent) -> None:
        """Take one event; redraws at most every `redraw_every_s` (always on the last)."""
        self.transcript.apply(event)
        now = time.monotonic()
        if isinstance(event, (TurnFinished, ErrorEvent)) or now - self._drawn_at >= self.redraw_every_s:
            self._draw()

    @staticmethod
    def _steps_html(steps: list[str], empty: str, style: str = "") -> str:
        parts = [f'<div style="{style}">{pre(text)}</div>' if len(steps) == 1 else
                 f'<div style="{style}"><small>step {i}</small>{pre(text)}</div>'
                 for i, text in enumerate(steps) if text]
        return "".join(parts) or f"<i style='color: #adb5bd'>{empty}</i>"

    def _draw(self) -> None:
        self._drawn_at = time.monotonic()
        t = self.transcript
        self.reasoning.value = "<b>Reasoning</b>" + self._steps_html(t.text_by_step(Thinking), "(none)",
                                                                     "color: #6c757d")
        self.answer.value = "<b>Answer</b>" + self._steps_html(t.text_by_step(Answer), "(no answer yet)")
        calls = []
        for c in t.tool_calls():
            result = (f"<span style='color: #b02a37'>error: {esc(c.error)}</span>" if c.error
                      else esc(c.content) if c.content else "<i>running…</i>")
            took = f" ({c.seconds * 1000:.0f} ms)" if c.seconds is not None else ""
            if c.source:
                took += f" <small>MCP {esc(c.source)}{' · ' + esc(c.approval) if c.approval else ''}</small>"
            if c.status == "awaiting_approval":
                result = "<i>waiting for your approval…</i>"
            calls.append(f"<div><small>step {c.step}</small> <code>{esc(c.call_text())}</code>"
                         f"<br>→ <code>{result}</code>{took}</div>")
        self.tools.value = "<b>Tool calls</b>" + ("".join(calls) or "<br><i style='color: #adb5bd'>(none)</i>")
        lines = [f"<div style='background: #fff3cd; padding: 2px 6px'>⚠ <b>{esc(n.code)}</b>: {esc(n.message)}"
                 + (f"<br><i>{esc(n.hint)}</i>" if n.hint else "") + "</div>" for n in t.notices()]
        error = t.error()
        if error:
            lines.append(error_html(WorkbenchError(error.message, hint=error.hint)))
        if t.finished:
            rows = stats_rows(t.finished.finish_reason, t.finished.stats) + server_stats_rows(t.finished.stats)
            head = f"finish: <code>{esc(rows[0].value)}</code>"
            lines.append("<small>" + " · ".join([head, *(f"{esc(r.label)} {esc(r.value)}" for r in rows[1:])])
                         + "</small>")
        self.footer.value = "".join(lines)

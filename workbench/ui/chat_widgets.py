"""The chat's widgets, built once for the Chat tab and the attendee app: the conversation
with its input and buttons, and the turn's panels (statistics, answer, reasoning and
tool-call traces). The element ids are the pages' contract with their browser tests."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gradio as gr

__all__ = ["ChatControls", "TurnPanels", "chat_controls", "turn_panels"]


@dataclass
class ChatControls:
    chatbot: gr.Chatbot
    message: gr.Textbox
    send: gr.Button
    stop: gr.Button
    regenerate: gr.Button | None  # the Chat tab's; the attendee app has none
    clear: gr.Button
    export: gr.DownloadButton
    between: Any = None  # what `between_input_and_buttons` built


@dataclass
class TurnPanels:
    stats: gr.Markdown
    answer: gr.Markdown | None  # None where the conversation beside it already shows the answer
    reasoning: gr.Textbox
    tools: gr.Code


def chat_controls(height: int, *, regenerate: bool,
                  between_input_and_buttons: Callable[[], Any] | None = None) -> ChatControls:
    """The conversation, the message box and Send/Stop/(Regenerate)/Clear/Export, in the current column."""
    chatbot = gr.Chatbot(elem_id="chatbot", height=height, buttons=["copy"], label="Conversation",
                         group_consecutive_messages=False)
    message = gr.Textbox(placeholder="Ask something… (Enter to send)", show_label=False,
                         elem_id="chat-input", lines=1)
    between = between_input_and_buttons() if between_input_and_buttons else None
    with gr.Row():
        send = gr.Button("Send", variant="primary", elem_id="chat-send")
        stop = gr.Button("Stop", variant="stop", elem_id="chat-stop")
        again = gr.Button("Regenerate", elem_id="chat-regenerate") if regenerate else None
        clear = gr.Button("Clear", elem_id="chat-clear")
        export = gr.DownloadButton("Export JSON", elem_id="chat-export")
    return ChatControls(chatbot, message, send, stop, again, clear, export, between)


def turn_panels(trace_lines: int, *, traces_side_by_side: bool, answer: bool = True) -> TurnPanels:
    """This turn's statistics, answer, reasoning trace and tool-call trace, in the current column.

    Side by side (the Chat tab's wide column) the traces come before the answer; stacked
    (the attendee's narrower page) the answer comes first. `answer=False` leaves the answer
    out (the Chat tab: its conversation shows it; a second copy made the page twice as tall)."""
    stats = gr.Markdown("*No turn yet.*", elem_id="chat-stats")

    def answer_panel() -> gr.Markdown:
        return gr.Markdown(label="Answer", elem_id="answer-panel")

    def traces() -> tuple[gr.Textbox, gr.Code]:
        reasoning = gr.Textbox(label="Reasoning trace (this turn)", lines=trace_lines, max_lines=trace_lines + 6,
                               interactive=False, elem_id="reasoning-panel", autoscroll=True)
        tools = gr.Code(label="Tool-call trace (this turn)", language="json", lines=trace_lines,
                        interactive=False, elem_id="tools-panel")
        return reasoning, tools

    shown: gr.Markdown | None = None
    if traces_side_by_side:
        with gr.Row():
            reasoning, tools = traces()
        shown = answer_panel() if answer else None
    else:
        shown = answer_panel() if answer else None
        reasoning, tools = traces()
    return TurnPanels(stats, shown, reasoning, tools)

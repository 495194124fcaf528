"""The attendee app (`/` of a workshop): the chat, a read-only throughput strip, the
attendee's own history, export and Stop of their own turn.

It holds only attendee functions. Gradio runs any event of a Blocks for a raw
caller who knows its fn_index (api_visibility only hides it from the docs), so
nothing here may act on the server or on another attendee: every handler reads
the attendee's name from the signed sign-in (`request.username`, set by the
workshop server's auth_dependency) and works on that attendee's own state. The
one documented endpoint is `chat`: a message in, (answer, conversation) streamed out.
"""

from __future__ import annotations

import html
from collections.abc import AsyncIterator, Callable
from typing import Any

import gradio as gr

from workbench.chat import Conversation, TurnTranscript
from workbench.chat.transcript import ErrorPart, Part, ToolCallPart
from workbench.errors import WorkbenchError
from workbench.metrics import ThroughputFigures
from workbench.ui.chat_widgets import chat_controls, turn_panels
from workbench.ui.chat_render import stats_markdown, tools_text, turn_messages
from workbench.ui.exports import EXPORTS, GRADIO_CACHE_CLEANUP
from workbench.ui.throughput_tab import strip_markdown
from workbench.workshop import AttendeeChat, Room, RoomChat
from workbench.workshop.turns import public_text

__all__ = ["TICK_S", "build_attendee_blocks", "conversation_messages"]

TICK_S = 2.0  # the page's timer: throughput strip, presence, the presenter's broadcasts
PRIVATE: dict[str, Any] = {"api_visibility": "private", "show_progress": "hidden"}


def conversation_messages(conversation: Conversation) -> list[dict[str, Any]]:
    """A kept conversation as chatbot messages (after a reload)."""
    out: list[dict[str, Any]] = []
    for message in conversation.messages:
        if message.role == "user":
            out.append({"role": "user", "content": message.content})
        elif message.role == "assistant":
            if message.reasoning:
                out.append({"role": "assistant", "content": message.reasoning,
                            "metadata": {"title": "Thinking", "status": "done"}})
            for call in message.tool_calls:
                out.append({"role": "assistant", "content": f"```json\n{call.arguments}\n```",
                            "metadata": {"title": f"Tool call · {call.name}", "status": "done"}})
            if message.content:
                out.append({"role": "assistant", "content": message.content})
        if message.failed:
            out.append({"role": "assistant", "content": f"⚠ This turn failed: {public_text(message.failed)}",
                        "metadata": {"title": "Incomplete", "status": "done"}})
    return out


def _refusal(exc: WorkbenchError) -> gr.Error:
    text = exc.message + (f" {exc.hint}" if exc.hint else "")
    return gr.Error(html.escape(public_text(text)), print_exception=False)


def _public_messages(transcript: TurnTranscript) -> list[dict[str, Any]]:
    """The turn's chat messages with this machine's paths cut from its errors (the server's errors name
    its model's folder): the user's message, then one per part of the answer."""
    user, *parts = turn_messages(transcript)
    return [user, *({**m, "content": public_text(m["content"])} if _is_error(part) else m
                    for part, m in zip(transcript.parts, parts))]


def _is_error(part: Part) -> bool:
    return isinstance(part, ErrorPart) or (isinstance(part, ToolCallPart) and part.error is not None)


def _address(request: gr.Request) -> str:
    client = getattr(request, "client", None)
    return str(getattr(client, "host", "") or "")


def build_attendee_blocks(room: Room, room_chat: RoomChat,
                          figures: Callable[[], ThroughputFigures | None]) -> gr.Blocks:
    """The attendees' Blocks. `figures()` gives the server's latest /metrics figures (shared)."""

    def signed_in(request: gr.Request) -> str:
        name = getattr(request, "username", None)
        if not name or not room.is_signed_in(name):
            raise gr.Error("You are not signed in to this room: reload the page to sign in.", print_exception=False)
        return str(name)

    with gr.Blocks(title="Nemotron workshop", analytics_enabled=False, delete_cache=GRADIO_CACHE_CLEANUP) as demo:
        state = gr.State(AttendeeChat())
        with gr.Row():
            who = gr.Markdown(elem_id="attendee-who")
            strip = gr.Markdown(strip_markdown(None), elem_id="attendee-strip")
        notice = gr.Markdown(elem_id="attendee-notice")
        with gr.Row():
            with gr.Column(scale=3):
                controls = chat_controls(520, regenerate=False)
                chatbot, message, send, stop = controls.chatbot, controls.message, controls.send, controls.stop
                clear, export = controls.clear, controls.export
                with gr.Accordion("Options", open=False):
                    with gr.Row():
                        reasoning = gr.Checkbox(True, label="Reasoning (enable_thinking)")
                        tools = gr.Checkbox(False, label="Tools (needs the server's tool parser)")
                        max_tokens = gr.Number(None, precision=0, label="Max tokens (empty: the room's cap)")
            with gr.Column(scale=2):
                turn = turn_panels(8, traces_side_by_side=False)
                stats, answer, reasoning_panel, tools_panel = turn.stats, turn.answer, turn.reasoning, turn.tools
                assert answer is not None  # asked for: the attendee's page shows it
        broadcast = gr.Textbox(visible="hidden", elem_id="attendee-broadcast")
        timer = gr.Timer(TICK_S)

        async def run(text: str, chat: AttendeeChat, name: str,
                      address: str) -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
            try:
                shown: list[dict[str, Any]] = chat.display
                async for transcript in room_chat.turn(chat, name, text, address):
                    shown = chat.display + _public_messages(transcript)
                    yield transcript.answer_text(), shown
                chat.display = shown
            except WorkbenchError as exc:
                raise _refusal(exc) from exc

        async def chat_fn(text: str, chat: AttendeeChat, request: gr.Request):
            """Send a message; streams (the answer so far, the whole conversation)."""
            async for update in run(text, chat, signed_in(request), _address(request)):
                yield update

        async def broadcast_fn(value: str, chat: AttendeeChat, request: gr.Request):
            name = signed_in(request)
            head, _, text = (value or "").partition("\n")
            if not head.isdigit() or int(head) != chat.seen_broadcast or not text:
                return
            async for update in run(text, chat, name, _address(request)):
                yield update

        def after_turn(chat: AttendeeChat, request: gr.Request):
            signed_in(request)
            last: TurnTranscript | None = chat.last
            path = EXPORTS.write_json(f"conversation-{EXPORTS.name_for(chat)}.json", chat.conversation().to_dict())
            if last is None:
                return "", "", "*No turn yet.*", path
            return last.reasoning_text(), tools_text(last), stats_markdown(last) or "*Stopped.*", path

        def stop_fn(chat: AttendeeChat, request: gr.Request) -> None:
            room_chat.stop(chat, signed_in(request))

        def clear_fn(chat: AttendeeChat, request: gr.Request):
            room_chat.clear(chat, signed_in(request))
            return [], "", "", "", "*No turn yet.*"

        def set_options(use_reasoning: bool, use_tools: bool, tokens: float | None, chat: AttendeeChat,
                        request: gr.Request) -> None:
            chat.bind(signed_in(request))
            chat.options.reasoning = bool(use_reasoning)
            chat.options.use_tools = bool(use_tools)
            chat.options.max_tokens = int(tokens) if tokens and tokens > 0 else None

        def on_load(chat: AttendeeChat, request: gr.Request):
            name = signed_in(request)
            room.seen(name)
            room_chat.restore(chat, name)
            chat.seen_broadcast = room.latest_broadcast_id()  # broadcasts reach pages open when they are sent
            chat.display = conversation_messages(chat.conversation())
            limits = room.limits
            rules = [f"answers are capped at {limits.max_tokens} tokens" if limits.max_tokens else "",
                     f"messages at {limits.max_message_chars:,} characters",
                     "" if limits.tools_allowed else "tools are off"]
            return (f"Signed in as **{html.escape(name)}** · [Sign out](/leave)",
                    f"*In this room {', '.join(r for r in rules if r)}.*", chat.display)

        def tick(chat: AttendeeChat, request: gr.Request):
            name = getattr(request, "username", None)
            if not name or not room.is_signed_in(name) or chat.name not in (None, name):
                room_chat.forget(chat)  # removed or expired: release what this page held
                return gr.skip(), "⚠ You are signed out: reload the page to sign in again.", gr.skip()
            room.seen(str(name))
            pending = room.pending_broadcast(chat.seen_broadcast)
            box: Any = gr.skip()
            note: Any = gr.skip()
            if pending is not None:
                chat.seen_broadcast = pending.id
                box = f"{pending.id}\n{pending.text}"
                note = f"**From the presenter**, to everyone: *{html.escape(pending.text[:200])}*"
            return strip_markdown(figures()), note, box

        chat_outputs = [answer, chatbot]
        panels = [reasoning_panel, tools_panel, stats, export]
        sent = [send.click, message.submit]
        gr.on(sent, chat_fn, [message, state], chat_outputs, api_name="chat", api_description=(
            "Send a message to the model as the signed-in attendee; streams (the answer so far, "
            "the conversation as chat messages)."), concurrency_limit=None, show_progress="hidden").then(
            after_turn, state, panels, **PRIVATE)
        # Empties the box in the browser (no round trip); the chat event above already holds the message.
        gr.on(sent, None, None, message, js="() => ''", queue=False, **PRIVATE)
        broadcast.change(broadcast_fn, [broadcast, state], chat_outputs, concurrency_limit=None, **PRIVATE).then(
            after_turn, state, panels, **PRIVATE)
        stop.click(stop_fn, state, None, queue=False, **PRIVATE)
        clear.click(clear_fn, state, [chatbot, answer, reasoning_panel, tools_panel, stats], queue=False, **PRIVATE)
        for option in (reasoning, tools):
            option.change(set_options, [reasoning, tools, max_tokens, state], None, queue=False, **PRIVATE)
        max_tokens.blur(set_options, [reasoning, tools, max_tokens, state], None, queue=False, **PRIVATE)
        timer.tick(tick, state, [strip, notice, broadcast], queue=False, **PRIVATE)
        demo.load(on_load, state, [who, notice, chatbot], queue=False, **PRIVATE)
    return demo

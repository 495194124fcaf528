"""Chat tab: the conversation with Thinking and tool blocks, and side panels for
the current turn's reasoning trace, tool-call trace and statistics (the answer is
in the conversation; it is not repeated beside it)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import gradio as gr

from workbench.chat import ChatOptions, ChatSession, Conversation, TurnFinished, TurnTranscript
from workbench.chat.tools import builtin_tools
from workbench.errors import WorkbenchError
from workbench.ui.chat_mcp import McpPanel, attach_mcp, create_mcp_panel, wire_mcp_panel, with_mcp
from workbench.ui.chat_widgets import chat_controls, turn_panels
from workbench.ui.chat_render import error_message, stats_markdown, tools_text, turn_messages
from workbench.ui.exports import EXPORTS

# Redraw at most this often while text streams: at 200+ tok/s, one update per
# token would flood the websocket and make the page lag.
REDRAW_INTERVAL_S = 0.12
STORAGE_KEY = "nemotron-workbench-chat"
# Not a secret in any strong sense: it only keeps saved chats readable across
# restarts of the app (a random one would make them vanish at the next launch).
STORAGE_SECRET = "nemotron-workbench-chat-v1"


@dataclass
class ChatTab:
    chatbot: gr.Chatbot
    message: gr.Textbox
    send: gr.Button
    stop: gr.Button
    regenerate: gr.Button
    clear: gr.Button
    export: gr.DownloadButton
    reasoning_panel: gr.Textbox
    tools_panel: gr.Code
    stats_panel: gr.Markdown
    server_note: gr.Markdown
    options: list
    saved: gr.BrowserState
    session: gr.State
    mcp: McpPanel


def _options(reasoning, budget, max_tokens, temperature, top_p, system_prompt, use_tools, tool_steps):
    return ChatOptions(
        reasoning=bool(reasoning),
        reasoning_budget=int(budget) if budget else None,
        max_tokens=int(max_tokens) if max_tokens else None,
        temperature=float(temperature),
        top_p=float(top_p),
        system_prompt=system_prompt or None,
        use_tools=bool(use_tools),
        max_tool_steps=int(tool_steps),
    )


def _session_for(session: ChatSession | None, base_url: str, saved: dict | None, options: ChatOptions,
                 request_hook=None) -> ChatSession:
    if session is not None and session.base_url.rstrip("/") == base_url.rstrip("/"):
        session.options = options
        return session
    conversation = read_saved(saved)[1]
    return ChatSession(base_url, options=options, tools=builtin_tools(), conversation=conversation,
                       request_hook=request_hook)


def _drop_last_turn(conversation: Conversation) -> str | None:
    """Remove the last user message and everything after it; return its text."""
    for i in range(len(conversation.messages) - 1, -1, -1):
        if conversation.messages[i].role == "user":
            text = conversation.messages[i].content
            del conversation.messages[i:]
            return text
    return None


def _drop_last_display_turn(display: list[dict]) -> list[dict]:
    for i in range(len(display) - 1, -1, -1):
        if display[i].get("role") == "user":
            return display[:i]
    return display


def _as_dicts(history) -> list[dict]:
    """Chatbot values come back as dicts or message objects; keep plain dicts."""
    out = []
    for m in history or []:
        if isinstance(m, dict):
            out.append({k: v for k, v in m.items() if k in ("role", "content", "metadata")})
        else:
            out.append({"role": m.role, "content": m.content, "metadata": getattr(m, "metadata", None) or {}})
    return out


def browser_state() -> gr.BrowserState:
    """The chat kept in this browser. Create it outside any tab: a tab's components
    mount only when it opens, and one opened before the saved chat is read shows none."""
    return gr.BrowserState({"display": [], "conversation": None}, storage_key=STORAGE_KEY,
                           secret=STORAGE_SECRET)


def create_ui(resolve_server: Callable[[], str], tools_default: bool = False, request_hook=None,
              sampling: dict | None = None, saved: gr.BrowserState | None = None, mcp_add: bool = True) -> ChatTab:
    """`resolve_server()` returns the base URL to chat with, or raises WorkbenchError saying why none.
    `saved`: the page's `browser_state()`, made outside the tabs (one is made here if not).
    `mcp_add`: whether this page may add MCP servers (not an attendee's: the presenter's only)."""
    sampling = {"temperature": 1.0, "top_p": 0.95, **(sampling or {})}
    saved = saved if saved is not None else browser_state()
    session = gr.State(None)
    with gr.Row():
        with gr.Column(scale=3):
            server_note = gr.Markdown(elem_id="chat-server-note")
            controls = chat_controls(560, regenerate=True,
                                     between_input_and_buttons=lambda: create_mcp_panel(allow_add=mcp_add))
            mcp: McpPanel = controls.between
            with gr.Accordion("Options", open=False):
                with gr.Row():
                    reasoning = gr.Checkbox(True, label="Reasoning (enable_thinking)")
                    use_tools = gr.Checkbox(tools_default, label="Tools (needs the server's tool parser)")
                    tool_steps = gr.Slider(0, 10, value=5, step=1, label="Tool steps per turn")
                with gr.Row():
                    budget = gr.Number(None, precision=0, label="Reasoning budget (tokens, empty: none)")
                    max_tokens = gr.Number(1024, precision=0, label="Max tokens (reasoning counts)")
                    temperature = gr.Slider(0, 2, value=sampling["temperature"], step=0.05, label="Temperature", elem_id="chat-temperature")
                    top_p = gr.Slider(0.05, 1, value=sampling["top_p"], step=0.05, label="Top p")
                system_prompt = gr.Textbox(label="System prompt", lines=2)
        with gr.Column(scale=2):
            panels = turn_panels(12, traces_side_by_side=True, answer=False)
    options = [reasoning, budget, max_tokens, temperature, top_p, system_prompt, use_tools, tool_steps]
    assert controls.regenerate is not None  # asked for above
    tab = ChatTab(controls.chatbot, controls.message, controls.send, controls.stop, controls.regenerate,
                  controls.clear, controls.export, panels.reasoning, panels.tools, panels.stats,
                  server_note, options, saved, session, mcp)
    _wire(tab, resolve_server, request_hook)
    wire_mcp_panel(mcp, session, saved)
    return tab


def _wire(tab: ChatTab, resolve_server: Callable[[], str], request_hook) -> None:
    outputs: list[Any] = [tab.chatbot, tab.reasoning_panel, tab.tools_panel, tab.stats_panel,
               tab.saved, tab.session, tab.message]

    def run_turn(text: str, history, saved, session, *option_values, regenerate=False) -> Iterator:
        display = _as_dicts(history)
        saved = saved or {"display": [], "conversation": None}
        try:
            session = _session_for(session, resolve_server(), saved, _options(*option_values), request_hook)
        except WorkbenchError as exc:
            failed = [{"role": "user", "content": text or ""}, error_message(exc.message, exc.hint)]
            yield display + failed, "", "", "", saved, session, text
            return
        if regenerate:
            last_text = _drop_last_turn(session.conversation)
            display = _drop_last_display_turn(display)
            if last_text is None:
                yield display, "", "", "*Nothing to regenerate.*", saved, session, ""
                return
            text = last_text
        if not (text or "").strip():
            yield display, gr.skip(), gr.skip(), gr.skip(), saved, session, ""
            return
        transcript = TurnTranscript(text)
        last = 0.0
        for event in session.stream(text):
            changed = transcript.apply(event)
            now = time.monotonic()
            if changed or now - last >= REDRAW_INTERVAL_S:
                last = now
                shown = display + turn_messages(transcript)
                # Save with the statistics, so a reload right after the turn keeps it.
                keep = ({"display": shown, "conversation": session.conversation.to_dict()}
                        if isinstance(event, TurnFinished) else gr.skip())
                yield (shown, transcript.reasoning_text(), tools_text(transcript),
                       stats_markdown(transcript) or "*Streaming…*", keep, session, "")
        transcript.finish()
        display = display + turn_messages(transcript)
        saved = {"display": display, "conversation": session.conversation.to_dict()}
        yield (display, transcript.reasoning_text(), tools_text(transcript),
               stats_markdown(transcript), saved, session, "")

    def mcp_turn(text, history, saved, session, connections, *opts, regenerate=False):
        try:  # the session exists from here on: it offers the MCP servers' tools
            session = _session_for(session, resolve_server(), saved, _options(*opts), request_hook)
            attach_mcp(session, connections, saved)
        except WorkbenchError:
            pass  # run_turn says why
        yield from with_mcp(run_turn(text, history, saved, session, *opts, regenerate=regenerate), saved, connections)

    def send_fn(text, history, saved, session, connections, *opts):
        yield from mcp_turn(text, history, saved, session, connections, *opts)

    def regenerate_fn(history, saved, session, connections, *opts):
        yield from mcp_turn("", history, saved, session, connections, *opts, regenerate=True)

    outputs = [*outputs, tab.mcp.approval_note, tab.mcp.approval_row]
    inputs = [tab.message, tab.chatbot, tab.saved, tab.session, tab.mcp.connections, *tab.options]
    # A workshop has many people chatting at once: don't serialise them behind
    # Gradio's default concurrency limit of 1.
    # The export button always holds the conversation as it stands, so one click downloads it.
    for trigger in (tab.send.click, tab.message.submit):
        trigger(send_fn, inputs, outputs, concurrency_limit=32, concurrency_id="chat").then(
            _export, [tab.saved, tab.session], tab.export, show_progress="hidden")
    tab.regenerate.click(regenerate_fn, inputs[1:], outputs, concurrency_limit=32, concurrency_id="chat").then(
        _export, [tab.saved, tab.session], tab.export, show_progress="hidden")
    tab.stop.click(_stop, tab.session, None, queue=False)
    cleared = [tab.chatbot, tab.reasoning_panel, tab.tools_panel, tab.stats_panel, tab.saved, tab.session]
    tab.clear.click(_clear, tab.session, cleared).then(
        _export, [tab.saved, tab.session], tab.export, show_progress="hidden")


def _export(saved, session):
    conversation = session.conversation if session is not None else read_saved(saved)[1]
    # One file per session, rewritten; a restored page with no session yet gets a name of its own.
    name = EXPORTS.name_for(session) if session is not None else uuid.uuid4().hex[:12]
    return EXPORTS.write_json(f"conversation-{name}.json", conversation.to_dict())


def _stop(session):
    if session is not None:
        session.stop()


def _clear(session):
    if session is not None:
        session.reset()
    return [], "", "", "*No turn yet.*", {"display": [], "conversation": None}, session


def read_saved(saved: object) -> tuple[list[dict], Conversation, str | None]:
    """The chat kept in this browser: what was shown, the conversation, and why it could
    not be read (the browser's storage may hold anything; nothing of it is trusted)."""
    if not saved:
        return [], Conversation(), None
    if not isinstance(saved, dict):
        return [], Conversation(), f"it is a {type(saved).__name__}, not a saved chat"
    display = saved.get("display") or []
    if not (isinstance(display, list) and all(
            # Gradio hands history back with content as text or as a list of parts
            isinstance(m, dict) and m.get("role") in ("user", "assistant")
            and isinstance(m.get("content"), (str, list)) and isinstance(m.get("metadata") or {}, dict)
            for m in display)):
        return [], Conversation(), "its messages are not chat messages"
    try:
        conversation = Conversation.from_dict(saved["conversation"]) if saved.get("conversation") else Conversation()
    except WorkbenchError as exc:
        return [], Conversation(), exc.message
    return display, conversation, None


def restore(saved: dict | None, shown=None):
    """After a reload: the conversation as it was shown before (unless one is shown)."""
    if shown:
        return gr.skip()
    display, _, problem = read_saved(saved)
    if problem:
        return [error_message(f"The chat saved in this browser could not be read: {problem}.",
                              "It was left out. Send a message to start a new one.")]
    return display

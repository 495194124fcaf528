"""The Chat tab's MCP panel: add MCP servers as tool sources, and answer the approval
each MCP tool call waits for (approve once, always for this tool, deny).

The servers one browser session uses live in a `gr.State` holding McpConnections
(their stdio processes stop when the session ends); their specs and the approval
policies are saved with the chat in the browser. A reload lists the saved servers
but starts nothing until "Reconnect saved" is pressed: the browser's storage may
hold anything, and a command from it is only run on a person's click.
In workshop mode (`allow_add=False`) the panel only answers approvals.
"""

from __future__ import annotations

import html
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import gradio as gr

from workbench.chat import ChatSession
from workbench.chat.approval import ToolApprovals
from workbench.chat.tools import McpConnections, McpServerSpec
from workbench.errors import WorkbenchError

__all__ = ["SAVED_AT", "SESSION_AT", "McpPanel", "approval_markdown", "approval_row_update", "attach_mcp", "create_mcp_panel", "saved_mcp", "saved_servers_note",
           "with_mcp", "wire_mcp_panel"]


@dataclass
class McpPanel:
    connections: gr.State
    server: gr.Textbox
    add: gr.Button
    reconnect: gr.Button
    remove_all: gr.Button
    listing: gr.Markdown
    approval_row: gr.Row  # shown only while a call waits for an answer
    approval_note: gr.Markdown
    approve_once: gr.Button
    approve_always: gr.Button
    deny: gr.Button


def create_mcp_panel(allow_add: bool = True) -> McpPanel:
    """The panel's components (call inside the Chat tab's layout)."""
    connections = gr.State(None, delete_callback=_close)
    # Hidden (but in the page, so its note can be read) until a call waits: the buttons mean nothing before.
    with gr.Row(elem_id="mcp-approval", visible="hidden") as approval_row:
        approval_note = gr.Markdown("", elem_id="mcp-approval-note")
        approve_once = gr.Button("Approve once", elem_id="mcp-approve-once", size="sm")
        approve_always = gr.Button("Always for this tool", elem_id="mcp-approve-always", size="sm")
        deny = gr.Button("Deny", variant="stop", elem_id="mcp-deny", size="sm")
    with gr.Accordion("MCP servers (tools from other programs)", open=False, visible=allow_add):
        server = gr.Textbox(label="MCP server: a command (stdio) or a Streamable HTTP URL",
                            placeholder="python my_server.py   or   http://127.0.0.1:8000/mcp", elem_id="mcp-server")
        with gr.Row():
            add = gr.Button("Add server", elem_id="mcp-add")
            reconnect = gr.Button("Reconnect saved", elem_id="mcp-reconnect")
            remove_all = gr.Button("Remove all", elem_id="mcp-remove-all")
        listing = gr.Markdown("*No MCP server.* Each call of an MCP tool asks for your approval here first.",
                              elem_id="mcp-listing")
    return McpPanel(connections, server, add, reconnect, remove_all, listing, approval_row, approval_note,
                    approve_once, approve_always, deny)


def _close(connections: object) -> None:
    if isinstance(connections, McpConnections):
        connections.close()


def saved_mcp(saved: object) -> dict[str, Any]:
    """The MCP part of the chat saved in the browser (servers and approval policies), checked."""
    mcp = saved.get("mcp") if isinstance(saved, dict) else None
    return mcp if isinstance(mcp, dict) else {}


def attach_mcp(session: ChatSession, connections: object, saved: object) -> None:
    """Before a turn: the session offers the connected servers' tools, under the saved policies."""
    if not isinstance(connections, McpConnections):
        return
    if session.tools is not None:
        connections.register_into(session.tools)
    policies = saved_mcp(saved).get("approvals")
    if isinstance(policies, dict) and not session.approvals.per_tool:
        try:
            session.approvals = ToolApprovals.from_dict(policies)
        except WorkbenchError:
            pass


def _listing(connections: McpConnections | None, problems: list[str] | None = None) -> str:
    lines = []
    for source in connections.sources if connections else []:
        tools = ", ".join(f"`{t.name}`" for t in source.tools) or "no tools"
        lines.append(f"- **{html.escape(source.label)}** ({source.spec.kind}): {tools}")
    for problem in problems or []:
        lines.append(f"- ⚠ {html.escape(problem)}")
    return "\n".join(lines) or "*No MCP server.* Each call of an MCP tool asks for your approval here first."


def _saved_with(saved: object, connections: McpConnections, session: object) -> dict[str, Any]:
    saved = dict(saved) if isinstance(saved, dict) else {"display": [], "conversation": None}
    mcp = {**connections.to_dict()}
    if isinstance(session, ChatSession):
        mcp["approvals"] = session.approvals.to_dict()
    saved["mcp"] = mcp
    return saved


def _add(text: str, connections: McpConnections | None, session: object, saved: object) -> tuple[Any, ...]:
    connections = connections if isinstance(connections, McpConnections) else McpConnections()
    try:
        connections.add(text or "", session.tools if isinstance(session, ChatSession) and session.tools else None)
    except WorkbenchError as exc:
        return connections, _listing(connections, [exc.message + (f" {exc.hint}" if exc.hint else "")]), gr.skip(), gr.skip()
    return connections, _listing(connections), _saved_with(saved, connections, session), ""


def _reconnect(connections: McpConnections | None, session: object, saved: object) -> tuple[Any, ...]:
    connections = connections if isinstance(connections, McpConnections) else McpConnections()
    registry = session.tools if isinstance(session, ChatSession) else None
    problems = connections.restore(saved_mcp(saved), registry)
    return connections, _listing(connections, problems)


def _remove_all(connections: McpConnections | None, session: object, saved: object) -> tuple[Any, ...]:
    if isinstance(connections, McpConnections):
        for label in [s.label for s in connections.sources]:
            connections.remove(label, session.tools if isinstance(session, ChatSession) else None)
    else:
        connections = McpConnections()
    return connections, _listing(connections), _saved_with(saved, connections, session)


def approval_markdown(session: object) -> str:
    """What waits for the person's answer (empty when nothing does)."""
    if not isinstance(session, ChatSession):
        return ""
    waiting = session.approvals.waiting()
    if not waiting:
        return ""
    first = waiting[0]
    tool = session.tools.get(first.tool) if session.tools else None
    server = tool.source if tool is not None and tool.source else "an MCP server"
    return (f"**Approve this MCP tool call?** `{html.escape(first.tool)}` on **{html.escape(server)}**"
            + (f" ({len(waiting) - 1} more waiting)" if len(waiting) > 1 else ""))


def _answer(decision: str):
    def answer(session: object, saved: object, connections: object) -> tuple[Any, ...]:
        if isinstance(session, ChatSession):
            waiting = session.approvals.waiting()
            if waiting:
                session.approvals.answer(waiting[0].call_id, decision)
        keep = _saved_with(saved, connections, session) if isinstance(connections, McpConnections) else gr.skip()
        note = approval_markdown(session)
        return note, approval_row_update(note), keep
    return answer


def approval_row_update(note: str) -> Any:
    """The approval row: shown while a call waits (its note says which), hidden otherwise."""
    return gr.Row(visible=True if note else "hidden")


# Adding a server runs a command on this machine: no API endpoint for it, only the page's buttons.
PRIVATE: dict[str, Any] = {"api_visibility": "private"}


def wire_mcp_panel(panel: McpPanel, session: gr.State, saved: gr.BrowserState) -> None:
    for trigger in (panel.add.click, panel.server.submit):
        trigger(_add, [panel.server, panel.connections, session, saved],
                [panel.connections, panel.listing, saved, panel.server], **PRIVATE)
    panel.reconnect.click(_reconnect, [panel.connections, session, saved], [panel.connections, panel.listing],
                          **PRIVATE)
    panel.remove_all.click(_remove_all, [panel.connections, session, saved],
                           [panel.connections, panel.listing, saved], **PRIVATE)
    # Answered while the turn's handler waits: these must not queue behind it.
    for button, decision in ((panel.approve_once, "once"), (panel.approve_always, "always"), (panel.deny, "deny")):
        button.click(_answer(decision), [session, saved, panel.connections],
                     [panel.approval_note, panel.approval_row, saved], queue=False, **PRIVATE)


def saved_servers_note(saved: object) -> str:
    servers = saved_mcp(saved).get("servers")
    labels = []
    for item in servers if isinstance(servers, list) else []:
        try:
            labels.append(McpServerSpec.from_dict(item).label)
        except WorkbenchError:
            continue
    return ("Saved with this chat (press Reconnect saved): " + ", ".join(f"`{html.escape(x)}`" for x in labels)
            if labels else "")


# Where the Chat tab's turn updates carry the saved chat and the session (chat_tab.run_turn's order).
SAVED_AT, SESSION_AT = 4, 5


def with_mcp(turn_updates: Iterator[tuple[Any, ...]], saved_before: object, connections: object) -> Iterator[tuple[Any, ...]]:
    """The Chat tab's turn updates, plus the approval note and its row's visibility; what they
    save keeps the MCP part."""
    for values in turn_updates:
        keep, session = values[SAVED_AT], values[SESSION_AT]
        if isinstance(keep, dict) and "__type__" not in keep:  # a saved chat, not gr.skip()
            keep = ({**keep, "mcp": saved_mcp(saved_before)} if not isinstance(connections, McpConnections)
                    else _saved_with(keep, connections, session))
        note = approval_markdown(session)
        yield (*values[:SAVED_AT], keep, *values[SAVED_AT + 1:], note, approval_row_update(note))

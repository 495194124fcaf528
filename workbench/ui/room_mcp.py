"""The presenter's "MCP tools for the room" panel (in the Room tab): share an MCP
server's tools with every attendee, or stop sharing. Attendees cannot add servers;
sharing one is the presenter's approval of its tools (workbench.workshop.room_tools)."""

from __future__ import annotations

import html
from typing import Any

import gradio as gr

from workbench.errors import WorkbenchError
from workbench.workshop.room_tools import RoomTools

__all__ = ["create_ui"]

PRIVATE: dict[str, Any] = {"api_visibility": "private"}  # runs a command on this machine: the page's buttons only


def _listing(tools: RoomTools, problem: str = "") -> str:
    lines = [f"- **{html.escape(s.label)}**: " + (", ".join(f"`{t.name}`" for t in s.tools) or "no tools")
             for s in tools.connections.sources]
    if problem:
        lines.append(f"- ⚠ {html.escape(problem)}")
    return "\n".join(lines) or "*No MCP server shared.* Attendees have the built-in tools only."


def create_ui(tools: RoomTools) -> None:
    with gr.Accordion("MCP tools for the room", open=False):
        gr.Markdown("Share an MCP server (a command on this machine, or a Streamable HTTP URL): every attendee's "
                    "chat then offers its tools, approved by you; attendees cannot add servers.")
        server = gr.Textbox(label="MCP server", placeholder="python my_server.py   or   http://127.0.0.1:8000/mcp",
                            elem_id="room-mcp-server")
        with gr.Row():
            share = gr.Button("Share with the room", elem_id="room-mcp-share")
            stop = gr.Button("Stop sharing all", elem_id="room-mcp-stop")
        listing = gr.Markdown(_listing(tools), elem_id="room-mcp-listing")

    def share_fn(text: str) -> tuple[str, str]:
        try:
            tools.share(text or "")
        except WorkbenchError as exc:
            return _listing(tools, exc.message + (f" {exc.hint}" if exc.hint else "")), text
        return _listing(tools), ""

    def stop_fn() -> str:
        tools.remove_all()
        return _listing(tools)

    share.click(share_fn, server, [listing, server], **PRIVATE)
    stop.click(stop_fn, None, listing, **PRIVATE)

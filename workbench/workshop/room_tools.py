"""MCP tools in a workshop: only the presenter adds MCP servers; attendees use what the presenter shared.

An attendee cannot add a server (the attendee page has no such control, and no endpoint
takes one), and nobody is there to approve an attendee's calls one by one: sharing a
server with the room is the presenter's approval of its tools. An attendee's session
offers the built-ins plus the shared tools, with the policy "always" for those and
"never" for any other MCP tool.
"""

from __future__ import annotations

import threading

from workbench.chat import ChatSession
from workbench.chat.approval import ToolApprovals
from workbench.chat.tools import McpConnections, McpToolSource, ToolRegistry

__all__ = ["RoomTools"]


class RoomTools:
    """The MCP servers the presenter shared with the room."""

    def __init__(self) -> None:
        self.connections = McpConnections()
        self._lock = threading.Lock()
        self._approved: set[str] = set()  # tool names, as the model sees them

    def share(self, server: str) -> McpToolSource:
        """Connect a server (a command or a URL) and approve its tools for every attendee."""
        source = self.connections.add(server)
        with self._lock:
            self._approved.update(source.register_into(ToolRegistry()))
        return source

    def remove_all(self) -> None:
        self.connections.close()
        with self._lock:
            self._approved.clear()

    def approved(self) -> list[str]:
        with self._lock:
            return sorted(self._approved)

    def apply(self, session: ChatSession) -> None:
        """Before an attendee's turn: the shared tools offered, approved; no other MCP tool runs."""
        if session.tools is None:
            return
        for name in [n for n in session.tools.names() if (t := session.tools.get(n)) and t.source]:
            session.tools.unregister(name)  # a server the presenter since removed
        self.connections.register_into(session.tools)
        session.approvals = ToolApprovals("never", {name: "always" for name in self.approved()})

    def close(self) -> None:
        self.remove_all()

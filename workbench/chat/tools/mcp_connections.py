"""The MCP servers one chat uses: connected, their tools registered, saved as specs.

The UI keeps one `McpConnections` per browser session (saved with the chat, so a
reload reconnects the same servers), the CLI one per run, a notebook one per
ChatSession it builds. `close()` stops every stdio server it started.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

from workbench.chat.tools.mcp_source import DEFAULT_MCP_CALL_TIMEOUT_S, McpServerSpec, McpToolSource
from workbench.chat.tools.registry import ToolRegistry
from workbench.errors import InputError, WorkbenchError

__all__ = ["McpConnections"]

log = logging.getLogger("workbench.chat.mcp")
MAX_SERVERS = 8  # per chat: each stdio server is a process


class McpConnections:
    """MCP servers by label; their tools go into whatever registries `register_into` is given."""

    def __init__(self, *, call_timeout_s: float = DEFAULT_MCP_CALL_TIMEOUT_S, connect_timeout_s: float = 30.0) -> None:
        self.call_timeout_s = call_timeout_s
        self.connect_timeout_s = connect_timeout_s
        self._sources: dict[str, McpToolSource] = {}
        self._lock = threading.Lock()

    @property
    def sources(self) -> list[McpToolSource]:
        with self._lock:
            return list(self._sources.values())

    def specs(self) -> list[McpServerSpec]:
        return [s.spec for s in self.sources]

    def add(self, server: str | McpServerSpec, registry: ToolRegistry | None = None) -> McpToolSource:
        """Connect to a server (a command or a URL) and register its tools; raises WorkbenchError saying why not."""
        spec = server if isinstance(server, McpServerSpec) else McpServerSpec.parse(server)
        with self._lock:
            known = self._sources.get(spec.label)
            if known is None and len(self._sources) >= MAX_SERVERS:
                raise InputError(f"This chat already uses {MAX_SERVERS} MCP servers.",
                                     hint="Remove one before adding another.")
        if known is None:
            known = McpToolSource(spec, call_timeout_s=self.call_timeout_s,
                                  connect_timeout_s=self.connect_timeout_s).start()
            with self._lock:
                self._sources[spec.label] = known
            log.info("MCP server %s connected: %s", spec.label, ", ".join(t.name for t in known.tools))
        if registry is not None:
            known.register_into(registry)
        return known

    def remove(self, label: str, registry: ToolRegistry | None = None) -> None:
        with self._lock:
            source = self._sources.pop(label, None)
        if registry is not None:
            registry.unregister_source(label)
        if source is not None:
            source.close()

    def register_into(self, registry: ToolRegistry) -> list[str]:
        return [name for source in self.sources for name in source.register_into(registry)]

    def close(self) -> None:
        for label in [s.label for s in self.sources]:
            self.remove(label)

    def to_dict(self) -> dict[str, Any]:
        return {"servers": [spec.to_dict() for spec in self.specs()]}

    def restore(self, data: object, registry: ToolRegistry | None = None) -> list[str]:
        """Reconnect the servers a saved chat used; returns what could not be (one line each)."""
        servers = data.get("servers") if isinstance(data, Mapping) else None
        problems = []
        for item in servers if isinstance(servers, list) else []:
            try:
                self.add(McpServerSpec.from_dict(item), registry)
            except WorkbenchError as exc:
                problems.append(exc.message)
        return problems

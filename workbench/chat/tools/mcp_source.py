"""MCP servers as tool sources, through the official `mcp` SDK.

`McpServerSpec.parse("python my_server.py")` is a stdio server (the command is
split into an argv list and started without a shell); `parse("http://host:port/mcp")`
is a Streamable HTTP one. `McpToolSource(spec).start()` connects on a thread of
its own (its event loop outlives any one chat turn's), lists the server's tools
and `register_into(registry)` offers them to the model beside the built-ins.

Every call has a deadline and can be cancelled (cancelling the returned future
cancels the request). A server that exits, closes the connection or writes
something that is not JSON-RPC fails the call it was serving with a ToolError
that says so; the chat turn goes on with that error as the tool's result.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import re
import os
import shlex
import tempfile
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import IO, Any, Literal

from workbench.chat.tools.registry import ToolRegistry
from workbench.chat.tools.schema import Tool
from workbench.errors import InputError, ToolError

__all__ = ["DEFAULT_CONNECT_TIMEOUT_S", "DEFAULT_MCP_CALL_TIMEOUT_S", "McpServerSpec", "McpToolInfo",
           "McpToolSource"]

log = logging.getLogger("workbench.chat.mcp")
# The SDK logs a traceback for every line a server gets wrong; the call's error says it once.
logging.getLogger("mcp").addHandler(logging.NullHandler())

DEFAULT_CONNECT_TIMEOUT_S = 30.0
DEFAULT_MCP_CALL_TIMEOUT_S = 30.0
_SPEC_HINT = ('Give a command that starts a stdio MCP server (e.g. "python my_server.py") '
              'or the URL of a Streamable HTTP one (e.g. "http://127.0.0.1:8000/mcp").')


@dataclass(frozen=True)
class McpServerSpec:
    """Where an MCP server is: a command (stdio) or a URL (Streamable HTTP)."""

    kind: Literal["stdio", "http"]
    command: tuple[str, ...] = ()
    url: str = ""

    @classmethod
    def parse(cls, text: str) -> McpServerSpec:
        if not isinstance(text, str) or not text.strip():
            raise InputError("The MCP server is empty.", hint=_SPEC_HINT)
        text = text.strip()
        if re.match(r"^https?://", text, re.I):
            if any(c.isspace() for c in text):
                raise InputError(f"The MCP URL {text[:200]!r} contains spaces.", hint=_SPEC_HINT)
            return cls("http", url=text)
        if "://" in text.split()[0]:
            raise InputError(f"{text[:200]!r} is not an http:// or https:// URL.", hint=_SPEC_HINT)
        try:
            argv = shlex.split(text)
        except ValueError as exc:
            raise InputError(f"The MCP command {text[:200]!r} cannot be split into words ({exc}).",
                             hint="Balance the quotes in the command.") from exc
        if "\x00" in text:
            raise InputError("The MCP command contains a NUL character.", hint=_SPEC_HINT)
        return cls("stdio", command=tuple(argv))

    @property
    def label(self) -> str:
        """How the UI names the server: the URL, or the command as typed."""
        return self.url if self.kind == "http" else shlex.join(self.command)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "command": list(self.command), "url": self.url}

    @classmethod
    def from_dict(cls, data: object) -> McpServerSpec:
        """A saved spec, checked (it may come from a browser's storage)."""
        if not isinstance(data, Mapping):
            raise InputError("A saved MCP server is not an object.", hint=_SPEC_HINT)
        if data.get("kind") == "http" and isinstance(data.get("url"), str):
            return cls.parse(data["url"])
        command = data.get("command")
        if data.get("kind") == "stdio" and isinstance(command, list) and command \
                and all(isinstance(word, str) and word and "\x00" not in word for word in command):
            return cls("stdio", command=tuple(command))
        raise InputError("A saved MCP server has neither a command nor a URL.", hint=_SPEC_HINT)


@dataclass(frozen=True)
class McpToolInfo:
    """One tool as the server lists it."""

    name: str
    description: str
    input_schema: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "input_schema": self.input_schema}


def _result_value(result: Any) -> Any:
    """What the model is sent: the structured result, or the text parts joined."""
    texts = []
    for part in getattr(result, "content", None) or []:
        kind = getattr(part, "type", "")
        if kind == "text":
            texts.append(str(getattr(part, "text", "")))
        else:
            texts.append(f"[{kind or 'unknown'} content: {getattr(part, 'mime_type', '') or 'not text'}]")
    text = "\n".join(texts)
    if getattr(result, "is_error", False):
        raise ToolError(text or "The MCP tool reported an error without a message.")
    structured = getattr(result, "structured_content", None)
    if structured is not None:
        # MCPServer wraps a plain return value as {"result": value}
        if isinstance(structured, dict) and list(structured) == ["result"]:
            return structured["result"]
        return structured
    return text


class McpToolSource:
    """One MCP server, connected on a thread of its own; its tools, and calling them."""

    def __init__(self, spec: McpServerSpec, *, connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
                 call_timeout_s: float = DEFAULT_MCP_CALL_TIMEOUT_S) -> None:
        self.spec = spec
        self.connect_timeout_s = connect_timeout_s
        self.call_timeout_s = call_timeout_s
        self.tools: list[McpToolInfo] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._client: Any = None
        self._closing: asyncio.Event | None = None
        self._ended: str | None = None  # why the connection is gone, once it is
        self._faults: set[asyncio.Future[str]] = set()  # one per call in flight
        self._served: concurrent.futures.Future[None] | None = None
        self._errlog: IO[str] | None = None
        self._task: asyncio.Task[Any] | None = None
        self._finished = threading.Event()  # _serve has ended (its process stopped)

    @property
    def label(self) -> str:
        return self.spec.label

    @property
    def connected(self) -> bool:
        return self._client is not None and self._ended is None

    # -- lifecycle

    def start(self) -> McpToolSource:
        """Connect and list the tools; raises ToolError saying why it could not."""
        if self._thread is not None:
            return self
        loop = self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=loop.run_forever, name=f"mcp {self.label[:40]}", daemon=True)
        self._thread.start()
        ready: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._served = asyncio.run_coroutine_threadsafe(self._serve(ready), loop)
        try:
            ready.result(self.connect_timeout_s)
        except concurrent.futures.TimeoutError:
            self.close()
            raise ToolError(f"The MCP server {self.label!r} did not answer within {self.connect_timeout_s:g} s.",
                            hint="Check that the command starts an MCP server on stdio, or that the URL "
                            "is its Streamable HTTP endpoint (usually ending in /mcp).") from None
        except ToolError:
            self.close()
            raise
        return self

    def close(self) -> None:
        """Disconnect (a stdio server's process is stopped) and end the thread."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None or loop.is_closed():
            return
        if self._closing is not None:
            loop.call_soon_threadsafe(self._closing.set)
        if not self._finished.wait(5 if self._client is not None else 0.5) and self._task is not None:
            # Still connecting (a server that never answers): cancel, so the SDK stops its process.
            loop.call_soon_threadsafe(self._task.cancel)
            self._finished.wait(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        if not thread.is_alive():
            loop.close()
        if self._errlog is not None:
            self._errlog.close()

    def __enter__(self) -> McpToolSource:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def stderr_tail(self, chars: int = 400) -> str:
        """The end of what a stdio server wrote on its stderr (kept in a file of our own:
        a notebook's or a test's sys.stderr has no descriptor to hand a process)."""
        if self._errlog is None:
            return ""
        try:
            self._errlog.flush()
            size = self._errlog.seek(0, os.SEEK_END)
            self._errlog.seek(max(0, size - chars))
            return " ".join(self._errlog.read().split())[-chars:]
        except (OSError, ValueError):
            return ""

    def _with_stderr(self, why: str) -> str:
        tail = self.stderr_tail()
        return f"{why} (its stderr ends: {tail!r})" if tail else why

    async def _serve(self, ready: concurrent.futures.Future[None]) -> None:
        # The MCP SDK takes 1.1 s to load: when a server is connected, not with every command.
        from mcp import Client, StdioServerParameters
        from mcp.client.stdio import stdio_client

        self._closing = asyncio.Event()
        self._task = asyncio.current_task()
        server: Any = self.spec.url
        if self.spec.kind == "stdio":
            self._errlog = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")
            # The SDK passes a server only a safe part of the environment (no API keys); the
            # Python path goes too, so `python -m module` finds what this process finds.
            env = {"PYTHONPATH": os.environ["PYTHONPATH"]} if os.environ.get("PYTHONPATH") else None
            server = stdio_client(StdioServerParameters(command=self.spec.command[0], args=list(self.spec.command[1:]),
                                                        env=env), errlog=self._errlog)
        try:
            async with Client(server, message_handler=self._on_message) as client:
                listed = await client.list_tools()
                self.tools = [McpToolInfo(t.name, t.description or "", dict(t.input_schema or {}))
                              for t in listed.tools]
                self._client = client
                ready.set_result(None)
                await self._closing.wait()
        except BaseException as exc:
            why = self._with_stderr(_describe(exc))
            log.info("MCP server %s: %s", self.label, why)
            self._ended = why
            self._fault(why)
            if not ready.done():
                ready.set_exception(ToolError(f"Could not connect to the MCP server {self.label!r}: {why}",
                                              hint=_SPEC_HINT))
            if not isinstance(exc, Exception):
                raise
        finally:
            self._client = None
            if self._ended is None:
                self._ended = "the connection was closed"
            self._finished.set()

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, Exception):
            self._fault(f"the server sent something that is not a valid MCP message ({_describe(message)})")

    def _fault(self, why: str) -> None:
        for fault in list(self._faults):
            if not fault.done():
                fault.set_result(why)

    # -- tools

    def register_into(self, registry: ToolRegistry) -> list[str]:
        """Offer this server's tools in `registry`; a name already taken gets the server's prefix."""
        names = []
        for info in self.tools:
            name = _tool_name(info.name)
            taken = registry.get(name)
            if taken is not None and taken.source != self.label:
                name = _tool_name(f"mcp_{info.name}")
            registry.register(Tool(name, info.description, info.input_schema or {"type": "object", "properties": {}},
                                   function=_not_local, timeout_s=self.call_timeout_s, source=self.label,
                                   call_remote=self._remote_for(info.name)))
            names.append(name)
        return names

    def _remote_for(self, tool_name: str) -> Any:
        def call(arguments: dict[str, Any], timeout_s: float) -> concurrent.futures.Future[Any]:
            return self.call(tool_name, arguments, timeout_s)
        return call

    def call(self, name: str, arguments: Mapping[str, Any], timeout_s: float | None = None) -> concurrent.futures.Future[Any]:
        """Start a call; the future holds the tool's value or a ToolError. Cancel it to cancel the call."""
        timeout = timeout_s or self.call_timeout_s
        if self._loop is None or self._loop.is_closed():
            failed: concurrent.futures.Future[Any] = concurrent.futures.Future()
            failed.set_exception(ToolError(f"The MCP server {self.label!r} is not connected.",
                                           hint="Add the server again."))
            return failed
        return asyncio.run_coroutine_threadsafe(self._call(name, dict(arguments), timeout), self._loop)

    def call_blocking(self, name: str, arguments: Mapping[str, Any], timeout_s: float | None = None) -> Any:
        return self.call(name, arguments, timeout_s).result()

    async def _call(self, name: str, arguments: dict[str, Any], timeout: float) -> Any:
        client = self._client
        if client is None or self._ended is not None:
            raise ToolError(f"The MCP server {self.label!r} is gone: {self._ended or 'not connected'}.",
                            hint="Remove it and add it again (a stdio server is restarted then).")
        assert self._loop is not None
        fault: asyncio.Future[str] = self._loop.create_future()
        self._faults.add(fault)
        request = asyncio.ensure_future(client.call_tool(name, arguments))
        try:
            done, _ = await asyncio.wait({request, fault}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            if request in done:
                try:
                    return _result_value(request.result())
                except ToolError:
                    raise
                except Exception as exc:
                    raise ToolError(f"The MCP server {self.label!r} failed the call to {name}: "
                                    f"{self._with_stderr(_describe(exc))}") from exc
            if fault in done:
                raise ToolError(f"The call to {name} failed: {fault.result()}.",
                                hint=f"The MCP server {self.label!r} may be broken; check its own log.")
            raise ToolError(f"{name} (MCP server {self.label!r}) did not answer within {timeout:g} s.")
        finally:
            self._faults.discard(fault)
            if not request.done():
                request.cancel()
                try:
                    await request
                except BaseException:  # the cancelled request's own error
                    pass


def _not_local(**_: Any) -> Any:
    raise ToolError("This MCP tool runs on its server, not here.")


def _tool_name(name: str) -> str:
    """A name the OpenAI tools schema accepts (letters, digits, _ and -, at most 64)."""
    cleaned = re.sub(r"[^A-Za-z0-9_-]", "_", name)[:64] or "tool"
    return cleaned if re.match(r"^[A-Za-z_]", cleaned) else f"_{cleaned[:63]}"


def _describe(exc: BaseException) -> str:
    """An exception as one line: the SDK nests causes in exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    # Here the MCP SDK (and pydantic with it) is loaded already; at the top it would slow every command's start.
    from pydantic_core import ValidationError  # what the SDK's message parsing raises

    text = (str(exc) or type(exc).__name__).strip()
    first = text.splitlines()[0] if text else type(exc).__name__
    if isinstance(exc, ValidationError) or first.endswith(":"):  # the next lines say what
        first = " ".join(text.splitlines()[:3])
    return " ".join(first.split())[:300]

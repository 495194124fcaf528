"""The tools one chat session offers, and running them safely.

`ToolRegistry.arun` / `run` call a tool with the model's arguments in a worker
thread under a timeout and always return a `ToolOutcome`: a tool that raises,
hangs or gets bad arguments becomes an error result for the model, never an
exception for the chat.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from workbench.chat.tools.schema import Tool, tool_from_function
from workbench.errors import WorkbenchError

__all__ = ["DEFAULT_TOOL_TIMEOUT_S", "ToolOutcome", "ToolRegistry"]

DEFAULT_TOOL_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class ToolOutcome:
    """What a call returned: `result` (JSON-able) or `error` (a message for the model)."""

    name: str
    arguments: dict
    result: Any = None
    error: str | None = None
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None

    def content_for_model(self) -> str:
        """The `content` of the `role: tool` message sent back."""
        if self.error is not None:
            return json.dumps({"error": self.error})
        if isinstance(self.result, str):
            return self.result
        return json.dumps(self.result, default=str)

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "arguments": self.arguments,
            "result": self.result,
            "error": self.error,
            "seconds": self.seconds,
        }


def _run_in_daemon_thread(function: Callable[[], Any]) -> concurrent.futures.Future:
    # A daemon thread, not an executor: a tool that never returns must not block
    # interpreter or event-loop shutdown.
    future: concurrent.futures.Future = concurrent.futures.Future()

    def target() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(function())
        except BaseException as exc:  # handed to the caller, who reports it
            future.set_exception(exc)

    threading.Thread(target=target, name="workbench-tool", daemon=True).start()
    return future


class ToolRegistry:
    """The tools one chat session offers; each session owns its registry."""

    def __init__(self, tools: list[Tool | Callable[..., Any]] | None = None,
                 *, timeout_s: float = DEFAULT_TOOL_TIMEOUT_S) -> None:
        self.timeout_s = timeout_s
        self._tools: dict[str, Tool] = {}
        for tool in tools or []:
            self.register(tool)

    def register(self, tool: Tool | Callable[..., Any], *, name: str | None = None,
                 description: str | None = None, timeout_s: float | None = None) -> Tool:
        """Add a Tool or a plain function (described from its signature); returns the Tool."""
        if not isinstance(tool, Tool):
            tool = tool_from_function(tool, name=name, description=description, timeout_s=timeout_s)
        self._tools[tool.name] = tool
        return tool

    def unregister(self, name: str) -> None:
        self._tools.pop(name, None)

    def names(self) -> list[str]:
        return list(self._tools)

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)

    def schemas(self) -> list[dict]:
        """The request's `tools` list."""
        return [tool.to_openai() for tool in self._tools.values()]

    def _prepare(self, name: str, arguments: Any) -> tuple[Tool | None, dict, str | None]:
        args = arguments if isinstance(arguments, dict) else {}
        tool = self._tools.get(name)
        if tool is None:
            known = ", ".join(self._tools) or "none"
            return None, args, f"Unknown tool {name!r}. Available tools: {known}."
        if not isinstance(arguments, dict):
            return tool, args, f"Arguments must be a JSON object, got {type(arguments).__name__}."
        try:
            inspect.signature(tool.function).bind(**arguments)
        except TypeError as exc:
            expected = ", ".join(tool.parameters.get("properties", {}))
            return tool, args, f"Bad arguments for {name}: {exc}. Parameters: {expected}."
        return tool, args, None

    @staticmethod
    def _error_text(exc: BaseException) -> str:
        if isinstance(exc, WorkbenchError):
            return exc.message + (f" {exc.hint}" if exc.hint else "")
        return f"{type(exc).__name__}: {exc}"

    async def arun(self, name: str, arguments: Any) -> ToolOutcome:
        """Call a tool without blocking the event loop; never raises for tool failures."""
        started = time.monotonic()
        tool, args, problem = self._prepare(name, arguments)
        if problem:
            return ToolOutcome(name, args, error=problem, seconds=time.monotonic() - started)
        timeout = tool.timeout_s or self.timeout_s
        future = _run_in_daemon_thread(lambda: tool.function(**args))
        try:
            result = await asyncio.wait_for(asyncio.wrap_future(future), timeout)
        except (TimeoutError, asyncio.TimeoutError):
            return ToolOutcome(name, args, error=f"{name} did not finish within {timeout:g} s.",
                               seconds=time.monotonic() - started)
        except Exception as exc:
            return ToolOutcome(name, args, error=self._error_text(exc),
                               seconds=time.monotonic() - started)
        return ToolOutcome(name, args, result=result, seconds=time.monotonic() - started)

    def run(self, name: str, arguments: Any) -> ToolOutcome:
        """Blocking form of `arun`, for scripts and notebooks."""
        started = time.monotonic()
        tool, args, problem = self._prepare(name, arguments)
        if problem:
            return ToolOutcome(name, args, error=problem, seconds=time.monotonic() - started)
        timeout = tool.timeout_s or self.timeout_s
        future = _run_in_daemon_thread(lambda: tool.function(**args))
        try:
            result = future.result(timeout)
        except concurrent.futures.TimeoutError:
            return ToolOutcome(name, args, error=f"{name} did not finish within {timeout:g} s.",
                               seconds=time.monotonic() - started)
        except Exception as exc:
            return ToolOutcome(name, args, error=self._error_text(exc),
                               seconds=time.monotonic() - started)
        return ToolOutcome(name, args, result=result, seconds=time.monotonic() - started)


"""The tools one chat session offers, and running them safely.

`ToolRegistry.arun` / `run` call a tool with the model's arguments in a worker
process (workbench.chat.tools.worker) under a hard timeout and always return a
`ToolOutcome`: a tool that raises, hangs, exits or gets bad arguments becomes an
error result for the model, never an exception for the chat. Arguments are
bounded in size, and what goes back to the model is always valid JSON.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from workbench.chat.tools.schema import Tool, tool_from_function
from workbench.chat.tools.worker import WorkerOutcome, error_text, run_in_worker

__all__ = ["DEFAULT_TOOL_TIMEOUT_S", "MAX_ARGUMENT_CHARS", "ToolOutcome", "ToolRegistry", "json_safe"]

DEFAULT_TOOL_TIMEOUT_S = 10.0
MAX_ARGUMENT_CHARS = 20_000  # the arguments' JSON text; a model that sends more is looping


def json_safe(value: Any, _depth: int = 0) -> Any:
    """`value` with what JSON cannot hold made into text: NaN and infinities become
    "NaN"/"Infinity"/"-Infinity", other objects their str()."""
    if _depth > 50:
        return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, dict):
        return {str(k): json_safe(v, _depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v, _depth + 1) for v in value]
    return str(value)


@dataclass(frozen=True)
class ToolOutcome:
    """What a call returned: `result` (JSON-able) or `error` (a message for the model)."""

    name: str
    arguments: dict[str, Any]
    result: Any = None
    error: str | None = None
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None

    def content_for_model(self) -> str:
        """The `content` of the `role: tool` message sent back: always valid JSON
        (or the tool's own string)."""
        if self.error is not None:
            return json.dumps({"error": self.error})
        if isinstance(self.result, str):
            return self.result
        return json.dumps(json_safe(self.result), allow_nan=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "arguments": self.arguments,
            "result": json_safe(self.result),
            "error": self.error,
            "seconds": self.seconds,
        }


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

    def unregister_source(self, source: str) -> None:
        """Remove every tool an MCP server (named by its label) added."""
        for name in [n for n, t in self._tools.items() if t.source == source]:
            del self._tools[name]

    def names(self) -> list[str]:
        return list(self._tools)

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)

    def schemas(self) -> list[dict[str, Any]]:
        """The request's `tools` list."""
        return [tool.to_openai() for tool in self._tools.values()]

    def _prepare(self, name: str, arguments: Any) -> tuple[Tool | None, dict[str, Any], str | None]:
        args = arguments if isinstance(arguments, dict) else {}
        tool = self._tools.get(name) if isinstance(name, str) else None
        if tool is None:
            known = ", ".join(self._tools) or "none"
            return None, {}, f"Unknown tool {str(name)[:100]!r}. Available tools: {known}."
        if not isinstance(arguments, dict):
            return tool, args, f"Arguments must be a JSON object, got {type(arguments).__name__}."
        try:
            size = len(json.dumps(arguments, default=str))
        except (TypeError, ValueError, RecursionError):
            return tool, {}, "The arguments cannot be read as JSON."
        if size > MAX_ARGUMENT_CHARS:
            return tool, {}, f"The arguments are {size} characters of JSON; the limit is {MAX_ARGUMENT_CHARS}."
        if tool.call_remote is not None:
            return tool, args, None  # its server checks the arguments against its own schema
        try:
            inspect.signature(tool.function).bind(**arguments)
        except TypeError as exc:
            expected = ", ".join(tool.parameters.get("properties", {}))
            return tool, args, f"Bad arguments for {name}: {exc}. Parameters: {expected}."
        return tool, args, None

    @staticmethod
    def _error_text(exc: BaseException) -> str:
        return error_text(exc)

    def _call(self, tool: Tool, name: str, args: dict[str, Any], started: float) -> ToolOutcome:
        timeout = tool.timeout_s or self.timeout_s
        outcome: WorkerOutcome = run_in_worker(lambda: tool.function(**args), timeout)
        seconds = time.monotonic() - started
        if outcome.timed_out:
            return ToolOutcome(name, args, error=f"{name} did not finish within {timeout:g} s.", seconds=seconds)
        if outcome.error is not None:
            return ToolOutcome(name, args, error=outcome.error, seconds=seconds)
        return ToolOutcome(name, args, result=outcome.result, seconds=seconds)

    def _remote_outcome(self, name: str, args: dict[str, Any], future: concurrent.futures.Future[Any],
                        started: float) -> ToolOutcome:
        seconds = time.monotonic() - started
        try:
            return ToolOutcome(name, args, result=future.result(0), seconds=seconds)
        except BaseException as exc:  # the server's failure is the model's news
            return ToolOutcome(name, args, error=error_text(exc), seconds=seconds)

    async def arun(self, name: str, arguments: Any) -> ToolOutcome:
        """Call a tool without blocking the event loop; never raises for tool failures.
        Cancelling the awaiting task cancels a remote (MCP) call on its server."""
        started = time.monotonic()
        tool, args, problem = self._prepare(name, arguments)
        if problem or tool is None:
            return ToolOutcome(name, args, error=problem, seconds=time.monotonic() - started)
        if tool.call_remote is not None:
            future = tool.call_remote(args, tool.timeout_s or self.timeout_s)
            try:
                await asyncio.wrap_future(future)
            except asyncio.CancelledError:
                future.cancel()
                raise
            except BaseException:  # read back from the future below
                pass
            return self._remote_outcome(name, args, future, started)
        # The waiting thread only sits in select(); the worker is killed at the deadline.
        return await asyncio.to_thread(self._call, tool, name, args, started)

    def run(self, name: str, arguments: Any) -> ToolOutcome:
        """Blocking form of `arun`, for scripts and notebooks."""
        started = time.monotonic()
        tool, args, problem = self._prepare(name, arguments)
        if problem or tool is None:
            return ToolOutcome(name, args, error=problem, seconds=time.monotonic() - started)
        if tool.call_remote is not None:
            future = tool.call_remote(args, tool.timeout_s or self.timeout_s)
            concurrent.futures.wait([future])
            return self._remote_outcome(name, args, future, started)
        return self._call(tool, name, args, started)

"""Running one round of the model's tool calls: approval first for MCP tools, then the call.

Every call the model made gets exactly one `role: tool` message back (its result,
its error, a denial, or why it did not run), so the conversation stays one the
server accepts. A stop while a call waits for approval or runs cancels it (an
MCP request is cancelled on its server) and ends the round.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

from workbench.chat.approval import ApprovalDecision, ToolApprovals
from workbench.chat.events import ChatEvent, Notice, ToolApprovalRequested, ToolResult
from workbench.chat.stream import PendingCall
from workbench.chat.tools import ToolRegistry

__all__ = ["ToolRunner"]

_APPROVED = {"once": "approved once", "always": "approved always"}


class ToolRunner:
    """One session's way of running calls: its tools, its approvals, how a result is recorded."""

    def __init__(self, tools: ToolRegistry | None, approvals: ToolApprovals,
                 record: Callable[[PendingCall, str], None], stop_event: asyncio.Event) -> None:
        self.tools = tools
        self.approvals = approvals
        self.record = record
        self.stop_event = stop_event

    async def run(self, calls: list[PendingCall], step: int) -> AsyncIterator[ChatEvent]:
        """Each call in turn; after a stop the rest are answered "not run" and the round ends."""
        for position, call in enumerate(calls):
            if self.stop_event.is_set():
                for rest in calls[position:]:
                    self.record(rest, json.dumps({"error": "Not run: the user stopped the turn."}))
                return
            async for event in self._run_one(call, step):
                yield event

    def refuse(self, calls: list[PendingCall], have_tools: bool, max_steps: int) -> Notice:
        """Answer calls that will not run (step limit, or no tools), so the history stays valid."""
        reason = (f"the limit of {max_steps} tool round(s) per turn was reached"
                  if have_tools else "no tools are enabled in this session")
        for call in calls:
            self.record(call, json.dumps({"error": f"Not run: {reason}."}))
        return Notice(
            "tool_step_limit",
            f"The model asked for {', '.join(c.name for c in calls)} again, but "
            f"{reason}; the calls were not run and the turn ends here.",
            hint="Raise max_tool_steps in the options, or ask a narrower question."
            if have_tools else "Enable tools in the options.",
        )

    def _finish(self, call: PendingCall, step: int, arguments: dict[str, Any], error: str,
                approval: str | None, source: str | None) -> ToolResult:
        content = json.dumps({"error": error})
        self.record(call, content)
        return ToolResult(step, call.id, call.name, arguments, error=error, content=content,
                          approval=approval, source=source)

    async def _run_one(self, call: PendingCall, step: int) -> AsyncIterator[ChatEvent]:
        try:
            arguments = json.loads(call.arguments) if call.arguments.strip() else {}
        except json.JSONDecodeError as exc:
            yield self._finish(call, step, {}, f"The arguments are not valid JSON ({exc.msg}): {call.arguments!r}",
                               None, None)
            return
        assert self.tools is not None
        tool = self.tools.get(call.name)
        source = tool.source if tool is not None else None
        approval: str | None = None
        if source is not None and isinstance(arguments, dict):
            policy = self.approvals.policy_for(call.name)
            if policy == "never":
                yield self._finish(call, step, arguments, "The user does not allow this tool (policy: never).",
                                   "denied by policy", source)
                return
            if policy == "ask":
                # The question is open before anyone hears of it: a view answers as soon as it sees the event.
                question = self.approvals.ask(call.id, call.name)
                yield ToolApprovalRequested(step, call.id, call.name, arguments, source)
                decision = await self._wait_for_answer(call, question)
                if decision is None:
                    yield self._finish(call, step, arguments, "Cancelled: the user stopped the turn.", "cancelled", source)
                    return
                if decision == "deny":
                    yield self._finish(call, step, arguments, "The user denied this call.", "denied", source)
                    return
                approval = _APPROVED[decision]
            else:
                approval = "allowed by policy"
        running = asyncio.ensure_future(self.tools.arun(call.name, arguments))
        if not await self._first_or_stop(running):
            yield self._finish(call, step, arguments if isinstance(arguments, dict) else {},
                               "Cancelled: the user stopped the turn.", "cancelled" if source else None, source)
            return
        outcome = running.result()
        content = outcome.content_for_model()
        self.record(call, content)
        yield ToolResult(step, call.id, call.name, outcome.arguments, outcome.result, outcome.error,
                         outcome.seconds, content, approval=approval, source=source)

    async def _wait_for_answer(self, call: PendingCall,
                               question: concurrent.futures.Future[ApprovalDecision]) -> ApprovalDecision | None:
        """The person's answer, or None when the turn was stopped first."""
        answer = asyncio.wrap_future(question)
        if await self._first_or_stop(answer):
            return answer.result()
        self.approvals.forget(call.id)
        return None

    async def _first_or_stop(self, work: asyncio.Future[Any]) -> bool:
        """Wait for `work`; on a stop, cancel it and return False."""
        stopped = asyncio.ensure_future(self.stop_event.wait())
        try:
            await asyncio.wait({work, stopped}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            work.cancel()
            raise
        finally:
            stopped.cancel()
        if work.done() and not work.cancelled():
            return True
        work.cancel()
        try:
            await work
        except BaseException:  # its own CancelledError
            pass
        return False

"""Which tool calls need a person's yes first, and the questions waiting for one.

MCP tools run code somewhere else on the model's say-so, so each call of one is
asked about first (policy "ask"): the turn emits a ToolApprovalRequested event
and waits until a view calls `answer(call_id, decision)` ("once", "always" for
this tool from now on, or "deny"; a denial goes back to the model as the tool's
result). A tool's policy may be "always" (run without asking) or "never"
(refused without asking). Built-in tools only compute and are never asked about.
Thread-safe: views answer from their own threads.
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from workbench.errors import InputError

__all__ = ["APPROVAL_DECISIONS", "APPROVAL_POLICIES", "ApprovalDecision", "ApprovalPolicy", "PendingApproval", "check_policy",
           "ToolApprovals"]

ApprovalPolicy = Literal["ask", "always", "never"]
ApprovalDecision = Literal["once", "always", "deny"]
APPROVAL_POLICIES: tuple[ApprovalPolicy, ...] = ("ask", "always", "never")
APPROVAL_DECISIONS: tuple[ApprovalDecision, ...] = ("once", "always", "deny")


@dataclass(frozen=True)
class PendingApproval:
    call_id: str
    tool: str
    future: concurrent.futures.Future[ApprovalDecision]


def check_policy(value: object, what: str = "approval policy") -> ApprovalPolicy:
    if value not in APPROVAL_POLICIES:
        raise InputError(f"Unknown {what} {str(value)[:100]!r}.",
                         hint=f"Use one of: {', '.join(APPROVAL_POLICIES)}.")
    return value


class ToolApprovals:
    """Policies per tool (and a default), and the calls waiting for an answer."""

    def __init__(self, default: ApprovalPolicy = "ask", per_tool: Mapping[str, ApprovalPolicy] | None = None) -> None:
        self.default = check_policy(default)
        self.per_tool: dict[str, ApprovalPolicy] = {
            str(name): check_policy(policy) for name, policy in (per_tool or {}).items()}
        self._lock = threading.Lock()
        self._pending: dict[str, PendingApproval] = {}

    def policy_for(self, tool: str) -> ApprovalPolicy:
        with self._lock:
            return self.per_tool.get(tool, self.default)

    def set_policy(self, tool: str, policy: ApprovalPolicy) -> None:
        with self._lock:
            self.per_tool[tool] = check_policy(policy)

    def ask(self, call_id: str, tool: str) -> concurrent.futures.Future[ApprovalDecision]:
        """Open a question for this call; the future holds the answer once given."""
        future: concurrent.futures.Future[ApprovalDecision] = concurrent.futures.Future()
        with self._lock:
            self._pending[call_id] = PendingApproval(call_id, tool, future)
        return future

    def waiting(self) -> list[PendingApproval]:
        with self._lock:
            return [p for p in self._pending.values() if not p.future.done()]

    def answer(self, call_id: str, decision: str) -> bool:
        """Answer a waiting call (False when none waits under that id: answered, or gone)."""
        if decision not in APPROVAL_DECISIONS:
            raise InputError(f"Unknown approval decision {str(decision)[:100]!r}.",
                             hint=f"Use one of: {', '.join(APPROVAL_DECISIONS)}.")
        with self._lock:
            pending = self._pending.pop(call_id, None)
            if pending is None or pending.future.done():
                return False
            if decision == "always":
                self.per_tool[pending.tool] = "always"
        pending.future.set_result(decision)
        return True

    def forget(self, call_id: str) -> None:
        """Drop a question nobody will answer now (the turn was stopped)."""
        with self._lock:
            pending = self._pending.pop(call_id, None)
        if pending is not None:
            pending.future.cancel()

    def to_dict(self) -> dict[str, Any]:
        with self._lock:
            return {"default": self.default, "per_tool": dict(self.per_tool)}

    @classmethod
    def from_dict(cls, data: object) -> ToolApprovals:
        if not isinstance(data, Mapping):
            return cls()
        per_tool = data.get("per_tool")
        return cls(check_policy(data.get("default", "ask")),
                   per_tool if isinstance(per_tool, Mapping) else None)

"""The conversation: messages as sent to the server, plus what a view shows beside them.

History follows the model card: earlier turns' reasoning is kept for display and
export but never sent back; assistant tool-call messages keep their `tool_calls`;
tool results go back as `role: tool` with `tool_call_id`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from workbench.chat.events import TurnStats
from workbench.errors import WorkbenchError

__all__ = ["CONVERSATION_FORMAT", "Conversation", "Message", "ToolCall"]


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: str  # the JSON text, as the model wrote it

    def to_wire(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Message:
    """One message of the conversation, plus what a view shows beside it."""

    role: Literal["system", "user", "assistant", "tool"]
    content: str = ""
    reasoning: str | None = None  # shown and exported; never sent back to the model
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_call_id: str | None = None
    name: str | None = None  # the tool's name on role "tool"
    stats: TurnStats | None = None  # on the last assistant message of a turn
    # Why the turn that wrote this failed: on a partial answer (kept, and sent back as it
    # is), or on a user message that got no answer at all.
    failed: str | None = None

    def to_wire(self) -> dict[str, Any]:
        """The message as sent to the server (reasoning dropped, as the model card asks)."""
        wire: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            wire["tool_calls"] = [call.to_wire() for call in self.tool_calls]
        if self.role == "tool":
            wire["tool_call_id"] = self.tool_call_id
            if self.name:
                wire["name"] = self.name
        return wire

    def to_dict(self) -> dict[str, Any]:
        return {
            "role": self.role,
            "content": self.content,
            "reasoning": self.reasoning,
            "tool_calls": [call.to_dict() for call in self.tool_calls],
            "tool_call_id": self.tool_call_id,
            "name": self.name,
            "stats": self.stats.to_dict() if self.stats else None,
            "failed": self.failed,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Message:
        role = data.get("role")
        if role not in ("system", "user", "assistant", "tool"):
            raise WorkbenchError(
                f"A saved message has role {role!r}.",
                hint="Roles are system, user, assistant or tool; was the file exported by the workbench?",
            )
        return cls(
            role=role,
            content=data.get("content") or "",
            reasoning=data.get("reasoning"),
            tool_calls=[ToolCall(**c) for c in data.get("tool_calls") or []],
            tool_call_id=data.get("tool_call_id"),
            name=data.get("name"),
            stats=TurnStats.from_dict(data["stats"]) if data.get("stats") else None,
            failed=data.get("failed") if isinstance(data.get("failed"), str) else None,
        )


CONVERSATION_FORMAT = "workbench-conversation/1"


@dataclass
class Conversation:
    messages: list[Message] = field(default_factory=list)

    def to_wire(self) -> list[dict[str, Any]]:
        """What the server is sent: a user message whose turn failed with no answer at all
        is left out once another user message follows it (no user, user on the wire);
        while it is the last one it is sent, so the turn can be retried."""
        wire = []
        for i, m in enumerate(self.messages):
            following = self.messages[i + 1] if i + 1 < len(self.messages) else None
            if m.role == "user" and m.failed and following is not None and following.role == "user":
                continue
            wire.append(m.to_wire())
        return wire

    def to_dict(self) -> dict[str, Any]:
        return {"format": CONVERSATION_FORMAT, "messages": [m.to_dict() for m in self.messages]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Conversation:
        if data.get("format") != CONVERSATION_FORMAT:
            raise WorkbenchError(
                f"Not a saved conversation (format {data.get('format')!r}).",
                hint=f"Load a file exported by the workbench (format {CONVERSATION_FORMAT}).",
            )
        return cls([Message.from_dict(m) for m in data.get("messages", [])])

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    @classmethod
    def from_json(cls, text: str) -> Conversation:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise WorkbenchError(f"The conversation file is not JSON ({exc}).") from exc
        return cls.from_dict(data)


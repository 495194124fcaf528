"""The conversation: messages as sent to the server, plus what a view shows beside them.

History follows the model card: earlier turns' reasoning is kept for display and
export but not sent back; assistant tool-call messages keep their `tool_calls`;
tool results go back as `role: tool` with `tool_call_id`. Within the turn in
progress (the messages after the last user message: a tool call, its result, the
next step) each assistant message carries its reasoning back as `reasoning`, so
the model continues from its own thoughts across tool calls: vLLM 0.32 accepts
`reasoning` (or the older `reasoning_content`) on an assistant message and hands
the template both names; Nemotron's template renders them inside <think> for the
current turn and drops them for earlier ones.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from workbench.chat.events import TurnStats
from workbench.errors import InputError

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
    reasoning: str | None = None  # shown and exported; sent back only within the turn in progress
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_call_id: str | None = None
    name: str | None = None  # the tool's name on role "tool"
    stats: TurnStats | None = None  # on the last assistant message of a turn
    # Why the turn that wrote this failed: on a partial answer (kept, and sent back as it
    # is), or on a user message that got no answer at all.
    failed: str | None = None

    def to_wire(self, *, with_reasoning: bool = False) -> dict[str, Any]:
        """The message as sent to the server (reasoning only when asked: the turn in progress)."""
        wire: dict[str, Any] = {"role": self.role, "content": self.content}
        if with_reasoning and self.role == "assistant" and self.reasoning:
            wire["reasoning"] = self.reasoning
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
        """A saved message, checked field by field: a file or a browser's storage may hold anything."""
        if not isinstance(data, Mapping):
            raise InputError(f"A saved message is a {type(data).__name__}, not an object.",
                                 hint=_SAVED_HINT)
        role = data.get("role")
        if role not in ("system", "user", "assistant", "tool"):
            raise InputError(
                f"A saved message has role {role!r}.",
                hint="Roles are system, user, assistant or tool; was the file exported by the workbench?",
            )
        return cls(
            role=role,
            content=_text(data, "content") or "",
            reasoning=_text(data, "reasoning"),
            tool_calls=[_tool_call(c) for c in _items(data, "tool_calls")],
            tool_call_id=_text(data, "tool_call_id"),
            name=_text(data, "name"),
            stats=_stats(data.get("stats")),
            failed=data.get("failed") if isinstance(data.get("failed"), str) else None,
        )


_SAVED_HINT = "Load a file exported by the workbench, or clear the chat and start again."


def _text(data: Mapping[str, Any], key: str) -> str | None:
    value = data.get(key)
    if value is not None and not isinstance(value, str):
        raise InputError(f"A saved message's {key} is a {type(value).__name__}, not text.", hint=_SAVED_HINT)
    return value


def _items(data: Mapping[str, Any], key: str) -> list[Any]:
    value = data.get(key) or []
    if not isinstance(value, list):
        raise InputError(f"A saved message's {key} is a {type(value).__name__}, not a list.", hint=_SAVED_HINT)
    return value


def _tool_call(data: object) -> ToolCall:
    if not (isinstance(data, Mapping) and all(isinstance(data.get(k), str) for k in ("id", "name", "arguments"))):
        raise InputError("A saved tool call needs text id, name and arguments.", hint=_SAVED_HINT)
    return ToolCall(data["id"], data["name"], data["arguments"])


def _stats(data: object) -> TurnStats | None:
    """Statistics are only shown: ones that do not check out are dropped, not fatal."""
    if not isinstance(data, Mapping):
        return None
    try:
        stats = TurnStats.from_dict(data)
    except TypeError:
        return None

    def shown(name: str, value: object) -> bool:
        if name == "usage_complete":
            return isinstance(value, bool)
        return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)
                                 and math.isfinite(value))

    return stats if all(shown(k, v) for k, v in asdict(stats).items()) else None


CONVERSATION_FORMAT = "workbench-conversation/1"


@dataclass
class Conversation:
    messages: list[Message] = field(default_factory=list)

    def to_wire(self) -> list[dict[str, Any]]:
        """What the server is sent: a user message whose turn failed with no answer at all
        is left out once another user message follows it (no user, user on the wire);
        while it is the last one it is sent, so the turn can be retried."""
        wire = []
        last_user = max((i for i, m in enumerate(self.messages) if m.role == "user"), default=-1)
        for i, m in enumerate(self.messages):
            following = self.messages[i + 1] if i + 1 < len(self.messages) else None
            if m.role == "user" and m.failed and following is not None and following.role == "user":
                continue
            wire.append(m.to_wire(with_reasoning=i > last_user))
        return wire

    def to_dict(self) -> dict[str, Any]:
        return {"format": CONVERSATION_FORMAT, "messages": [m.to_dict() for m in self.messages]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Conversation:
        if not isinstance(data, Mapping):
            raise InputError(f"A saved conversation is a {type(data).__name__}, not an object.",
                                 hint=f"Load a file exported by the workbench (format {CONVERSATION_FORMAT}).")
        if data.get("format") != CONVERSATION_FORMAT:
            raise InputError(
                f"Not a saved conversation (format {data.get('format')!r}).",
                hint=f"Load a file exported by the workbench (format {CONVERSATION_FORMAT}).",
            )
        messages = data.get("messages", [])
        if not isinstance(messages, list):
            raise InputError("A saved conversation's messages are not a list.", hint=_SAVED_HINT)
        return cls([Message.from_dict(m) for m in messages])

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    @classmethod
    def from_json(cls, text: str) -> Conversation:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError(f"The conversation file is not JSON ({exc}).") from exc
        return cls.from_dict(data)


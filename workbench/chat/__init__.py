"""Chat with a vLLM server: typed stream events, the tool loop, the transcript views render.

    events.py        the events a turn produces (reasoning, content, tool calls, notices, stats, errors)
    conversation.py  messages as sent (reasoning kept for display, never sent back)
    options.py       ChatOptions and the per-request hook
    stream.py        one streamed request: SSE chunks -> events
    server_metrics.py  vLLM's per-request `metrics` (queue, prefill, decode, spec-decode acceptance)
    budget.py        the client-side reasoning budget's continuation
    failures.py      SDK and server failures -> an ErrorEvent with a hint
    session.py       ChatSession: the async core, sync wrappers, the tool loop, stop()
    transcript.py    the one fold of events into what a view shows
    tools/           tool schemas, the registry, the built-ins
"""

from workbench.chat.conversation import CONVERSATION_FORMAT, Conversation, Message, ToolCall
from workbench.chat.events import (
    ChatEvent,
    ChatEventKind,
    ContentDelta,
    ErrorEvent,
    Notice,
    NoticeCode,
    ReasoningDelta,
    ToolCallArgumentsDelta,
    ToolCallComplete,
    ToolCallStarted,
    ToolResult,
    TurnFinished,
    TurnResult,
    TurnStats,
    Usage,
)
from workbench.chat.options import ChatOptions, RequestHook, RequestInfo
from workbench.chat.session import ChatSession
from workbench.chat.server_metrics import TurnServerFigures
from workbench.chat.transcript import TurnTranscript, server_stats_rows, stats_rows

__all__ = [
    "CONVERSATION_FORMAT",
    "ChatEvent",
    "ChatEventKind",
    "ChatOptions",
    "ChatSession",
    "ContentDelta",
    "Conversation",
    "ErrorEvent",
    "Message",
    "Notice",
    "NoticeCode",
    "ReasoningDelta",
    "RequestHook",
    "RequestInfo",
    "ToolCall",
    "ToolCallArgumentsDelta",
    "ToolCallComplete",
    "ToolCallStarted",
    "ToolResult",
    "TurnFinished",
    "TurnResult",
    "TurnServerFigures",
    "TurnStats",
    "TurnTranscript",
    "Usage",
    "server_stats_rows",
    "stats_rows",
]

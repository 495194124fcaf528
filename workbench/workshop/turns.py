"""Attendees' turns: each attendee's conversation, run through the room's limits.

`RoomChat.turn(chat, name, text)` is an async generator of TurnTranscripts, paced
by the room (`Room.redraw_interval`): a view redraws each one it receives. It runs
on the app's event loop with one shared HTTP client, so a room of streams holds
no thread and opens no new connection pool per turn.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from workbench.chat import ChatOptions, ChatSession, Conversation, TurnTranscript
from workbench.chat.options import RequestHook
from workbench.chat.tools import builtin_tools
from workbench.errors import RoomError, WorkbenchError
from workbench.workshop.room import Room
from workbench.workshop.room_tools import RoomTools

__all__ = ["AttendeeChat", "AttendeeOptions", "RoomChat", "ServerResolver", "conversation_chars", "public_text"]

# () -> (base URL, model) of the ready server, or (None, why there is none).
ServerResolver = Callable[[], tuple[str | None, str]]
SERVER_TTL_S = 2.0
# An absolute path of two parts or more (the server's error texts name its model's folder).
_PATH_RE = re.compile(r"(?<![\w/.:])(?:/[\w.@+-]+){2,}/?")


def public_text(text: str) -> str:
    """`text` with this machine's paths cut to their last part, for attendees' eyes."""
    return _PATH_RE.sub(lambda m: "…/" + m.group(0).rstrip("/").rsplit("/", 1)[-1], text)


def conversation_chars(conversation: Conversation) -> int:
    """Characters the conversation sends back with the next message (reasoning is not re-sent)."""
    return sum(len(m.content) + sum(len(c.arguments) for c in m.tool_calls) for m in conversation.messages)


@dataclass
class AttendeeOptions:
    """What an attendee may choose for their own turns (the room caps max_tokens)."""

    reasoning: bool = True
    use_tools: bool = False
    max_tokens: int | None = None  # None: the room's cap
    temperature: float | None = None  # None: the recipe's default


@dataclass
class AttendeeChat:
    """One attendee's conversation on one page (or one API client): bound to the
    name that first used it, and refused to any other."""

    name: str | None = None
    options: AttendeeOptions = field(default_factory=AttendeeOptions)
    session: ChatSession | None = None
    last: TurnTranscript | None = None
    seen_broadcast: int = 0
    display: list[dict[str, Any]] = field(default_factory=list)  # what the view showed before this turn
    restored: Conversation | None = None  # the room's copy, until the first turn here

    def bind(self, name: str) -> None:
        if self.name is None:
            self.name = name
        elif self.name != name:
            raise RoomError("This conversation belongs to another attendee.", hint="Reload the page.")

    def conversation(self) -> Conversation:
        if self.session is not None:
            return self.session.conversation
        return self.restored if self.restored is not None else Conversation()


class RoomChat:
    """Runs attendees' turns against the server `resolve_server` names, within the room's limits."""

    def __init__(self, room: Room, resolve_server: ServerResolver, *, sampling: dict[str, Any] | None = None,
                 request_hook: RequestHook | None = None, room_tools: RoomTools | None = None) -> None:
        self.room = room
        self.room_tools = room_tools  # the MCP tools the presenter shared (attendees add none)
        self.resolve_server = resolve_server
        self.sampling = {"temperature": 1.0, "top_p": 0.95, **(sampling or {})}
        self.request_hook = request_hook
        # Made here, not at the first turn: building its TLS context takes tens of ms,
        # which on the event loop would hold up a room sending its first messages at once.
        self._http: Any = self._new_http_client()
        self._http_loop: asyncio.AbstractEventLoop | None = None  # bound at first use
        self._server_cache: tuple[float, tuple[str | None, str]] | None = None
        self._server_lock: asyncio.Lock | None = None

    async def _server(self) -> tuple[str | None, str]:
        """The resolver's answer, at most SERVER_TTL_S old: it may probe the server over
        HTTP, so it runs on a worker thread and not once per turn on the event loop."""
        if self._server_lock is None:
            self._server_lock = asyncio.Lock()
        async with self._server_lock:  # a room sending at once asks once, not once per attendee
            now = time.monotonic()
            if self._server_cache is None or now - self._server_cache[0] > SERVER_TTL_S:
                answer = await asyncio.to_thread(self.resolve_server)
                self._server_cache = (time.monotonic(), answer)
            return self._server_cache[1]

    @staticmethod
    def _new_http_client() -> Any:
        from openai import DefaultAsyncHttpxClient  # 1 s to load: with the first turn, not every command

        return DefaultAsyncHttpxClient()

    def _http_client(self) -> Any:
        """One connection pool for every attendee's stream, on the running loop."""
        loop = asyncio.get_running_loop()
        if self._http_loop is None:
            self._http_loop = loop
        elif self._http_loop is not loop:  # its connections belong to the other loop
            self._http, self._http_loop = self._new_http_client(), loop
        return self._http

    def chat_options(self, chat: AttendeeChat, model: str, max_tokens: int | None) -> ChatOptions:
        """The request options of `chat`'s next turn, within the room's limits (tools only if the presenter allows)."""
        temperature = chat.options.temperature
        return ChatOptions(
            model=model,
            temperature=float(self.sampling["temperature"] if temperature is None else temperature),
            top_p=float(self.sampling["top_p"]),
            max_tokens=max_tokens,
            reasoning=chat.options.reasoning,
            use_tools=chat.options.use_tools and self.room.limits.tools_allowed,
        )

    def _session(self, chat: AttendeeChat, base_url: str, options: ChatOptions) -> ChatSession:
        session = chat.session
        if session is None or session.base_url != base_url.rstrip("/"):
            # A new server (the presenter relaunched): the conversation carries over.
            session = chat.session = ChatSession(base_url, options=options, tools=builtin_tools(),
                                                 conversation=chat.conversation(), request_hook=self.request_hook,
                                                 http_client=self._http_client())
        session.options = options
        if self.room_tools is not None:
            self.room_tools.apply(session)
        return session

    @staticmethod
    def forget(chat: AttendeeChat) -> None:
        """Release what a signed-out attendee's page still holds."""
        chat.session, chat.restored, chat.last, chat.display = None, None, None, []

    def restore(self, chat: AttendeeChat, name: str) -> None:
        """A new page of a known attendee: their last conversation, as the room kept it."""
        chat.bind(name)
        saved = self.room.saved_conversation(name)
        if chat.session is None and chat.restored is None and saved:
            try:
                chat.restored = Conversation.from_dict(saved)
            except WorkbenchError:
                chat.restored = None

    def check_size(self, chat: AttendeeChat, text: str) -> None:
        """Refuse a message, or a conversation, over the room's limits (in characters)."""
        limits = self.room.limits
        if len(text) > limits.max_message_chars:
            raise RoomError(f"Your message is {len(text):,} characters long; the room's limit is "
                            f"{limits.max_message_chars:,}.", hint="Shorten it, or send it in parts.")
        total = conversation_chars(chat.conversation()) + len(text)
        if total > limits.max_history_chars:
            raise RoomError(f"This conversation would be {total:,} characters long with your message; the room's "
                            f"limit is {limits.max_history_chars:,}.", hint="Press Clear to start a new conversation.")

    async def turn(self, chat: AttendeeChat, name: str, text: str, address: str = "") -> AsyncIterator[TurnTranscript]:
        """Run one turn of `name`'s conversation; raises RoomError before it starts when the
        room refuses it (not signed in, too long, a turn already running, no server)."""
        chat.bind(name)
        if not isinstance(text, str) or not text.strip():
            raise RoomError("The message is empty.", hint="Type a message, then send.")
        self.check_size(chat, text)
        base_url, model = await self._server()
        if base_url is None:
            raise RoomError("The model is not being served right now.",
                            hint="Wait for the presenter to start it, then send again.")
        ticket = self.room.begin_turn(name, chat.options.max_tokens, address)
        transcript = TurnTranscript(text)
        error: str | None = None
        try:
            session = self._session(chat, base_url, self.chat_options(chat, model, ticket.max_tokens))
            last = 0.0
            async for event in session.astream(text):
                changed = transcript.apply(event)
                now = time.monotonic()
                if changed or now - last >= self.room.redraw_interval():
                    last = now
                    yield transcript
            transcript.finish()
            part = transcript.error()
            error = part.message if part is not None else None
            chat.last = transcript
            yield transcript
        finally:
            stats = transcript.finished.stats if transcript.finished else None
            self.room.finish_turn(
                ticket, ttft_s=stats.ttft_s if stats else None,
                decode_tok_s=stats.decode_tokens_per_s if stats else None,
                tokens=stats.completion_tokens if stats else None,
                error=error if stats or error else "stopped before the first token")
            if chat.session is not None:
                self.room.save_conversation(name, chat.session.conversation.to_dict())

    def stop(self, chat: AttendeeChat, name: str) -> None:
        """Stop this attendee's own turn (the partial answer is kept)."""
        chat.bind(name)
        if chat.session is not None:
            chat.session.stop()

    def clear(self, chat: AttendeeChat, name: str) -> None:
        chat.bind(name)
        if chat.session is not None:
            chat.session.reset()
        chat.display = []
        chat.last = None
        chat.restored = None
        self.room.save_conversation(name, Conversation().to_dict())

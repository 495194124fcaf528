"""Chat with a vLLM server: typed stream events, the tool loop, stats, history.

`ChatSession.astream(text)` is the one core: an async generator that sends the
conversation through the `openai` SDK (streaming chat completions), turns
vLLM's SSE chunks into typed events, runs the tools the model asks for, sends
their results back as `role: tool` messages and continues until the model
answers or the step limit is reached. `ChatSession.stream(text)` is the same
generator driven from plain synchronous code (CLI, notebooks, Gradio's
threaded handlers); `ChatSession.stop()` may be called from any thread and
closes the HTTP stream, which makes vLLM abort the request.

Views (terminal, Gradio, ipywidgets) only render these events:

    ReasoningDelta        text of the model's reasoning (vLLM's `reasoning` field)
    ContentDelta          text of the answer
    ToolCallStarted       a tool call opened: step, index, id, name
    ToolCallArgumentsDelta  a fragment of its JSON arguments
    ToolCallComplete      the arguments parsed (or the raw text and the parse error)
    ToolResult            what the tool returned (or its error) and how long it took
    Notice                something the user should know (empty answer, step limit, stopped)
    TurnFinished          finish reason, summed usage, the turn's client-side stats
    ErrorEvent            the request failed: message and hint; the conversation is kept

History follows the model card: earlier turns' reasoning is kept for display
and export but never sent back; assistant tool-call messages keep their
`tool_calls`; tool results go back as `role: tool` with `tool_call_id`.
"""

from __future__ import annotations

import asyncio
import copy
import json
import queue
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal, Union

from workbench.errors import WorkbenchError
from workbench.tools import ToolRegistry

__all__ = [
    "ChatOptions",
    "ChatSession",
    "Conversation",
    "Message",
    "ToolCall",
    "Usage",
    "TurnStats",
    "TurnResult",
    "RequestInfo",
    "ReasoningDelta",
    "ContentDelta",
    "ToolCallStarted",
    "ToolCallArgumentsDelta",
    "ToolCallComplete",
    "ToolResult",
    "Notice",
    "TurnFinished",
    "ErrorEvent",
    "ChatEvent",
    "EventKind",
    "NoticeCode",
    "normalize_base_url",
]

EventKind = Literal[
    "reasoning",
    "content",
    "tool_call_started",
    "tool_call_arguments",
    "tool_call_complete",
    "tool_result",
    "notice",
    "turn_finished",
    "error",
]
NoticeCode = Literal[
    "empty_answer",  # finish_reason "length" with no answer: reasoning used the budget
    "answer_truncated",  # finish_reason "length" in the middle of the answer
    "tool_step_limit",  # the model still wanted tools after max_tool_steps rounds
    "reasoning_budget",  # the client-side reasoning budget closed the reasoning
    "stopped",  # stop() was called; the partial answer is kept
]
BudgetMode = Literal["server", "client"]
# The turn's finish reason: vLLM's own ("stop", "length", "tool_calls", ...), or ours.
FinishReason = str


# ---------------------------------------------------------------- events


@dataclass(frozen=True)
class _Event:
    def to_dict(self) -> dict:
        data = asdict(self)
        data["kind"] = self.kind  # type: ignore[attr-defined]
        return data


@dataclass(frozen=True)
class ReasoningDelta(_Event):
    text: str
    step: int = 0
    kind: Literal["reasoning"] = "reasoning"


@dataclass(frozen=True)
class ContentDelta(_Event):
    text: str
    step: int = 0
    kind: Literal["content"] = "content"


@dataclass(frozen=True)
class ToolCallStarted(_Event):
    step: int
    index: int
    id: str
    name: str
    kind: Literal["tool_call_started"] = "tool_call_started"


@dataclass(frozen=True)
class ToolCallArgumentsDelta(_Event):
    step: int
    index: int
    text: str
    kind: Literal["tool_call_arguments"] = "tool_call_arguments"


@dataclass(frozen=True)
class ToolCallComplete(_Event):
    step: int
    index: int
    id: str
    name: str
    arguments: dict | None  # parsed JSON object, or None when it did not parse
    raw_arguments: str
    parse_error: str | None = None
    kind: Literal["tool_call_complete"] = "tool_call_complete"


@dataclass(frozen=True)
class ToolResult(_Event):
    step: int
    call_id: str
    name: str
    arguments: dict
    result: Any = None
    error: str | None = None
    seconds: float = 0.0
    content: str = ""  # exactly what went back to the model as the tool message
    kind: Literal["tool_result"] = "tool_result"


@dataclass(frozen=True)
class Notice(_Event):
    code: NoticeCode
    message: str
    hint: str | None = None
    kind: Literal["notice"] = "notice"


@dataclass(frozen=True)
class Usage:
    """Token counts from the server's `usage` (summed over the turn's requests)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    reasoning_tokens: int | None = None  # usage.completion_tokens_details.reasoning_tokens

    def __add__(self, other: Usage) -> Usage:
        reasoning = (
            None
            if self.reasoning_tokens is None and other.reasoning_tokens is None
            else (self.reasoning_tokens or 0) + (other.reasoning_tokens or 0)
        )
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.total_tokens + other.total_tokens,
            reasoning,
        )

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Usage:
        return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})


@dataclass(frozen=True)
class TurnStats:
    """What the client measured for one turn (monotonic clock, seconds).

    ttft_s: turn start -> first streamed token (reasoning, content or tool call).
    reasoning_s: first reasoning token -> first answer/tool token (or last reasoning token).
    decode_tokens_per_s: (completion tokens - 1) / (last token - first token), per request, summed.
    tool_s: time spent running tools. total_s: the whole turn, tools included.
    """

    ttft_s: float | None = None
    reasoning_s: float = 0.0
    total_s: float = 0.0
    tool_s: float = 0.0
    decode_tokens_per_s: float | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: int | None = None
    answer_tokens: int | None = None
    requests: int = 0
    tool_calls: int = 0
    # False when a request ended without a usage chunk (stopped): its completion
    # tokens are then counted from the streamed deltas, which vLLM sends one token each.
    usage_complete: bool = True

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TurnStats:
        return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})


@dataclass(frozen=True)
class TurnFinished(_Event):
    finish_reason: FinishReason | None
    usage: Usage
    stats: TurnStats
    kind: Literal["turn_finished"] = "turn_finished"


@dataclass(frozen=True)
class ErrorEvent(_Event):
    message: str
    hint: str | None = None
    status_code: int | None = None
    kind: Literal["error"] = "error"


ChatEvent = Union[
    ReasoningDelta,
    ContentDelta,
    ToolCallStarted,
    ToolCallArgumentsDelta,
    ToolCallComplete,
    ToolResult,
    Notice,
    TurnFinished,
    ErrorEvent,
]


# ---------------------------------------------------------------- conversation


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: str  # the JSON text, as the model wrote it

    def to_wire(self) -> dict:
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }

    def to_dict(self) -> dict:
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

    def to_wire(self) -> dict:
        """The message as sent to the server (reasoning dropped, as the model card asks)."""
        wire: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            wire["tool_calls"] = [call.to_wire() for call in self.tool_calls]
        if self.role == "tool":
            wire["tool_call_id"] = self.tool_call_id
            if self.name:
                wire["name"] = self.name
        return wire

    def to_dict(self) -> dict:
        return {
            "role": self.role,
            "content": self.content,
            "reasoning": self.reasoning,
            "tool_calls": [call.to_dict() for call in self.tool_calls],
            "tool_call_id": self.tool_call_id,
            "name": self.name,
            "stats": self.stats.to_dict() if self.stats else None,
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
        )


CONVERSATION_FORMAT = "workbench-conversation/1"


@dataclass
class Conversation:
    messages: list[Message] = field(default_factory=list)

    def to_wire(self) -> list[dict]:
        return [m.to_wire() for m in self.messages]

    def to_dict(self) -> dict:
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


# ---------------------------------------------------------------- options


@dataclass
class ChatOptions:
    """Sampling and turn settings; defaults are the Nemotron model card's."""

    model: str | None = None  # None: the server's first model from /v1/models
    temperature: float = 1.0
    top_p: float = 0.95
    max_tokens: int | None = 4096
    reasoning: bool = True  # chat_template_kwargs.enable_thinking
    reasoning_budget: int | None = None  # tokens of reasoning; None: unlimited
    # "server": vLLM's `thinking_token_budget` (needs --reasoning-parser on the server).
    # "client": the model card's fallback: stop at the budget, close with </think>, continue.
    reasoning_budget_mode: BudgetMode = "server"
    system_prompt: str | None = None
    use_tools: bool = True  # offer the session's tools (when it has any)
    max_tool_steps: int = 5  # rounds of tool calls per turn
    include_usage: bool = True  # stream_options.include_usage
    extra_body: dict = field(default_factory=dict)  # merged into every request

    def __post_init__(self) -> None:
        problems = []
        if not 0 <= self.temperature <= 2:
            problems.append(f"temperature {self.temperature} must be between 0 and 2")
        if not 0 < self.top_p <= 1:
            problems.append(f"top_p {self.top_p} must be in (0, 1]")
        if self.max_tokens is not None and self.max_tokens < 1:
            problems.append(f"max_tokens {self.max_tokens} must be at least 1")
        if self.reasoning_budget is not None and self.reasoning_budget < 1:
            problems.append(f"reasoning_budget {self.reasoning_budget} must be at least 1")
        if self.reasoning_budget_mode not in ("server", "client"):
            problems.append(f"reasoning_budget_mode {self.reasoning_budget_mode!r} must be "
                            "'server' or 'client'")
        if self.max_tool_steps < 0:
            problems.append(f"max_tool_steps {self.max_tool_steps} must be 0 or more")
        if problems:
            raise WorkbenchError("Invalid chat options: " + "; ".join(problems) + ".",
                                 hint="Change the values named above.")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ChatOptions:
        return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})


@dataclass(frozen=True)
class RequestInfo:
    """Passed to a session's `request_hook` before each request of a turn."""

    turn: int  # 0 for the session's first turn
    step: int  # 0, then one more after each round of tool calls
    kind: Literal["chat", "continuation"]  # continuation: the client-side budget's second request
    messages: list[dict]


RequestHook = Callable[[RequestInfo], Mapping[str, Any] | None]


@dataclass
class TurnResult:
    """A finished turn, for callers that do not render events as they come."""

    events: list[ChatEvent]
    content: str
    reasoning: str
    finish_reason: FinishReason | None
    stats: TurnStats | None
    error: ErrorEvent | None

    def notices(self) -> list[Notice]:
        return [e for e in self.events if isinstance(e, Notice)]


def normalize_base_url(url: str) -> str:
    """'http://host:port' from 'host:port', 'http://host:port/' or 'http://host:port/v1'."""
    text = url.strip().rstrip("/")
    if not text:
        raise WorkbenchError("The server URL is empty.", hint="Pass e.g. --url http://127.0.0.1:8000")
    if "://" not in text:
        text = "http://" + text
    if text.endswith("/v1"):
        text = text[: -len("/v1")]
    return text


def _deep_merge(base: dict, extra: Mapping[str, Any]) -> dict:
    merged = copy.deepcopy(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), dict):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


# ---------------------------------------------------------------- one request


@dataclass
class _PendingCall:
    index: int
    id: str = ""
    name: str = ""
    arguments: str = ""
    announced: bool = False


@dataclass
class _Step:
    """What one streamed request produced, and when."""

    reasoning: list[str] = field(default_factory=list)
    content: list[str] = field(default_factory=list)
    calls: dict[int, _PendingCall] = field(default_factory=dict)
    finish_reason: str | None = None
    usage: Usage = field(default_factory=Usage)
    first_token_t: float | None = None
    last_token_t: float | None = None
    first_reasoning_t: float | None = None
    reasoning_end_t: float | None = None
    stopped: bool = False
    deltas: int = 0  # streamed chunks that carried a token
    continuation: _Step | None = None  # the client-side budget's second request

    def mark_token(self, now: float, is_reasoning: bool) -> None:
        self.deltas += 1
        if self.first_token_t is None:
            self.first_token_t = now
        self.last_token_t = now
        if is_reasoning:
            if self.first_reasoning_t is None:
                self.first_reasoning_t = now
            self.reasoning_end_t = now
        elif self.first_reasoning_t is not None and self.reasoning_end_t is not None:
            # reasoning ends at the first non-reasoning token
            if not self.content and not self.calls:
                self.reasoning_end_t = now

    @property
    def reasoning_s(self) -> float:
        if self.first_reasoning_t is None or self.reasoning_end_t is None:
            return 0.0
        return self.reasoning_end_t - self.first_reasoning_t


def _usage_from(raw: Any) -> Usage:
    if raw is None:
        return Usage()
    details = getattr(raw, "completion_tokens_details", None)
    reasoning = getattr(details, "reasoning_tokens", None) if details is not None else None
    return Usage(
        prompt_tokens=raw.prompt_tokens or 0,
        completion_tokens=raw.completion_tokens or 0,
        total_tokens=raw.total_tokens or 0,
        reasoning_tokens=reasoning,
    )


def _delta_reasoning(delta: Any) -> str | None:
    # vLLM >= 0.16 sends `reasoning`; older servers and some proxies `reasoning_content`.
    text = getattr(delta, "reasoning", None)
    if text is None:
        text = getattr(delta, "reasoning_content", None)
    if text is None and getattr(delta, "model_extra", None):
        text = delta.model_extra.get("reasoning") or delta.model_extra.get("reasoning_content")
    return text


# ---------------------------------------------------------------- the session


class ChatSession:
    """A conversation with one vLLM server, and the tools it may call.

    base_url: the server root ('http://127.0.0.1:8000'; a trailing /v1 is accepted).
    tools: the registry offered to the model (None: no tools).
    request_hook: called before every request with a RequestInfo; what it returns
        is merged into that request's body (tests and demos force each step this way).
    http_client: an httpx.AsyncClient for the openai SDK (e.g. a replay transport).
    Each session owns its state; give every UI user their own session.
    """

    def __init__(
        self,
        base_url: str,
        *,
        options: ChatOptions | None = None,
        tools: ToolRegistry | None = None,
        conversation: Conversation | None = None,
        api_key: str | None = None,
        request_hook: RequestHook | None = None,
        http_client: Any = None,
        timeout_s: float = 600.0,
    ) -> None:
        self.base_url = normalize_base_url(base_url)
        self.options = options or ChatOptions()
        self.tools = tools
        self.conversation = conversation or Conversation()
        self.api_key = api_key or "EMPTY"
        self.request_hook = request_hook
        self.http_client = http_client
        self.timeout_s = timeout_s
        self.last_request_body: dict | None = None  # what the last request sent, for display
        self._turns = 0
        self._stop_flag = threading.Event()
        self._stop_lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_event: asyncio.Event | None = None

    # -- public API

    def stop(self) -> None:
        """Stop the turn in progress (safe from any thread); its partial answer is kept."""
        self._stop_flag.set()
        with self._stop_lock:
            loop, event = self._loop, self._stop_event
        if loop is not None and event is not None and not loop.is_closed():
            loop.call_soon_threadsafe(event.set)

    def reset(self) -> None:
        """Forget the conversation (options and tools stay)."""
        self.conversation = Conversation()

    async def astream(self, user_text: str | None) -> AsyncIterator[ChatEvent]:
        """Send `user_text` (None: re-run from the conversation as it is, e.g. after an error)."""
        self._stop_flag.clear()
        with self._stop_lock:
            self._loop = asyncio.get_running_loop()
            self._stop_event = asyncio.Event()
        client = self._make_client()
        try:
            async for event in self._turn(client, user_text):
                yield event
        finally:
            with self._stop_lock:
                self._loop = self._stop_event = None
            if self.http_client is None:
                await client.close()
            self._turns += 1

    def stream(self, user_text: str | None) -> Iterator[ChatEvent]:
        """`astream` for synchronous callers: runs it on a private event loop.

        Where this thread already runs a loop (a Jupyter kernel), the private
        loop cannot run here, so it runs on a worker thread instead."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            yield from self._stream_here(user_text)
            return
        yield from self._stream_on_worker(user_text)

    def _stream_on_worker(self, user_text: str | None) -> Iterator[ChatEvent]:
        events: queue.Queue = queue.Queue()
        done = object()

        def pump() -> None:
            try:
                for event in self._stream_here(user_text):
                    events.put(event)
            except BaseException as exc:  # handed to the caller's thread below
                events.put(exc)
            finally:
                events.put(done)

        threading.Thread(target=pump, name="chat-stream", daemon=True).start()
        while (item := events.get()) is not done:
            if isinstance(item, BaseException):
                raise item
            yield item

    def _stream_here(self, user_text: str | None) -> Iterator[ChatEvent]:
        loop = asyncio.new_event_loop()
        agen = self.astream(user_text)
        try:
            while True:
                try:
                    event = loop.run_until_complete(agen.__anext__())
                except StopAsyncIteration:
                    break
                yield event
        finally:
            loop.run_until_complete(agen.aclose())
            loop.close()

    def send(self, user_text: str | None) -> TurnResult:
        """Run a whole turn and return what it produced."""
        events = list(self.stream(user_text))
        return _collect(events)

    async def asend(self, user_text: str | None) -> TurnResult:
        return _collect([event async for event in self.astream(user_text)])

    # -- internals

    def _make_client(self):
        from openai import AsyncOpenAI

        return AsyncOpenAI(
            base_url=f"{self.base_url}/v1",
            api_key=self.api_key,
            http_client=self.http_client,
            timeout=self.timeout_s,
            max_retries=0,  # a retried stream would repeat tokens; the user retries instead
        )

    async def _resolve_model(self, client) -> str:
        if self.options.model:
            return self.options.model
        page = await client.models.list()
        models = [m.id for m in page.data]
        if not models:
            raise WorkbenchError(f"The server at {self.base_url} serves no model.",
                                 hint="Check the server's log; pass --model if it needs one.")
        self.options.model = models[0]
        return models[0]

    def _offered_tools(self) -> list[dict]:
        if self.tools is None or not self.options.use_tools:
            return []
        return self.tools.schemas()

    def _request_body(self, model: str, messages: list[dict], tools: list[dict], step: int,
                      max_tokens: int | None) -> dict:
        opts = self.options
        template_kwargs: dict[str, Any] = {"enable_thinking": opts.reasoning}
        if tools:
            template_kwargs["force_nonempty_content"] = True  # as the Nemotron cookbook does
        body: dict[str, Any] = {
            "model": model,
            "messages": messages,
            "stream": True,
            "temperature": opts.temperature,
            "top_p": opts.top_p,
            "chat_template_kwargs": template_kwargs,
        }
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        if opts.include_usage:
            body["stream_options"] = {"include_usage": True}
        if tools:
            body["tools"] = tools
            body["tool_choice"] = "auto"
        if opts.reasoning and opts.reasoning_budget and opts.reasoning_budget_mode == "server":
            body["thinking_token_budget"] = opts.reasoning_budget
        body = _deep_merge(body, opts.extra_body)
        if self.request_hook:
            extra = self.request_hook(RequestInfo(self._turns, step, "chat", messages))
            if extra:
                body = _deep_merge(body, extra)
        return body

    def _wire_messages(self) -> list[dict]:
        messages = []
        if self.options.system_prompt:
            messages.append({"role": "system", "content": self.options.system_prompt})
        messages.extend(self.conversation.to_wire())
        return messages

    async def _turn(self, client, user_text: str | None) -> AsyncIterator[ChatEvent]:
        started = time.monotonic()
        opts = self.options
        if user_text is not None:
            self.conversation.messages.append(Message("user", user_text))
        usage = Usage()
        ttft: float | None = None
        reasoning_s = tool_s = 0.0
        decode_tokens = 0
        decode_s = 0.0
        estimated_tokens = 0  # from requests that sent no usage
        usage_complete = True
        requests = tool_calls_run = 0
        finish_reason: str | None = None
        answer_parts: list[str] = []
        reasoning_parts: list[str] = []
        last_step = _Step()
        last_max_tokens = opts.max_tokens

        def stats_now() -> TurnStats:
            reasoning_tokens = usage.reasoning_tokens
            if reasoning_tokens is None and not reasoning_parts:
                reasoning_tokens = 0
            return TurnStats(
                ttft_s=ttft,
                reasoning_s=reasoning_s,
                total_s=time.monotonic() - started,
                tool_s=tool_s,
                decode_tokens_per_s=decode_tokens / decode_s if decode_s > 0 else None,
                prompt_tokens=usage.prompt_tokens,
                completion_tokens=usage.completion_tokens + estimated_tokens,
                reasoning_tokens=reasoning_tokens,
                answer_tokens=(usage.completion_tokens + estimated_tokens - reasoning_tokens
                               if reasoning_tokens is not None and usage_complete else None),
                requests=requests,
                tool_calls=tool_calls_run,
                usage_complete=usage_complete,
            )

        def account(step: _Step) -> None:
            nonlocal usage, ttft, reasoning_s, decode_tokens, decode_s, requests
            nonlocal estimated_tokens, usage_complete
            requests += 1
            usage = usage + step.usage
            completion = step.usage.completion_tokens
            if step.usage == Usage() and step.deltas:
                usage_complete = False
                estimated_tokens += step.deltas
                completion = step.deltas
            if ttft is None and step.first_token_t is not None:
                ttft = step.first_token_t - started
            reasoning_s += step.reasoning_s
            if step.first_token_t is not None and step.last_token_t is not None:
                window = step.last_token_t - step.first_token_t
                if window > 0 and completion > 1:
                    decode_tokens += completion - 1
                    decode_s += window

        try:
            model = await self._resolve_model(client)
            tools = self._offered_tools()
            step_number = 0
            while True:
                messages = self._wire_messages()
                budget = opts.reasoning_budget if (
                    opts.reasoning and opts.reasoning_budget_mode == "client") else None
                max_tokens = opts.max_tokens if budget is None else (
                    min(budget, opts.max_tokens) if opts.max_tokens else budget)
                last_max_tokens = max_tokens
                body = self._request_body(model, messages, tools, step_number, max_tokens)
                step = _Step()
                async for event in self._stream_chat(client, body, step, step_number):
                    yield event
                account(step)
                last_step = step
                finish_reason = "stopped" if step.stopped else step.finish_reason
                reasoning_parts.extend(step.reasoning)
                answer_parts.extend(step.content)

                if step.stopped:
                    self._record_assistant(step, keep_calls=False)
                    yield Notice("stopped", "Stopped. The partial answer is kept in the conversation.")
                    break

                if (budget is not None and step.finish_reason == "length" and not step.calls
                        and (opts.max_tokens is None or budget < opts.max_tokens)):
                    async for event in self._continue_after_budget(
                            client, model, messages, tools, step, step_number, budget):
                        yield event
                    cont = step.continuation
                    account(cont)
                    answer_parts.extend(cont.content)
                    finish_reason = "stopped" if cont.stopped else cont.finish_reason
                    last_step = cont
                    last_max_tokens = (opts.max_tokens - step.usage.completion_tokens
                                       if opts.max_tokens else None)
                    step.content.extend(cont.content)
                    self._record_assistant(step, keep_calls=False)
                    if cont.stopped:
                        yield Notice("stopped", "Stopped. The partial answer is kept in the conversation.")
                    break

                if not step.calls:
                    self._record_assistant(step, keep_calls=False)
                    break

                calls = [step.calls[i] for i in sorted(step.calls)]
                self._record_assistant(step, keep_calls=True)
                if step_number >= opts.max_tool_steps or not tools:
                    reason = (f"the limit of {opts.max_tool_steps} tool round(s) per turn was reached"
                              if tools else "no tools are enabled in this session")
                    for call in calls:
                        self._record_tool_message(call, json.dumps(
                            {"error": f"Not run: {reason}."}))
                    yield Notice(
                        "tool_step_limit",
                        f"The model asked for {', '.join(c.name for c in calls)} again, but "
                        f"{reason}; the calls were not run and the turn ends here.",
                        hint="Raise max_tool_steps in the options, or ask a narrower question."
                        if tools else "Enable tools in the options.",
                    )
                    break
                for call in calls:
                    event = await self._run_tool(call, step_number)
                    tool_s += event.seconds
                    tool_calls_run += 1
                    yield event
                    if self._stop_flag.is_set():
                        break
                if self._stop_flag.is_set():
                    finish_reason = "stopped"
                    yield Notice("stopped", "Stopped after running the tools.")
                    break
                step_number += 1

            content = "".join(last_step.content)
            if finish_reason == "length" and not last_step.calls:
                yield self._length_notice(content, last_step, last_max_tokens)
            stats = stats_now()
            self._attach_stats(stats)
            yield TurnFinished(finish_reason, usage, stats)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # translated once, here; the conversation is kept
            yield _error_event(exc, self.base_url)

    def _length_notice(self, content: str, step: _Step, max_tokens: int | None) -> Notice:
        used = step.usage.completion_tokens or None
        limit = max_tokens or used
        suggestion = max(2 * (limit or 0), (limit or 0) + 1024)
        if not content.strip():
            what = ("reasoning used all" if step.reasoning else "the model used all")
            return Notice(
                "empty_answer",
                f"The answer is empty: {what} {limit} tokens of max_tokens before an answer "
                "was written (finish_reason \"length\").",
                hint=f"Raise max_tokens to {suggestion} or more, set a reasoning budget, "
                "or turn reasoning off.",
            )
        return Notice(
            "answer_truncated",
            f"The answer was cut off at max_tokens={limit} (finish_reason \"length\").",
            hint=f"Raise max_tokens to {suggestion} or more.",
        )

    def _record_assistant(self, step: _Step, *, keep_calls: bool) -> None:
        calls = ([ToolCall(c.id, c.name, c.arguments or "{}") for i, c in sorted(step.calls.items())]
                 if keep_calls else [])
        content = "".join(step.content)
        reasoning = "".join(step.reasoning) or None
        if not content and not calls and not reasoning:
            return
        self.conversation.messages.append(
            Message("assistant", content=content, reasoning=reasoning, tool_calls=calls))

    def _record_tool_message(self, call: _PendingCall, content: str) -> None:
        self.conversation.messages.append(
            Message("tool", content=content, tool_call_id=call.id, name=call.name))

    def _attach_stats(self, stats: TurnStats) -> None:
        for message in reversed(self.conversation.messages):
            if message.role == "user":
                return
            if message.role == "assistant":
                message.stats = stats
                return

    async def _run_tool(self, call: _PendingCall, step: int) -> ToolResult:
        try:
            arguments = json.loads(call.arguments) if call.arguments.strip() else {}
        except json.JSONDecodeError as exc:
            outcome_error = f"The arguments are not valid JSON ({exc.msg}): {call.arguments!r}"
            content = json.dumps({"error": outcome_error})
            self._record_tool_message(call, content)
            return ToolResult(step, call.id, call.name, {}, error=outcome_error, content=content)
        assert self.tools is not None
        outcome = await self.tools.arun(call.name, arguments)
        content = outcome.content_for_model()
        self._record_tool_message(call, content)
        return ToolResult(step, call.id, call.name, outcome.arguments, outcome.result,
                          outcome.error, outcome.seconds, content)

    async def _next_or_stop(self, iterator, stop_wait: asyncio.Future):
        """The next chunk, or None when stop() was called first (the read is cancelled)."""
        next_chunk = asyncio.ensure_future(iterator.__anext__())
        try:
            done, _ = await asyncio.wait({next_chunk, stop_wait},
                                         return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:  # our consumer was cancelled (e.g. Gradio's Stop)
            await _cancel_quietly(next_chunk)
            raise
        if next_chunk in done:
            return next_chunk.result()  # raises StopAsyncIteration at the end
        await _cancel_quietly(next_chunk)
        return None

    async def _stream_chat(self, client, body: dict, step: _Step,
                           step_number: int) -> AsyncIterator[ChatEvent]:
        self.last_request_body = body
        standard = {"model", "messages", "stream", "temperature", "top_p", "max_tokens",
                    "stream_options", "tools", "tool_choice"}
        stream = await client.chat.completions.create(
            **{k: v for k, v in body.items() if k in standard},
            extra_body={k: v for k, v in body.items() if k not in standard},
        )
        async for event in self._read_stream(stream, step, step_number, self._chat_chunk_events):
            yield event
        for index in sorted(step.calls):
            yield _complete_call(step.calls[index], step_number)

    async def _read_stream(self, stream, step: _Step, step_number: int, to_events):
        assert self._stop_event is not None
        stop_wait = asyncio.ensure_future(self._stop_event.wait())
        iterator = stream.__aiter__()
        try:
            while True:
                if self._stop_flag.is_set():
                    step.stopped = True
                    break
                try:
                    chunk = await self._next_or_stop(iterator, stop_wait)
                except StopAsyncIteration:
                    break
                if chunk is None:
                    step.stopped = True
                    break
                for event in to_events(chunk, step, step_number):
                    yield event
        finally:
            stop_wait.cancel()
            await stream.close()  # closing the HTTP stream makes vLLM abort the request

    @staticmethod
    def _chat_chunk_events(chunk, step: _Step, step_number: int) -> list[ChatEvent]:
        events: list[ChatEvent] = []
        if getattr(chunk, "usage", None) is not None:
            step.usage = _usage_from(chunk.usage)
        for choice in chunk.choices or []:
            delta = choice.delta
            now = time.monotonic()
            reasoning = _delta_reasoning(delta) if delta is not None else None
            if reasoning:
                step.mark_token(now, True)
                step.reasoning.append(reasoning)
                events.append(ReasoningDelta(reasoning, step_number))
            if delta is not None and delta.content:
                step.mark_token(now, False)
                step.content.append(delta.content)
                events.append(ContentDelta(delta.content, step_number))
            for tc in (delta.tool_calls or []) if delta is not None else []:
                step.mark_token(now, False)
                index = tc.index if tc.index is not None else len(step.calls)
                call = step.calls.setdefault(index, _PendingCall(index))
                if tc.id:
                    call.id = tc.id
                if tc.function is not None and tc.function.name:
                    call.name += tc.function.name
                if not call.announced and call.name:
                    call.announced = True
                    events.append(ToolCallStarted(step_number, index, call.id, call.name))
                if tc.function is not None and tc.function.arguments:
                    call.arguments += tc.function.arguments
                    events.append(ToolCallArgumentsDelta(step_number, index, tc.function.arguments))
            if choice.finish_reason:
                step.finish_reason = choice.finish_reason
        return events

    async def _continue_after_budget(self, client, model: str, messages: list[dict],
                                     tools: list[dict], step: _Step, step_number: int,
                                     budget: int) -> AsyncIterator[ChatEvent]:
        """The model card's client-side reasoning budget, second half.

        The first request stopped at `budget` tokens with the reasoning still
        open. Render the same prompt with the server's chat template
        (POST /tokenize), append the reasoning so far and "</think>" (or the
        answer so far, if the answer had begun), and let the completions API
        continue from there. The continuation is plain text: the server's tool
        parser does not run on it, so tool calls are not offered in it.
        """
        reasoning = "".join(step.reasoning)
        answer_so_far = "".join(step.content)
        yield Notice(
            "reasoning_budget",
            f"Reasoning reached its budget of {budget} tokens; closing it with </think> "
            "and continuing to the answer.",
        )
        opts = self.options
        template_kwargs: dict[str, Any] = {"enable_thinking": True}
        if tools:
            template_kwargs["force_nonempty_content"] = True
        tokenized = await client.post(
            f"{self.base_url}/tokenize", cast_to=object,
            body={"model": model, "messages": messages, "add_generation_prompt": True,
                  "chat_template_kwargs": template_kwargs, **({"tools": tools} if tools else {})})
        # Nemotron's template opens "<think>\n"; the model card closes reasoning with "\n</think>\n\n".
        tail = reasoning.rstrip("\n") + "\n</think>\n\n" + answer_so_far
        tail_ids = await client.post(
            f"{self.base_url}/tokenize", cast_to=object,
            body={"model": model, "prompt": tail, "add_special_tokens": False})
        prompt_ids = list(tokenized["tokens"]) + list(tail_ids["tokens"])
        remaining = (opts.max_tokens - step.usage.completion_tokens) if opts.max_tokens else None
        body: dict[str, Any] = {
            "model": model, "prompt": prompt_ids, "stream": True,
            "temperature": opts.temperature, "top_p": opts.top_p,
        }
        if remaining is not None:
            body["max_tokens"] = max(remaining, 1)
        if opts.include_usage:
            body["stream_options"] = {"include_usage": True}
        body = _deep_merge(body, opts.extra_body)
        if self.request_hook:
            extra = self.request_hook(RequestInfo(self._turns, step_number, "continuation", messages))
            if extra:
                body = _deep_merge(body, extra)
        self.last_request_body = body
        standard = {"model", "prompt", "stream", "temperature", "top_p", "max_tokens",
                    "stream_options"}
        stream = await client.completions.create(
            **{k: v for k, v in body.items() if k in standard},
            extra_body={k: v for k, v in body.items() if k not in standard},
        )
        cont = step.continuation = _Step()
        async for event in self._read_stream(stream, cont, step_number, self._completion_chunk_events):
            yield event

    @staticmethod
    def _completion_chunk_events(chunk, step: _Step, step_number: int) -> list[ChatEvent]:
        events: list[ChatEvent] = []
        if getattr(chunk, "usage", None) is not None:
            step.usage = _usage_from(chunk.usage)
        for choice in chunk.choices or []:
            if choice.text:
                step.mark_token(time.monotonic(), False)
                step.content.append(choice.text)
                events.append(ContentDelta(choice.text, step_number))
            if choice.finish_reason:
                step.finish_reason = choice.finish_reason
        return events


async def _cancel_quietly(task: asyncio.Future) -> None:
    """Cancel a pending chunk read and wait for it, so no orphan task reports an error."""
    task.cancel()
    try:
        await task
    except BaseException:  # the read's own CancelledError or the closed stream's error
        pass


def _complete_call(call: _PendingCall, step_number: int) -> ToolCallComplete:
    raw = call.arguments
    try:
        parsed = json.loads(raw) if raw.strip() else {}
    except json.JSONDecodeError as exc:
        return ToolCallComplete(step_number, call.index, call.id, call.name, None, raw,
                                f"{exc.msg} at character {exc.pos}")
    if not isinstance(parsed, dict):
        return ToolCallComplete(step_number, call.index, call.id, call.name, None, raw,
                                f"expected a JSON object, got {type(parsed).__name__}")
    return ToolCallComplete(step_number, call.index, call.id, call.name, parsed, raw)


def _collect(events: list[ChatEvent]) -> TurnResult:
    finished = next((e for e in reversed(events) if isinstance(e, TurnFinished)), None)
    error = next((e for e in reversed(events) if isinstance(e, ErrorEvent)), None)
    return TurnResult(
        events=events,
        content="".join(e.text for e in events if isinstance(e, ContentDelta)),
        reasoning="".join(e.text for e in events if isinstance(e, ReasoningDelta)),
        finish_reason=finished.finish_reason if finished else None,
        stats=finished.stats if finished else None,
        error=error,
    )


def _error_event(exc: Exception, base_url: str) -> ErrorEvent:
    """One place that turns SDK and server failures into a message and a hint."""
    import openai

    if isinstance(exc, WorkbenchError):
        return ErrorEvent(exc.message, exc.hint)
    if isinstance(exc, openai.APITimeoutError):
        return ErrorEvent(f"The server at {base_url} did not answer in time.",
                          "It may still be loading or overloaded; check its log, then retry.")
    if isinstance(exc, openai.APIConnectionError):
        return ErrorEvent(f"Cannot reach the server at {base_url} ({exc.__cause__ or exc}).",
                          "Is it running? Start it with `python -m workbench serve`, or check the URL.")
    if isinstance(exc, openai.APIStatusError):
        detail = _server_message(exc)
        status = exc.status_code
        hint = "Check the request options; the server's log has details."
        lowered = detail.lower()
        if "thinking_token_budget" in lowered or "reasoning_config" in lowered:
            hint = ("This server has no reasoning parser, so it cannot enforce a reasoning "
                    "budget. Set reasoning_budget_mode='client', or restart it with --reasoning-parser.")
        elif "tool" in lowered and ("enable-auto-tool-choice" in lowered or "tool-call-parser" in lowered):
            hint = ("This server was started without tool calling. Turn tools off, or restart "
                    "it with --enable-auto-tool-choice --tool-call-parser <parser>.")
        elif status == 404:
            hint = "The model name may be wrong: GET /v1/models lists what the server serves."
        elif status == 401:
            hint = "The server wants an API key: pass --api-key (or set it in the options)."
        elif "maximum context length" in lowered or "max_tokens" in lowered:
            hint = "Lower max_tokens, or start a new conversation to shorten the prompt."
        return ErrorEvent(f"The server refused the request ({status}): {detail}", hint, status)
    return ErrorEvent(f"The turn failed: {type(exc).__name__}: {exc}",
                      "The conversation so far is kept; retry, or check the server's log.")


def _server_message(exc: Any) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, Mapping):
        error = body.get("error", body)
        if isinstance(error, Mapping) and error.get("message"):
            return str(error["message"])
        if body.get("message"):
            return str(body["message"])
    return str(getattr(exc, "message", exc))

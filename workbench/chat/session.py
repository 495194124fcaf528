"""`ChatSession`: a conversation with one vLLM server, and the tools it may call.

`ChatSession.astream(text)` is the one core: an async generator that sends the
conversation through the `openai` SDK (streaming chat completions), turns
vLLM's SSE chunks into typed events (workbench.chat.events), runs the tools the
model asks for, sends their results back as `role: tool` messages and continues
until the model answers or the step limit is reached. `stream(text)` is the
same generator driven from plain synchronous code (CLI, notebooks, Gradio's
threaded handlers); `stop()` may be called from any thread and closes the HTTP
stream, which makes vLLM abort the request.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator
from typing import Any

from workbench.chat.approval import ToolApprovals
from workbench.chat.budget import continuation_body, continuation_prompt_ids
from workbench.chat.conversation import Conversation, Message, ToolCall
from workbench.chat.events import (
    ChatEvent,
    Notice,
    ToolResult,
    TurnFinished,
    TurnResult,
    TurnStats,
    Usage,
    collect,
)
from workbench.chat.failures import error_event
from workbench.chat.options import ChatOptions, RequestHook, RequestInfo, deep_merge
from workbench.chat.stream import PendingCall, Step, chat_chunk_events, complete_call, completion_chunk_events
from workbench.chat.server_metrics import TurnServerFigures
from workbench.chat.tool_runner import ToolRunner
from workbench.chat.tools import ToolRegistry
from workbench.errors import LaunchError
from workbench.server.probe import aserved_models
from workbench.syncbridge import iterate_sync
from workbench.urls import normalize_base_url

__all__ = ["ChatSession"]

_CHAT_FIELDS = {"model", "messages", "stream", "temperature", "top_p", "max_tokens", "stream_options", "tools",
                "tool_choice"}
_COMPLETION_FIELDS = {"model", "prompt", "stream", "temperature", "top_p", "max_tokens", "stream_options"}


class _Tally:
    """What a turn's requests add up to: usage, first token, decode window, tools."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.usage = Usage()
        self.ttft: float | None = None
        self.reasoning_s = 0.0
        self.tool_s = 0.0
        self.decode_tokens = 0
        self.decode_s = 0.0
        self.estimated_tokens = 0  # from requests that sent no usage
        self.usage_complete = True
        self.requests = 0
        self.tool_calls = 0
        self.saw_reasoning = False
        self.server: TurnServerFigures | None = None  # only when a request reported vLLM's metrics

    def account(self, step: Step) -> None:
        self.requests += 1
        if step.server_figures is not None:
            self.server = (self.server or TurnServerFigures()).add(step.server_figures)
        self.usage = self.usage + step.usage
        self.saw_reasoning = self.saw_reasoning or bool(step.reasoning)
        completion = step.usage.completion_tokens
        if step.usage == Usage() and step.deltas:
            # Stopped before the usage chunk: vLLM streams one token per delta.
            self.usage_complete = False
            self.estimated_tokens += step.deltas
            completion = step.deltas
        if self.ttft is None and step.first_token_t is not None:
            self.ttft = step.first_token_t - self.started
        self.reasoning_s += step.reasoning_s
        if step.first_token_t is not None and step.last_token_t is not None:
            window = step.last_token_t - step.first_token_t
            if window > 0 and completion > 1:
                self.decode_tokens += completion - 1
                self.decode_s += window

    def stats(self) -> TurnStats:
        reasoning_tokens = self.usage.reasoning_tokens
        if reasoning_tokens is None and not self.saw_reasoning:
            reasoning_tokens = 0
        completion = self.usage.completion_tokens + self.estimated_tokens
        return TurnStats(
            ttft_s=self.ttft,
            reasoning_s=self.reasoning_s,
            total_s=time.monotonic() - self.started,
            tool_s=self.tool_s,
            decode_tokens_per_s=self.decode_tokens / self.decode_s if self.decode_s > 0 else None,
            prompt_tokens=self.usage.prompt_tokens,
            completion_tokens=completion,
            reasoning_tokens=reasoning_tokens,
            answer_tokens=(completion - reasoning_tokens
                           if reasoning_tokens is not None and self.usage_complete else None),
            requests=self.requests,
            tool_calls=self.tool_calls,
            usage_complete=self.usage_complete,
            server=self.server,
        )


class ChatSession:
    """A conversation with one vLLM server, and the tools it may call.

    base_url: the server root ('http://127.0.0.1:8000'; a trailing /v1 is accepted).
    tools: the registry offered to the model (None: no tools).
    approvals: which MCP tool calls need a person's yes first (default: every one is asked);
        a view answers the ToolApprovalRequested event with `approvals.answer(call_id, ...)`.
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
        approvals: ToolApprovals | None = None,
    ) -> None:
        self.base_url = normalize_base_url(base_url)
        self.options = options or ChatOptions()
        self.tools = tools
        self.conversation = conversation or Conversation()
        self.api_key = api_key or "EMPTY"
        self.request_hook = request_hook
        self.http_client = http_client
        self.timeout_s = timeout_s
        self.approvals = approvals or ToolApprovals()  # asked before each MCP tool call
        self.last_request_body: dict[str, Any] | None = None  # what the last request sent, for display
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

    async def astream(self, user_text: str | None) -> AsyncGenerator[ChatEvent, None]:
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
        """`astream` for synchronous callers (workbench.syncbridge: a private event loop,
        on a worker thread where this thread already runs one, as in a Jupyter kernel)."""
        yield from iterate_sync(lambda: self.astream(user_text), thread_name="chat-stream")

    def send(self, user_text: str | None) -> TurnResult:
        """Run a whole turn and return what it produced."""
        return collect(list(self.stream(user_text)))

    async def asend(self, user_text: str | None) -> TurnResult:
        return collect([event async for event in self.astream(user_text)])

    def _make_client(self) -> Any:
        from openai import AsyncOpenAI  # 1 s to load: with the first chat, not with every command

        return AsyncOpenAI(
            base_url=f"{self.base_url}/v1",
            api_key=self.api_key,
            http_client=self.http_client,
            timeout=self.timeout_s,
            max_retries=0,  # a retried stream would repeat tokens; the user retries instead
        )

    async def _resolve_model(self, client: Any) -> str:
        if self.options.model:
            return self.options.model
        models = [m.id for m in await aserved_models(self.base_url, api_key=self.api_key,
                                                     timeout=self.timeout_s, client=self.http_client)]
        if not models:
            raise LaunchError(f"The server at {self.base_url} serves no model.",
                              hint="Check the server's log; give the model's name if it needs one.",
                              settings=("model",))
        self.options.model = models[0]
        return str(models[0])

    def _offered_tools(self) -> list[dict[str, Any]]:
        if self.tools is None or not self.options.use_tools:
            return []
        return self.tools.schemas()

    def _hooked(self, body: dict[str, Any], info: RequestInfo) -> dict[str, Any]:
        if self.request_hook:
            extra = self.request_hook(info)
            if extra:
                body = deep_merge(body, extra)
        return body

    def _request_body(self, model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]], step: int,
                      max_tokens: int | None) -> dict[str, Any]:
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
        body = deep_merge(body, opts.extra_body)
        return self._hooked(body, RequestInfo(self._turns, step, "chat", messages))

    def _wire_messages(self) -> list[dict[str, Any]]:
        messages = []
        if self.options.system_prompt:
            messages.append({"role": "system", "content": self.options.system_prompt})
        messages.extend(self.conversation.to_wire())
        return messages

    # -- the turn

    def _client_budget(self) -> int | None:
        opts = self.options
        return opts.reasoning_budget if opts.reasoning and opts.reasoning_budget_mode == "client" else None

    async def _turn(self, client: Any, user_text: str | None) -> AsyncIterator[ChatEvent]:
        opts = self.options
        if user_text is not None:
            self.conversation.messages.append(Message("user", user_text))
        elif self.conversation.messages and self.conversation.messages[-1].role == "user":
            self.conversation.messages[-1].failed = None  # retried: this turn answers it (or marks it again)
        tally = _Tally()
        finish_reason: str | None = None
        last_step = Step()
        last_max_tokens = opts.max_tokens
        step: Step | None = None  # the step being streamed, until it is recorded
        recorded = 0  # messages in the conversation when the current step began
        try:
            model = await self._resolve_model(client)
            tools = self._offered_tools()
            step_number = 0
            while True:
                messages = self._wire_messages()
                budget = self._client_budget()
                max_tokens = opts.max_tokens if budget is None else (
                    min(budget, opts.max_tokens) if opts.max_tokens else budget)
                last_max_tokens = max_tokens
                step = Step()
                recorded = len(self.conversation.messages)
                body = self._request_body(model, messages, tools, step_number, max_tokens)
                async for event in self._stream_chat(client, body, step, step_number):
                    yield event
                tally.account(step)
                last_step = step
                finish_reason = "stopped" if step.stopped else step.finish_reason

                if step.stopped:
                    self._record_assistant(step, keep_calls=False)
                    yield Notice("stopped", "Stopped. The partial answer is kept in the conversation.")
                    break

                if (budget is not None and step.finish_reason == "length" and not step.calls
                        and (opts.max_tokens is None or budget < opts.max_tokens)):
                    async for event in self._continue_after_budget(client, model, messages, tools, step,
                                                                   step_number, budget):
                        yield event
                    cont = step.continuation
                    assert cont is not None
                    tally.account(cont)
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
                assert self._stop_event is not None
                runner = ToolRunner(self.tools, self.approvals, self._record_tool_message, self._stop_event)
                if step_number >= opts.max_tool_steps or not tools:
                    yield runner.refuse(calls, bool(tools), opts.max_tool_steps)
                    break
                async for event in runner.run(calls, step_number):
                    if isinstance(event, ToolResult):
                        tally.tool_s += event.seconds
                        tally.tool_calls += 1
                    yield event
                if self._stop_flag.is_set():
                    finish_reason = "stopped"
                    yield Notice("stopped", "Stopped after running the tools.")
                    break
                step_number += 1

            content = "".join(last_step.content)
            if finish_reason == "length" and not last_step.calls:
                yield self._length_notice(content, last_step, last_max_tokens)
            stats = tally.stats()
            self._attach_stats(stats)
            yield TurnFinished(finish_reason, tally.usage, stats)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # translated once, here; the conversation is kept
            event = error_event(exc, self.base_url)
            self._keep_failed_turn(step, recorded, event.message)
            yield event

    def _keep_failed_turn(self, step: Step | None, recorded: int, why: str) -> None:
        """The partial answer of a failed turn stays, marked; a turn with none marks its question."""
        messages = self.conversation.messages
        if step is not None and len(messages) == recorded and ("".join(step.content) or "".join(step.reasoning)):
            self._record_assistant(step, keep_calls=False)
            messages[-1].failed = why
        elif messages and messages[-1].role == "user":
            messages[-1].failed = why

    def _length_notice(self, content: str, step: Step, max_tokens: int | None) -> Notice:
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

    # -- the conversation record

    def _record_assistant(self, step: Step, *, keep_calls: bool) -> None:
        calls = ([ToolCall(c.id, c.name, c.arguments or "{}") for i, c in sorted(step.calls.items())]
                 if keep_calls else [])
        content = "".join(step.content)
        reasoning = "".join(step.reasoning) or None
        if not content and not calls and not reasoning:
            return
        self.conversation.messages.append(
            Message("assistant", content=content, reasoning=reasoning, tool_calls=calls))

    def _record_tool_message(self, call: PendingCall, content: str) -> None:
        self.conversation.messages.append(
            Message("tool", content=content, tool_call_id=call.id, name=call.name))

    def _attach_stats(self, stats: TurnStats) -> None:
        for message in reversed(self.conversation.messages):
            if message.role == "user":
                return
            if message.role == "assistant":
                message.stats = stats
                return

    # -- reading a stream

    async def _next_or_stop(self, iterator: Any, stop_wait: asyncio.Future[Any]) -> Any:
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

    async def _stream_chat(self, client: Any, body: dict[str, Any], step: Step, step_number: int) -> AsyncIterator[ChatEvent]:
        self.last_request_body = body
        stream = await client.chat.completions.create(
            **{k: v for k, v in body.items() if k in _CHAT_FIELDS},
            extra_body={k: v for k, v in body.items() if k not in _CHAT_FIELDS},
        )
        await _require_event_stream(stream, self.base_url)
        async for event in self._read_stream(stream, step, step_number, chat_chunk_events):
            yield event
        for index in sorted(step.calls):
            yield complete_call(step.calls[index], step_number)

    async def _read_stream(self, stream: Any, step: Step, step_number: int,
                           to_events: Callable[[Any, Step, int], list[ChatEvent]]) -> AsyncIterator[ChatEvent]:
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

    async def _continue_after_budget(self, client: Any, model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
                                     step: Step, step_number: int, budget: int) -> AsyncIterator[ChatEvent]:
        yield Notice(
            "reasoning_budget",
            f"Reasoning reached its budget of {budget} tokens; closing it with </think> "
            "and continuing to the answer.",
        )
        prompt_ids = await continuation_prompt_ids(client, self.base_url, model, messages, tools,
                                                   "".join(step.reasoning), "".join(step.content))
        body = continuation_body(self.options, model, prompt_ids, step.usage.completion_tokens)
        body = self._hooked(body, RequestInfo(self._turns, step_number, "continuation", messages))
        self.last_request_body = body
        stream = await client.completions.create(
            **{k: v for k, v in body.items() if k in _COMPLETION_FIELDS},
            extra_body={k: v for k, v in body.items() if k not in _COMPLETION_FIELDS},
        )
        cont = step.continuation = Step()
        async for event in self._read_stream(stream, cont, step_number, completion_chunk_events):
            yield event


async def _require_event_stream(stream: Any, base_url: str) -> None:
    """A 200 that is not an event stream (a proxy's login page, a wrong URL) is an error
    carrying what the server said, not an empty answer."""
    response = getattr(stream, "response", None)
    if response is None:
        return
    content_type = str(response.headers.get("content-type", ""))
    if content_type.startswith("text/event-stream"):
        return
    text = (await response.aread()).decode("utf-8", "replace")
    await response.aclose()
    raise LaunchError(
        f"The server at {base_url} answered with {content_type or 'no content type'}, not an event stream: "
        f"{' '.join(text.split())[:300]!r}",
        hint="Is the URL the vLLM server's (not a proxy or another app)? Its /v1/models should list the model.")


async def _cancel_quietly(task: asyncio.Future[Any]) -> None:
    """Cancel a pending chunk read and wait for it, so no orphan task reports an error."""
    task.cancel()
    try:
        await task
    except BaseException:  # the read's own CancelledError or the closed stream's error
        pass

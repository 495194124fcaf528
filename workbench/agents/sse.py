"""One streamed chat completion read as raw SSE, so the verifier sees the exact field names
the server used (the openai SDK would hide whether reasoning came as `reasoning` or
`reasoning_content`)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from workbench.chat.server_metrics import response_metrics_field

__all__ = ["REASONING_FIELDS", "StreamedReply", "stream_chat"]

# vLLM >= 0.16 streams `reasoning`; older servers and some proxies `reasoning_content`.
REASONING_FIELDS = ("reasoning", "reasoning_content")


@dataclass
class StreamedReply:
    chunks: int = 0
    content: str = ""
    reasoning: str = ""
    reasoning_field: str | None = None
    tool_calls: list[dict[str, str]] = field(default_factory=list)  # id, name, arguments (joined)
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    metrics: dict[str, Any] | None = None  # vLLM's per-request `metrics`, when sent
    first_token_s: float | None = None
    status_code: int | None = None
    error: str = ""
    error_change: str = ""


def _error_text(answer: httpx.Response) -> str:
    try:
        data = json.loads(answer.read())
    except (ValueError, httpx.HTTPError):
        return f"HTTP {answer.status_code}"
    error = data.get("error", data) if isinstance(data, dict) else data
    message = error.get("message") if isinstance(error, dict) else None
    return f"HTTP {answer.status_code}: {message or str(data)[:300]}"


def _take_chunk(reply: StreamedReply, data: dict[str, Any], started: float) -> None:
    reply.chunks += 1
    if isinstance(data.get("usage"), dict):
        reply.usage = data["usage"]
        metrics = response_metrics_field(data)
        if metrics is not None:
            reply.metrics = dict(metrics)
    for choice in data.get("choices") or []:
        delta = choice.get("delta") or {}
        got_token = False
        for name in REASONING_FIELDS:
            text = delta.get(name)
            if isinstance(text, str) and text:
                reply.reasoning += text
                reply.reasoning_field = reply.reasoning_field or name
                got_token = True
        if isinstance(delta.get("content"), str) and delta["content"]:
            reply.content += delta["content"]
            got_token = True
        for tc in delta.get("tool_calls") or []:
            got_token = True
            index = tc.get("index", len(reply.tool_calls))
            while len(reply.tool_calls) <= index:
                reply.tool_calls.append({"id": "", "name": "", "arguments": ""})
            call = reply.tool_calls[index]
            call["id"] = tc.get("id") or call["id"]
            function = tc.get("function") or {}
            call["name"] += function.get("name") or ""
            call["arguments"] += function.get("arguments") or ""
        if got_token and reply.first_token_s is None:
            reply.first_token_s = time.monotonic() - started
        if choice.get("finish_reason"):
            reply.finish_reason = choice["finish_reason"]


def stream_chat(client: httpx.Client, body: dict[str, Any]) -> StreamedReply:
    """POST /v1/chat/completions with stream=true; every failure lands in `error`, none raises."""
    reply = StreamedReply()
    started = time.monotonic()
    try:
        with client.stream("POST", "/v1/chat/completions", json=body) as answer:
            reply.status_code = answer.status_code
            if answer.status_code != 200:
                reply.error = _error_text(answer)
                reply.error_change = "Read the server's message above; check the request's model name."
                return reply
            if "text/event-stream" not in answer.headers.get("content-type", ""):
                reply.error = f"the answer is {answer.headers.get('content-type')!r}, not an event stream"
                reply.error_change = "Point at vLLM's OpenAI-compatible server (a proxy may be buffering it)."
                return reply
            for line in answer.iter_lines():
                if not line.startswith("data:"):
                    continue
                payload = line[5:].strip()
                if payload == "[DONE]":
                    break
                try:
                    data = json.loads(payload)
                except ValueError:
                    reply.error = f"a chunk is not JSON: {payload[:120]!r}"
                    reply.error_change = "Something between the client and vLLM rewrites the stream."
                    return reply
                if isinstance(data, dict) and "error" in data and "choices" not in data:
                    error = data["error"]
                    reply.error = str(error.get("message") if isinstance(error, dict) else error)
                    reply.error_change = "The server failed mid-stream: read its log."
                    return reply
                if isinstance(data, dict):
                    _take_chunk(reply, data, started)
    except httpx.HTTPError as exc:
        reply.error = f"the request failed: {type(exc).__name__}: {exc}"
        reply.error_change = "Check that the server is up and reachable, and raise --timeout for a slow one."
    return reply

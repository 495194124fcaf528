"""The benchmark's HTTP side: one streamed chat request measured, plus the
server calls around a run (/v1/models, /tokenize, /metrics).

The stream is read as raw bytes and split into SSE lines here, so an event's
arrival time is when its bytes arrived. Most events are classified by a string
fast path (vLLM writes compact JSON); json.loads runs only on events the fast
path cannot vouch for: the role chunk, the first token chunk (its usage), the
final usage chunk, tool calls and errors.
"""

from __future__ import annotations

import codecs
import json
import time
from typing import Any

import httpx

from workbench.bench.records import ChunkKind, RequestRecord
from workbench.bench.summary import ServerCounters
from workbench.errors import MetricsError, WorkbenchError
from workbench.metrics.parse import (
    GENERATION_TOKENS,
    PROMPT_TOKENS,
    SPEC_ACCEPTED_TOKENS,
    SPEC_DRAFT_TOKENS,
    SPEC_DRAFTS,
    Snapshot,
    parse_metrics,
)

__all__ = [
    "classify_event",
    "counter_deltas",
    "fetch_counters",
    "fetch_model",
    "stream_request",
]

_DELTA = '"delta":{'
# A JSON string value cannot contain `,"` (its quotes are escaped), so `,"` after
# the delta's first key means a second key: the fast path then steps aside.
_FAST_KEYS = (
    ('"content":"', ChunkKind.CONTENT),
    ('"reasoning":"', ChunkKind.REASONING),
    ('"reasoning_content":"', ChunkKind.REASONING),
)

def classify_event(data: str) -> tuple[ChunkKind, dict[str, Any] | None]:
    """Kind of one SSE `data:` payload, and its parsed JSON when it had to be parsed."""
    if data == "[DONE]":
        return ChunkKind.DONE, None
    at = data.find(_DELTA)
    if at >= 0:
        body = at + len(_DELTA)
        if data.startswith("}", body):
            return ChunkKind.EMPTY, None
        for key, kind in _FAST_KEYS:
            if data.startswith(key, body):
                value = body + len(key)
                end = data.find('},"', value)
                if end >= 0 and data.find(',"', value, end) < 0:
                    if data.startswith('"', value):  # empty string: no token
                        return ChunkKind.EMPTY, None
                    return kind, None
                break
    parsed = json.loads(data)
    return _classify_parsed(parsed), parsed


def _classify_parsed(event: dict[str, Any]) -> ChunkKind:
    if "error" in event or event.get("object") == "error":
        return ChunkKind.ERROR
    choices = event.get("choices")
    if not choices:
        return ChunkKind.USAGE if "usage" in event else ChunkKind.EMPTY
    delta = choices[0].get("delta") or {}
    if delta.get("tool_calls"):
        return ChunkKind.TOOL_CALL
    if delta.get("content"):
        return ChunkKind.CONTENT
    if delta.get("reasoning") or delta.get("reasoning_content"):
        return ChunkKind.REASONING
    return ChunkKind.ROLE if delta.get("role") else ChunkKind.EMPTY


def _error_text(event: dict[str, Any]) -> str:
    err = event.get("error", event)
    if isinstance(err, dict):
        return str(err.get("message") or err)
    return str(err)


async def stream_request(
    client: httpx.AsyncClient,
    url: str,
    body: dict[str, Any],
    index: int,
    target_input_tokens: int | None = None,
) -> RequestRecord:
    """POST one streamed chat completion and record when every event arrived."""
    payload = json.dumps(body).encode()
    headers = {"content-type": "application/json"}
    record = RequestRecord(index=index, start_ns=time.monotonic_ns(), target_input_tokens=target_input_tokens)
    first_token_pending = True
    try:
        async with client.stream("POST", url, content=payload, headers=headers) as response:
            if response.status_code != 200:
                text = (await response.aread()).decode(errors="replace")
                record.error = f"HTTP {response.status_code}: {text[:300]}"
                return record
            pending = ""
            decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
            async for raw in response.aiter_raw():
                now = time.monotonic_ns()
                pending += decoder.decode(raw)
                lines = pending.split("\n")
                pending = lines.pop()
                for line in lines:
                    if not line.startswith("data: "):
                        continue  # blank separators, comments, `event:` lines
                    kind, parsed = classify_event(line[6:].rstrip("\r"))
                    if kind.is_token_chunk and first_token_pending:
                        first_token_pending = False
                        parsed = parsed if parsed is not None else json.loads(line[6:])
                        usage = parsed.get("usage") or {}
                        record.first_chunk_tokens = usage.get("completion_tokens")
                    if kind is ChunkKind.USAGE and parsed is not None:
                        _take_usage(record, parsed["usage"])
                    elif kind is ChunkKind.ERROR and parsed is not None:
                        record.error = _error_text(parsed)
                    record.add_event(now, kind)
    except httpx.HTTPError as exc:
        record.error = f"{type(exc).__name__}: {exc}"
    finally:
        record.end_ns = time.monotonic_ns()
    if record.error is None and record.completion_tokens is None:
        record.error = "the stream ended without a usage chunk (is stream_options.include_usage supported?)"
    return record


def _take_usage(record: RequestRecord, usage: dict[str, Any]) -> None:
    record.prompt_tokens = usage.get("prompt_tokens")
    record.completion_tokens = usage.get("completion_tokens")
    details = usage.get("completion_tokens_details") or {}
    record.reasoning_tokens = details.get("reasoning_tokens")


async def fetch_model(client: httpx.AsyncClient, base_url: str) -> tuple[str, int | None]:
    """The served model's name and max_model_len, from GET /v1/models."""
    try:
        response = await client.get(f"{base_url}/v1/models")
        response.raise_for_status()
        models = response.json()["data"]
    except (httpx.HTTPError, KeyError, ValueError) as exc:
        raise WorkbenchError(
            f"Could not read the model list from {base_url}/v1/models: {exc}",
            hint="Check --url points at a running vLLM server (e.g. http://127.0.0.1:8000).",
        ) from exc
    if not models:
        raise WorkbenchError(f"{base_url} serves no model.", hint="Start vllm serve with a model.")
    return models[0]["id"], models[0].get("max_model_len")


async def fetch_counters(client: httpx.AsyncClient, base_url: str) -> Snapshot | None:
    """The server's /metrics as a Snapshot; None if it has none (or not a vLLM one)."""
    try:
        response = await client.get(f"{base_url}/metrics")
    except httpx.HTTPError:
        return None
    if response.status_code != 200:
        return None
    try:
        return parse_metrics(response.text)
    except MetricsError:
        return None


# ServerCounters field -> the vLLM counter it is the delta of.
_COUNTERS = {
    "prompt_tokens": PROMPT_TOKENS,
    "generation_tokens": GENERATION_TOKENS,
    "spec_accepted_tokens": SPEC_ACCEPTED_TOKENS,
    "spec_draft_tokens": SPEC_DRAFT_TOKENS,
    "spec_drafts": SPEC_DRAFTS,
}


def counter_deltas(before: Snapshot | None, after: Snapshot | None) -> ServerCounters | None:
    """How much each counter rose between two scrapes (summed over engines and models)."""
    if before is None or after is None:
        return None
    deltas: dict[str, float | None] = {}
    for field_name, metric in _COUNTERS.items():
        end = after.total(metric)
        deltas[field_name] = None if end is None else end - (before.total(metric) or 0.0)
    return ServerCounters(**deltas)

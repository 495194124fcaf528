"""The benchmark's HTTP side: one streamed chat request measured, plus the
server calls around a run (/v1/models, /metrics).

aiohttp, one session per run: at 128-256 streams httpx's connection pool queued
requests for seconds inside the timed window (measured: its start-to-server delay
was 1.9 s mean at 128 streams, 3.7 s at 256, with the connections already open),
and it costs ~4.5x aiohttp's CPU per event. The stream is read with `iter_any()`
(every network read as it arrives) and stamped with one time.monotonic_ns() per
read, so an event's arrival time is when its bytes reached the client; SSE lines
are split here. Most events are classified by a string fast path (vLLM writes
compact JSON); json.loads runs only on events the fast path cannot vouch for.

A stream that breaks its contract (an event that is not JSON, a chunk of the
wrong shape, an error event, a dropped connection) fails that request with the
reason; nothing here raises out of a request.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import aiohttp

from workbench.bench.records import ChunkKind, RequestFailure, RequestRecord
from workbench.bench.summary import ServerCounters
from workbench.errors import LaunchError, MetricsError
from workbench.server.probe import parse_model_list
from workbench.metrics.parse import (
    GENERATION_TOKENS,
    PREFIX_CACHE_HITS,
    PREFIX_CACHE_QUERIES,
    PROMPT_TOKENS,
    SPEC_ACCEPTED_PER_POSITION,
    SPEC_ACCEPTED_TOKENS,
    SPEC_DRAFT_TOKENS,
    SPEC_DRAFTS,
    Snapshot,
    parse_metrics,
)

__all__ = [
    "CONNECTION_ERRORS",
    "CONNECT_FAILED",
    "StreamShapeError",
    "classify_event",
    "counter_deltas",
    "fetch_counters",
    "fetch_model",
    "open_connections",
    "open_session",
    "stream_request",
]

# What a dropped server looks like to aiohttp (also asyncio's timeouts).
CONNECTION_ERRORS = (aiohttp.ClientError, asyncio.TimeoutError, ConnectionError, OSError)
# How a request's error starts when no connection could be made at all (the server is gone).
CONNECT_FAILED = "could not connect"

_DELTA = '"delta":{'
# A JSON string value cannot contain `,"` (its quotes are escaped), so `,"` after
# the delta's first key means a second key: the fast path then steps aside.
_FAST_KEYS = (
    ('"content":"', ChunkKind.CONTENT),
    ('"reasoning":"', ChunkKind.REASONING),
    ('"reasoning_content":"', ChunkKind.REASONING),
)


class StreamShapeError(ValueError):
    """An SSE event that is not the OpenAI chat-chunk shape."""


def classify_event(data: str) -> tuple[ChunkKind, dict[str, Any] | None]:
    """Kind of one SSE `data:` payload, and its parsed JSON when it had to be parsed.

    Raises StreamShapeError for an event that is not JSON or not a chat chunk.
    """
    kind, parsed, _ = _classify(data)
    return kind, parsed


def _classify(data: str) -> tuple[ChunkKind, dict[str, Any] | None, tuple[int, int] | None]:
    """classify_event, plus where the fast path found the delta's string value (still JSON-escaped)."""
    if data == "[DONE]":
        return ChunkKind.DONE, None, None
    at = data.find(_DELTA)
    if at >= 0:
        body = at + len(_DELTA)
        if data.startswith("}", body):
            return ChunkKind.EMPTY, None, None
        for key, kind in _FAST_KEYS:
            if data.startswith(key, body):
                value = body + len(key)
                end = data.find('},"', value)
                if end >= 0 and data.find(',"', value, end) < 0:
                    if data.startswith('"', value):  # empty string: no token
                        return ChunkKind.EMPTY, None, None
                    return kind, None, (value, end - 1)  # end - 1: the string's closing quote
                break
    try:
        parsed = json.loads(data)
    except ValueError as exc:
        raise StreamShapeError(f"an SSE event is not JSON ({exc}): {data[:120]!r}") from exc
    return _classify_parsed(parsed, data), parsed, None


def _classify_parsed(event: Any, data: str) -> ChunkKind:
    def wrong(what: str) -> StreamShapeError:
        return StreamShapeError(f"a chunk of the wrong shape ({what}): {data[:120]!r}")

    if not isinstance(event, dict):
        raise wrong("not a JSON object")
    if "error" in event or event.get("object") == "error":
        return ChunkKind.ERROR
    choices = event.get("choices")
    if choices is not None and not isinstance(choices, list):
        raise wrong("`choices` is not a list")
    usage = event.get("usage")
    if usage is not None and not isinstance(usage, dict):
        raise wrong("`usage` is not an object")
    if not choices:
        return ChunkKind.USAGE if usage is not None else ChunkKind.EMPTY
    choice = choices[0]
    if not isinstance(choice, dict):
        raise wrong("a choice is not an object")
    delta = choice.get("delta") or {}
    if not isinstance(delta, dict):
        raise wrong("`delta` is not an object")
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


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class _TimedBody(aiohttp.BytesPayload):
    """The request body; stamps when aiohttp hands it (with the headers) to the socket.

    On Python < 3.12 aiohttp writes the body in a task of its own, so with 256
    requests starting together a stamp taken before session.post ran ~10 ms before
    the bytes left: the client's queueing, not the server's latency.
    """

    sent_ns: int | None = None

    async def write_with_length(self, writer: Any, content_length: int | None) -> None:
        self.sent_ns = time.monotonic_ns()
        await super().write_with_length(writer, content_length)


class _StreamReader:
    """Turns network reads into timed events on one record."""

    def __init__(self, record: RequestRecord, text_out: list[str] | None = None) -> None:
        self.record = record
        self.pending = b""
        self.first_token_pending = True
        self.text_out = text_out  # the answer's content, kept for a session's next turn
        # The content pieces still JSON-escaped, decoded once at the end: a json.loads per chunk
        # cost the multi-turn client a tenth of its CPU at 256 streams.
        self.escaped: list[str] = []

    def feed(self, raw: bytes, now: int) -> None:
        """Every complete line of `raw` (plus what was pending), stamped `now`."""
        lines = (self.pending + raw).split(b"\n")
        self.pending = lines.pop()
        for line in lines:
            if not line.startswith(b"data:"):
                continue  # blank separators, comments, `event:` lines
            data = line[5:].strip().decode("utf-8", errors="replace")
            self.event(data, now)

    def event(self, data: str, now: int) -> None:
        record = self.record
        kind, parsed, span = _classify(data)
        if kind.is_token_chunk and self.first_token_pending:
            self.first_token_pending = False
            if parsed is None:
                try:
                    parsed = json.loads(data)
                except ValueError as exc:
                    raise StreamShapeError(f"an SSE event is not JSON ({exc}): {data[:120]!r}") from exc
            usage = parsed.get("usage") if isinstance(parsed, dict) else None
            record.first_chunk_tokens = _int_or_none((usage or {}).get("completion_tokens"))
        if self.text_out is not None and kind is ChunkKind.CONTENT:
            if span is not None:
                self.escaped.append(data[span[0]:span[1]])
            else:
                parsed = parsed if parsed is not None else json.loads(data)
                self.escaped.append(json.dumps(str(parsed["choices"][0]["delta"]["content"]))[1:-1])
        if kind is ChunkKind.USAGE and parsed is not None:
            _take_usage(record, parsed["usage"])
            _take_spec_metrics(record, parsed.get("metrics"))
        elif kind is ChunkKind.ERROR and parsed is not None:
            record.fail(RequestFailure.ERROR_EVENT, f"the server sent an error event: {_error_text(parsed)}")
        record.add_event(now, kind)

    def finish(self) -> None:
        """The answer's content, decoded, into text_out (ValueError if a piece was not a JSON string)."""
        if self.text_out is not None and self.escaped:
            self.text_out.append(str(json.loads('"' + "".join(self.escaped) + '"')))


async def stream_request(
    session: aiohttp.ClientSession,
    url: str,
    payload: bytes,
    index: int,
    target_input_tokens: int | None = None,
    text_out: list[str] | None = None,
) -> RequestRecord:
    """POST one streamed chat completion (`payload` is its JSON) and record when every event arrived.

    start_ns is when the request's bytes went to the socket; queued_ns when this call began.
    With `text_out`, the answer's content is appended to it piece by piece (a session's history).
    """
    queued = time.monotonic_ns()
    record = RequestRecord(index=index, start_ns=queued, queued_ns=queued, target_input_tokens=target_input_tokens)
    reader = _StreamReader(record, text_out)
    body = _TimedBody(payload, content_type="application/json")
    try:
        async with session.post(url, data=body) as response:
            if body.sent_ns is not None:
                record.start_ns = body.sent_ns
            if response.status != 200:
                text = (await response.read()).decode(errors="replace")
                record.fail(RequestFailure.HTTP_STATUS, f"HTTP {response.status}: {text[:300]}")
                return record
            async for raw in response.content.iter_any():
                reader.feed(raw, time.monotonic_ns())
                if record.error is not None:
                    break
            if reader.pending.strip() and record.error is None:
                reader.feed(b"\n", time.monotonic_ns())  # a last line without its newline
            reader.finish()
    except StreamShapeError as exc:
        record.fail(RequestFailure.STREAM_SHAPE, str(exc))
    except aiohttp.ClientConnectorError as exc:
        record.fail(RequestFailure.CONNECT, f"{CONNECT_FAILED}: {exc}")
    except CONNECTION_ERRORS as exc:
        record.fail(RequestFailure.CONNECTION, f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
    except (ValueError, KeyError, IndexError, TypeError) as exc:  # a content chunk kept for history, misshapen
        record.fail(RequestFailure.STREAM_SHAPE, f"a content chunk of the wrong shape ({type(exc).__name__}: {exc})")
    finally:
        record.end_ns = time.monotonic_ns()
        if body.sent_ns is not None:
            record.start_ns = body.sent_ns
    if record.error is None and record.completion_tokens is None:
        record.fail(RequestFailure.NO_USAGE,
                    "the stream ended without a usage chunk (is stream_options.include_usage supported?)")
    return record


def _take_usage(record: RequestRecord, usage: dict[str, Any]) -> None:
    record.prompt_tokens = _int_or_none(usage.get("prompt_tokens"))
    record.completion_tokens = _int_or_none(usage.get("completion_tokens"))
    details = usage.get("completion_tokens_details")
    record.reasoning_tokens = _int_or_none(details.get("reasoning_tokens")) if isinstance(details, dict) else None
    prompt_details = usage.get("prompt_tokens_details")
    record.cached_tokens = (_int_or_none(prompt_details.get("cached_tokens"))
                            if isinstance(prompt_details, dict) else None)
    if record.completion_tokens is None:
        raise StreamShapeError(f"the usage chunk has no integer completion_tokens: {usage!r:.120}")


def _take_spec_metrics(record: RequestRecord, metrics: Any) -> None:
    """vLLM puts per-request speculative-decoding acceptance on the final usage chunk
    (`metrics.speculative_decoding`) when served with --per-request-spec-decode-metrics."""
    spec = metrics.get("speculative_decoding") if isinstance(metrics, dict) else None
    record.spec_decoding = spec if isinstance(spec, dict) else None


def open_session(connections: int, timeout_s: float) -> aiohttp.ClientSession:
    """One session for a whole run: a pool with room for every stream (aiohttp's default is 100)."""
    connector = aiohttp.TCPConnector(limit=connections + 8, limit_per_host=0, keepalive_timeout=300,
                                     force_close=False, enable_cleanup_closed=False)
    timeout = aiohttp.ClientTimeout(total=timeout_s, sock_connect=10.0)
    return aiohttp.ClientSession(connector=connector, timeout=timeout)


async def open_connections(session: aiohttp.ClientSession, base_url: str, count: int) -> int:
    """Open `count` pooled connections before the measured window (concurrent GET /v1/models).

    Returns how many of the probes were answered. Run it just before the load: vLLM's
    HTTP server closes a connection after 5 s idle (VLLM_HTTP_TIMEOUT_KEEP_ALIVE).
    """

    async def one() -> bool:
        try:
            async with session.get(f"{base_url}/v1/models") as response:
                await response.read()
                return response.status == 200
        except CONNECTION_ERRORS:
            return False

    answered = await asyncio.gather(*(one() for _ in range(count)))
    return sum(answered)


async def fetch_model(session: aiohttp.ClientSession, base_url: str) -> tuple[str, int | None]:
    """The served model's name and max_model_len, from GET /v1/models."""
    hint = "Check that the URL is a running OpenAI-compatible server's (e.g. http://127.0.0.1:8000)."
    try:
        async with session.get(f"{base_url}/v1/models") as response:
            status = response.status
            text = await response.text(errors="replace")
    except CONNECTION_ERRORS as exc:
        raise LaunchError(f"Could not read the model list from {base_url}/v1/models: "
                             f"{type(exc).__name__}: {exc}", hint=hint, settings=("url",)) from exc
    if status != 200:
        raise LaunchError(f"Could not read the model list from {base_url}/v1/models: HTTP {status}: "
                             f"{text[:200]}", hint=hint, settings=("url",))
    try:
        models = parse_model_list(json.loads(text))
    except ValueError as exc:
        raise LaunchError(
            f"Could not read the model list from {base_url}/v1/models: the answer is not an OpenAI "
            f"model list ({type(exc).__name__}: {exc}): {text[:200]!r}",
            hint=hint + " Or give the served model's name.",
            settings=("url", "model"),
        ) from exc
    if not models:
        raise LaunchError(f"{base_url} serves no model.", hint="Start the server with a model.")
    return models[0].id, models[0].max_model_len


async def fetch_counters(session: aiohttp.ClientSession, base_url: str) -> tuple[Snapshot | None, str | None]:
    """The server's /metrics as a Snapshot, or None and why not (a failed read fails only itself)."""
    try:
        async with session.get(f"{base_url}/metrics") as response:
            status = response.status
            text = await response.text(errors="replace")
    except CONNECTION_ERRORS as exc:
        return None, f"GET /metrics failed: {type(exc).__name__}: {exc}"
    if status != 200:
        return None, f"GET /metrics answered HTTP {status}"
    try:
        return parse_metrics(text), None
    except MetricsError as exc:
        return None, f"GET /metrics: {exc.message}"
    except (ValueError, TypeError, KeyError, IndexError) as exc:  # a parser's surprise, not the run's
        return None, f"GET /metrics could not be parsed: {type(exc).__name__}: {exc}"


# ServerCounters field -> the vLLM counter it is the delta of.
_COUNTERS = {
    "prompt_tokens": PROMPT_TOKENS,
    "generation_tokens": GENERATION_TOKENS,
    "spec_accepted_tokens": SPEC_ACCEPTED_TOKENS,
    "spec_draft_tokens": SPEC_DRAFT_TOKENS,
    "spec_drafts": SPEC_DRAFTS,
    "prefix_cache_queries": PREFIX_CACHE_QUERIES,
    "prefix_cache_hits": PREFIX_CACHE_HITS,
}


def _per_position(before: Snapshot, after: Snapshot) -> list[float] | None:
    """Accepted draft tokens at each draft position over the window (vLLM's per-position counter)."""
    def by_position(snapshot: Snapshot) -> dict[int, float]:
        out: dict[int, float] = {}
        for (name, labels), value in snapshot.counters.items():
            position = dict(labels).get("position")
            if name == SPEC_ACCEPTED_PER_POSITION and position is not None and position.isdigit():
                out[int(position)] = out.get(int(position), 0.0) + value
        return out

    end, start = by_position(after), by_position(before)
    if not end:
        return None
    return [end[i] - start.get(i, 0.0) for i in range(max(end) + 1) if i in end]


def counter_deltas(before: Snapshot | None, after: Snapshot | None) -> ServerCounters | None:
    """How much each counter rose between two scrapes (summed over engines and models)."""
    if before is None or after is None:
        return None
    deltas: dict[str, float | None] = {}
    for field_name, metric in _COUNTERS.items():
        end = after.total(metric)
        deltas[field_name] = None if end is None else end - (before.total(metric) or 0.0)
    return ServerCounters(**deltas, spec_accepted_per_position=_per_position(before, after))

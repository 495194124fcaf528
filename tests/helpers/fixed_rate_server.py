"""A test server with known timings: OpenAI chat streaming at a fixed rate.

Loopback only, asyncio, tests only. It speaks enough of vLLM's HTTP API for the
benchmark — GET /v1/models, POST /tokenize, GET /metrics (counters), POST
/v1/chat/completions (streaming, usage and continuous usage stats) — and
schedules every token from the moment the request arrived:

    token i (0-based) is generated at  arrival + prompt_tokens / prefill_rate + i / decode_rate

and a chunk is sent when its last token is generated. So TTFT, decode tok/s and
E2E are known exactly (see `FixedRateServer.truth`).

With `total_decode_rate` T the streams share a decode rate, as a real engine's batch
does: each token of a stream takes 1 / min(decode_rate, T / n) seconds, n being the
chat requests in flight (first token pending included) when the previous token went
out. At a steady concurrency c every stream's TPOT is then max(1 / decode_rate, c / T)
(`shared_tpot_s`): the server's capacity under a TPOT objective is known exactly.

Modes:

    one         one token per chunk
    several     `tokens_per_chunk` tokens per chunk (the first chunk too)
    reasoning   the first `reasoning_tokens` tokens as `reasoning`, then content
    role-first  a role-only chunk at arrival, long before the first token

Tokenization is one token per whitespace-separated word plus TEMPLATE_TOKENS for
the chat template, so /tokenize and usage.prompt_tokens agree; with `tokenizer`
(a local Hugging Face tokenizer folder) the server counts with that tokenizer's
chat template instead, as vLLM would. `tokenize=False` answers /tokenize with a
404, as TensorRT-LLM's trtllm-serve does.

Its own record (`timings`, also GET /timings) is the truth a client is checked
against: per chat request, in time.monotonic_ns (one clock for every process on
Linux), when the head and the body arrived, when the first / first-output / last
token chunk was written, and how late against its schedule the latest chunk went
out (`max_send_lag_ns`: if that grows, the server, not the client, fell behind).
Arrival is stamped where the socket read returned the bytes (the protocol's
data_received), not when the handler got round to parsing them: 256 requests that
land at once took this server ~45 ms to parse, and a schedule started after the
parse put that queue into every truth (and into the client's "error"). The handler's
own time is kept as `handled_ns`, so that queue still shows.

`fault` makes every `fault_every`-th chat request (or answer) misbehave, to test
that a client keeps its results: see FAULTS.

    python -m tests.helpers.fixed_rate_server --decode-rate 0   # as fast as it can, prints its URL
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from dataclasses import dataclass, field
from typing import Any, Literal

Mode = Literal["one", "several", "reasoning", "role-first"]
# What `fault` can break:
#   bad-sse       a `data:` line that is not JSON, mid-stream
#   wrong-shape   a chunk whose `choices` is a string
#   http-500      the request answered 500 with an error body
#   bad-models    GET /v1/models answers HTML
#   no-models     GET /v1/models answers an empty list (a gateway with nothing configured)
#   bad-metrics   GET /metrics answers JSON (as trtllm-serve's does)
#   die           the server process exits while streaming the fault_every-th request
FAULTS = ("bad-sse", "wrong-shape", "http-500", "bad-models", "no-models", "bad-metrics", "die")
TEMPLATE_TOKENS = 10
MODEL = "fixed-rate"
MAX_MODEL_LEN = 4096
# Spec-decode counters: each chunk counts as one draft step proposing this many
# tokens per token it carries beyond the first, so the acceptance math is known.
DRAFT_TOKENS_PER_STEP_FACTOR = 2


@dataclass
class Truth:
    ttft_s: float
    ttfo_s: float
    e2e_s: float
    decode_tok_s: float
    prefill_tok_s: float
    chunk_gap_s: float
    first_chunk_tokens: int


@dataclass
class Counters:
    prompt_tokens: int = 0
    generation_tokens: int = 0
    spec_accepted_tokens: int = 0
    spec_draft_tokens: int = 0
    spec_drafts: int = 0


@dataclass
class FixedRateServer:
    prefill_rate: float = 2000.0  # tokens/s; 0 = no prefill delay
    decode_rate: float = 100.0  # tokens/s per stream (with total_decode_rate: the cap); 0 = as fast as possible
    mode: Mode = "one"
    tokens_per_chunk: int = 4
    reasoning_tokens: int = 8
    port: int = 0
    first_token_s: float | None = None  # a fixed prefill time, whatever the prompt's length
    tokenize: bool = True  # False: /tokenize answers 404 (trtllm-serve has none)
    tokenizer: str | None = None  # a local HF tokenizer folder to count prompts with
    fault: str | None = None  # one of FAULTS
    fault_every: int = 2
    # Echo: each token is "<tag><i>", the tag being the first word of the last user
    # message, and the timing record names it: a load test can tell whose answer is whose.
    echo: bool = False
    # Labels of vllm:cache_config_info on /metrics (vLLM publishes its cache settings so); None: no such line.
    cache_config_labels: dict[str, str] | None = None
    # Tokens/s shared by every request in flight (0: streams do not share); see shared_tpot_s.
    total_decode_rate: float = 0.0
    counters: Counters = field(default_factory=Counters)
    # Per chat request, in time.monotonic_ns (one clock for all processes on Linux):
    # head_ns / arrival_ns (head and body in), first_sent_ns / first_output_sent_ns /
    # last_sent_ns (token chunks written), max_send_lag_ns (worst lateness vs the schedule).
    timings: list[dict[str, int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.base_events.Server | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._chat_requests = 0
        self._in_flight = 0  # chat requests received and not yet finished (they share total_decode_rate)
        self._hf_tokenizer: Any = None
        if self.tokenizer is not None:
            from transformers import AutoTokenizer

            self._hf_tokenizer = AutoTokenizer.from_pretrained(self.tokenizer)
        if self.fault is not None and self.fault not in FAULTS:
            raise ValueError(f"unknown fault {self.fault!r}; one of {FAULTS}")

    # ------------------------------------------------------------ truth
    def chunk_sizes(self, output_tokens: int) -> list[int]:
        if self.mode == "several":
            k = self.tokens_per_chunk
            return [min(k, output_tokens - i) for i in range(0, output_tokens, k)]
        return [1] * output_tokens

    def truth(self, prompt_tokens: int, output_tokens: int) -> Truth:
        prefill = self._prefill_s(prompt_tokens)
        per_token = 1 / self.decode_rate if self.decode_rate else 0.0
        first = self.chunk_sizes(output_tokens)[0]
        ttft = prefill + (first - 1) * per_token
        ttfo = prefill + self.reasoning_tokens * per_token if self.mode == "reasoning" else ttft
        return Truth(
            ttft_s=ttft,
            ttfo_s=ttfo,
            e2e_s=prefill + (output_tokens - 1) * per_token,
            decode_tok_s=self.decode_rate,
            prefill_tok_s=prompt_tokens / ttft if ttft else float("inf"),
            chunk_gap_s=first * per_token,
            first_chunk_tokens=first,
        )

    def shared_tpot_s(self, concurrency: int) -> float:
        """TPOT of every stream at a steady `concurrency`, with total_decode_rate: max(1/D, c/T)."""
        cap = 1 / self.decode_rate if self.decode_rate else 0.0
        return max(cap, concurrency / self.total_decode_rate) if self.total_decode_rate else cap

    def _token_s(self) -> float:
        """Seconds for a stream's next token now: its own rate, or its share of the total."""
        rate = self.decode_rate
        if self.total_decode_rate:
            share = self.total_decode_rate / max(1, self._in_flight)
            rate = min(rate, share) if rate else share
        return 1 / rate if rate else 0.0

    def _prefill_s(self, prompt_tokens: int) -> float:
        if self.first_token_s is not None:
            return self.first_token_s
        return prompt_tokens / self.prefill_rate if self.prefill_rate else 0.0

    # ------------------------------------------------------------ lifecycle
    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FixedRateServer:
        self._thread = threading.Thread(target=self._run, name="fixed-rate-server", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the fixed-rate server did not start")
        return self

    def stop(self) -> None:
        if self._loop is not None and self._server is not None:
            asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(10)
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(10)

    async def _shutdown(self) -> None:
        self._server.close()
        current = asyncio.current_task()
        tasks = [t for t in asyncio.all_tasks() if t is not current]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    @contextlib.contextmanager
    def in_subprocess(self) -> Iterator[str]:
        """Serve from a child process (no GIL shared with the client); yields its base URL."""
        argv = [sys.executable, "-m", "tests.helpers.fixed_rate_server", "--prefill-rate", str(self.prefill_rate),
                "--decode-rate", str(self.decode_rate), "--total-decode-rate", str(self.total_decode_rate),
                "--mode", self.mode,
                "--tokens-per-chunk", str(self.tokens_per_chunk), "--reasoning-tokens", str(self.reasoning_tokens),
                "--fault-every", str(self.fault_every)]
        if self.first_token_s is not None:
            argv += ["--first-token-s", str(self.first_token_s)]
        if not self.tokenize:
            argv.append("--no-tokenize")
        if self.tokenizer is not None:
            argv += ["--tokenizer", self.tokenizer]
        if self.fault is not None:
            argv += ["--fault", self.fault]
        if self.echo:
            argv.append("--echo")
        root = Path(__file__).resolve().parent.parent.parent
        child = subprocess.Popen(argv, cwd=root, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
        try:
            url = child.stdout.readline().strip()
            if not url.startswith("http://"):
                raise RuntimeError(f"the fixed-rate server did not start (exit {child.poll()})")
            self.port = int(url.rsplit(":", 1)[1])
            yield url
        finally:
            if child.poll() is None:
                child.terminate()
            child.wait(10)

    def __enter__(self) -> FixedRateServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._server = self._loop.run_until_complete(self._listen())
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()
        self._loop.close()

    async def _listen(self) -> asyncio.base_events.Server:
        """asyncio.start_server, with readers that stamp when their bytes came off the socket."""
        loop = asyncio.get_running_loop()

        def protocol() -> asyncio.StreamReaderProtocol:
            return asyncio.StreamReaderProtocol(_StampedReader(loop=loop), self._handle, loop=loop)

        return await loop.create_server(protocol, "127.0.0.1", self.port)

    async def serve_forever(self) -> None:
        self._server = await self._listen()
        self.port = self._server.sockets[0].getsockname()[1]
        print(self.base_url, flush=True)
        async with self._server:
            await self._server.serve_forever()

    # ------------------------------------------------------------ HTTP
    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert isinstance(reader, _StampedReader)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                head_ns = reader.message_started_ns
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                # The schedule starts once the body was in (off the socket), whenever this handler ran.
                arrived_ns = reader.last_read_ns
                reader.message_done()
                if method == "POST" and path == "/v1/chat/completions":
                    await self._chat(writer, json.loads(body), head_ns, arrived_ns)
                elif method == "POST" and path == "/tokenize" and self.tokenize:
                    request = json.loads(body)
                    count = self._prompt_tokens(request.get("messages", []), request.get("chat_template_kwargs"))
                    self._json(writer, {"count": count, "max_model_len": MAX_MODEL_LEN, "tokens": list(range(count))})
                elif method == "GET" and path == "/v1/models" and self.fault == "bad-models":
                    self._send(writer, 200, "text/html", b"<html><body>a proxy's login page</body></html>")
                elif method == "GET" and path == "/v1/models" and self.fault == "no-models":
                    self._json(writer, {"object": "list", "data": []})
                elif method == "GET" and path == "/health":
                    self._send(writer, 200, "application/json", b"{}")
                elif method == "GET" and path == "/v1/models":
                    self._json(writer, {"object": "list", "data": [{"id": MODEL, "max_model_len": MAX_MODEL_LEN}]})
                elif method == "GET" and path == "/timings":
                    self._json(writer, self.timings)
                elif method == "GET" and path == "/metrics" and self.fault == "bad-metrics":
                    self._json(writer, [{"iter": 1, "numActiveRequests": 0}])
                elif method == "GET" and path == "/metrics":
                    self._send(writer, 200, "text/plain; version=0.0.4", self._metrics_text().encode())
                else:
                    self._send(writer, 404, "application/json", b'{"error": "not found"}')
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    def _send(self, writer: asyncio.StreamWriter, status: int, ctype: str, data: bytes) -> None:
        writer.write(
            f"HTTP/1.1 {status} OK\r\nContent-Type: {ctype}\r\nContent-Length: {len(data)}\r\n\r\n".encode() + data
        )

    def _json(self, writer: asyncio.StreamWriter, value: object) -> None:
        self._send(writer, 200, "application/json", json.dumps(value).encode())

    def _prompt_tokens(self, messages: list[dict], template_kwargs: dict | None = None) -> int:
        if self._hf_tokenizer is not None:
            ids = self._hf_tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                                         **(template_kwargs or {}))
            return len(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)
        return TEMPLATE_TOKENS + sum(len(str(m.get("content", "")).split()) for m in messages)

    def _faulty(self) -> bool:
        return self.fault is not None and self._chat_requests % self.fault_every == 0

    def _metrics_text(self) -> str:
        c = self.counters
        lines = []
        for name, value in (
            ("vllm:prompt_tokens", c.prompt_tokens),
            ("vllm:generation_tokens", c.generation_tokens),
            ("vllm:spec_decode_num_accepted_tokens", c.spec_accepted_tokens),
            ("vllm:spec_decode_num_draft_tokens", c.spec_draft_tokens),
            ("vllm:spec_decode_num_drafts", c.spec_drafts),
        ):
            # The shape vLLM writes (tests/fixtures/vllm-0.32.0-cpu/metrics_idle.prom).
            lines += [f"# HELP {name}_total {name}.", f"# TYPE {name}_total counter",
                      f'{name}_total{{engine="0",model_name="{MODEL}"}} {float(value)}']
        if self.cache_config_labels is not None:
            labels = ",".join(f'{k}="{v}"' for k, v in self.cache_config_labels.items())
            lines += ["# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig",
                      "# TYPE vllm:cache_config_info gauge", f"vllm:cache_config_info{{{labels}}} 1.0"]
        return "\n".join(lines) + "\n"

    async def _chat(self, writer: asyncio.StreamWriter, request: dict, head_ns: int, arrived_ns: int) -> None:
        self._chat_requests += 1
        faulty = self._faulty()
        if faulty and self.fault == "http-500":
            self._send(writer, 500, "application/json", b'{"error": {"message": "engine fault injected"}}')
            return
        prompt_tokens = self._prompt_tokens(request["messages"], request.get("chat_template_kwargs"))
        output_tokens = int(request.get("max_tokens") or request.get("max_completion_tokens") or 16)
        options = request.get("stream_options") or {}
        continuous = bool(options.get("continuous_usage_stats"))
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        prefill = self._prefill_s(prompt_tokens)
        paced = bool(self.decode_rate or self.total_decode_rate)
        self._in_flight += 1
        try:
            await self._stream(writer, request, head_ns, arrived_ns, prompt_tokens, output_tokens, continuous, prefill,
                               paced, faulty)
        finally:
            self._in_flight -= 1

    async def _stream(self, writer: asyncio.StreamWriter, request: dict, head_ns: int, arrived_ns: int,
                      prompt_tokens: int, output_tokens: int, continuous: bool, prefill: float, paced: bool,
                      faulty: bool) -> None:

        def event(delta: dict | None, done_tokens: int, finish: str | None = None, usage_only: bool = False) -> bytes:
            usage = {"prompt_tokens": prompt_tokens, "completion_tokens": done_tokens,
                     "total_tokens": prompt_tokens + done_tokens}
            if usage_only:
                payload: dict = {"id": "chatcmpl-fixed", "object": "chat.completion.chunk", "model": MODEL,
                                 "choices": [], "usage": usage}
            else:
                payload = {"id": "chatcmpl-fixed", "object": "chat.completion.chunk", "model": MODEL,
                           "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}
                if continuous:
                    payload["usage"] = usage
            return self._chunked(f"data: {json.dumps(payload, separators=(',', ':'))}\n\n".encode())

        if self.mode == "role-first":
            writer.write(event({"role": "assistant", "content": ""}, 0))
            await writer.drain()
        timing: dict[str, Any] = {"head_ns": head_ns, "arrival_ns": arrived_ns, "handled_ns": time.monotonic_ns(),
                                  "max_send_lag_ns": 0}
        tag = "w"
        if self.echo:
            users = [m for m in request["messages"] if m.get("role") == "user"]
            words = str(users[-1].get("content", "")).split() if users else []
            tag = words[0] if words else "w"
            timing["tag"] = tag
        done = 0
        sizes = self.chunk_sizes(output_tokens)
        # Each token's time is read when the one before it is due (shared rate: from the requests in flight then).
        due_ns = arrived_ns + int(prefill * 1e9) - int(self._token_s() * 1e9)
        for n, size in enumerate(sizes):
            due_ns += sum(int(self._token_s() * 1e9) for _ in range(size))
            wait = (due_ns - time.monotonic_ns()) / 1e9
            if wait > 0:
                await asyncio.sleep(wait)
            if faulty and n == len(sizes) // 2:
                if self.fault == "die":
                    os._exit(3)  # as a crashed engine: mid-stream, no goodbye
                if self.fault == "bad-sse":
                    writer.write(self._chunked(b"data: {\"choices\": [{\"delta\": {\"content\": \"w\n\n"))
                elif self.fault == "wrong-shape":
                    writer.write(self._chunked(b'data: {"choices": "not a list", "usage": 7}\n\n'))
            field_name = "reasoning" if self.mode == "reasoning" and done < self.reasoning_tokens else "content"
            text = "".join(f" {tag}{i}" for i in range(done, done + size))
            done += size
            writer.write(event({field_name: text}, done))
            sent = time.monotonic_ns()
            timing["max_send_lag_ns"] = max(timing["max_send_lag_ns"], sent - due_ns)
            timing.setdefault("first_sent_ns", sent)
            if field_name == "content":
                timing.setdefault("first_output_sent_ns", sent)
            timing["last_sent_ns"] = sent
            self.counters.spec_drafts += 1
            self.counters.spec_draft_tokens += DRAFT_TOKENS_PER_STEP_FACTOR * (size - 1)
            self.counters.spec_accepted_tokens += size - 1
            if paced:
                await writer.drain()
        writer.write(event({}, done, finish="length"))
        writer.write(event(None, done, usage_only=True))
        data = b"data: [DONE]\n\n"
        writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n0\r\n\r\n")
        self.timings.append(timing)
        self.counters.prompt_tokens += prompt_tokens
        self.counters.generation_tokens += done

    @staticmethod
    def _chunked(data: bytes) -> bytes:
        return f"{len(data):x}\r\n".encode() + data + b"\r\n"


class _StampedReader(asyncio.StreamReader):
    """A StreamReader that notes when bytes came off the socket (data_received feeds it at once)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(loop=loop)
        self.message_started_ns = 0  # the first read of the message being handled
        self.last_read_ns = 0
        self._between_messages = True

    def feed_data(self, data: bytes) -> None:
        now = time.monotonic_ns()
        if self._between_messages:
            self.message_started_ns, self._between_messages = now, False
        self.last_read_ns = now
        super().feed_data(data)

    def message_done(self) -> None:
        """The handler has the whole message: the next read starts the next one (bytes already
        buffered beyond it came with the last read)."""
        self._between_messages = not self._buffer
        if self._buffer:
            self.message_started_ns = self.last_read_ns


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--prefill-rate", type=float, default=0.0)
    parser.add_argument("--decode-rate", type=float, default=0.0)
    parser.add_argument("--total-decode-rate", type=float, default=0.0,
                        help="tokens/s shared by the requests in flight (--decode-rate caps each stream)")
    parser.add_argument("--mode", default="one", choices=["one", "several", "reasoning", "role-first"])
    parser.add_argument("--tokens-per-chunk", type=int, default=4)
    parser.add_argument("--reasoning-tokens", type=int, default=8)
    parser.add_argument("--first-token-s", type=float, help="a fixed prefill time (s), whatever the prompt")
    parser.add_argument("--no-tokenize", action="store_true", help="answer /tokenize with 404 (as trtllm-serve)")
    parser.add_argument("--tokenizer", help="count prompt tokens with this local HF tokenizer folder")
    parser.add_argument("--fault", choices=FAULTS)
    parser.add_argument("--fault-every", type=int, default=2)
    parser.add_argument("--echo", action="store_true", help="tokens carry the first word of the last user message")
    args = parser.parse_args()
    server = FixedRateServer(args.prefill_rate, args.decode_rate, args.mode, args.tokens_per_chunk,
                             args.reasoning_tokens, port=args.port, tokenize=not args.no_tokenize,
                             tokenizer=args.tokenizer, fault=args.fault, fault_every=args.fault_every,
                             first_token_s=args.first_token_s, echo=args.echo,
                             total_decode_rate=args.total_decode_rate)
    try:  # as vLLM's own HTTP server: its reads of 256 requests landing at once took half as long as asyncio's
        import uvloop
    except ImportError:
        asyncio.run(server.serve_forever())
    else:
        uvloop.run(server.serve_forever())


if __name__ == "__main__":
    main()

"""A test server with known timings: OpenAI chat streaming at a fixed rate.

Loopback only, asyncio, tests only. It speaks enough of vLLM's HTTP API for the
benchmark — GET /v1/models, POST /tokenize, GET /metrics (counters), POST
/v1/chat/completions (streaming, usage and continuous usage stats) — and
schedules every token from the moment the request arrived:

    token i (0-based) is generated at  arrival + prompt_tokens / prefill_rate + i / decode_rate

and a chunk is sent when its last token is generated. So TTFT, decode tok/s and
E2E are known exactly (see `FixedRateServer.truth`). Modes:

    one         one token per chunk
    several     `tokens_per_chunk` tokens per chunk (the first chunk too)
    reasoning   the first `reasoning_tokens` tokens as `reasoning`, then content
    role-first  a role-only chunk at arrival, long before the first token

Tokenization is one token per whitespace-separated word plus TEMPLATE_TOKENS for
the chat template, so /tokenize and usage.prompt_tokens agree.

    python -m tests.helpers.fixed_rate_server --decode-rate 0   # as fast as it can, prints its URL
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from dataclasses import dataclass, field
from typing import Literal

Mode = Literal["one", "several", "reasoning", "role-first"]
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
    decode_rate: float = 100.0  # tokens/s; 0 = as fast as possible
    mode: Mode = "one"
    tokens_per_chunk: int = 4
    reasoning_tokens: int = 8
    port: int = 0
    # Echo: each token is "<tag><i>", the tag being the first word of the last user
    # message, and the timing record names it: a load test can tell whose answer is whose.
    echo: bool = False
    counters: Counters = field(default_factory=Counters)
    # Per chat request, in time.monotonic_ns (one clock for all processes on Linux):
    # arrival, when the first / first-output / last token chunk was written.
    timings: list[dict[str, int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.base_events.Server | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()

    # ------------------------------------------------------------ truth
    def chunk_sizes(self, output_tokens: int) -> list[int]:
        if self.mode == "several":
            k = self.tokens_per_chunk
            return [min(k, output_tokens - i) for i in range(0, output_tokens, k)]
        return [1] * output_tokens

    def truth(self, prompt_tokens: int, output_tokens: int) -> Truth:
        prefill = prompt_tokens / self.prefill_rate if self.prefill_rate else 0.0
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
                "--decode-rate", str(self.decode_rate), "--mode", self.mode,
                "--tokens-per-chunk", str(self.tokens_per_chunk), "--reasoning-tokens", str(self.reasoning_tokens)]
        if self.echo:
            argv.append("--echo")
        root = Path(__file__).resolve().parent.parent.parent
        child = subprocess.Popen(argv, cwd=root, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
        try:
            url = child.stdout.readline().strip()
            if not url.startswith("http://"):
                raise RuntimeError(f"the fixed-rate server did not start (exit {child.poll()})")
            yield url
        finally:
            child.terminate()
            child.wait(10)

    def __enter__(self) -> FixedRateServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._server = self._loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", self.port))
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()
        self._loop.close()

    async def serve_forever(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        print(self.base_url, flush=True)
        async with self._server:
            await self._server.serve_forever()

    # ------------------------------------------------------------ HTTP
    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                arrived = asyncio.get_running_loop().time()
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                arrived = asyncio.get_running_loop().time()  # the schedule starts once the body is in
                if method == "POST" and path == "/v1/chat/completions":
                    await self._chat(writer, json.loads(body), arrived)
                elif method == "POST" and path == "/tokenize":
                    count = self._prompt_tokens(json.loads(body).get("messages", []))
                    self._json(writer, {"count": count, "max_model_len": MAX_MODEL_LEN, "tokens": list(range(count))})
                elif method == "GET" and path == "/health":
                    self._send(writer, 200, "application/json", b"{}")
                elif method == "GET" and path == "/v1/models":
                    self._json(writer, {"object": "list", "data": [{"id": MODEL, "max_model_len": MAX_MODEL_LEN}]})
                elif method == "GET" and path == "/timings":
                    self._json(writer, self.timings)
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

    @staticmethod
    def _prompt_tokens(messages: list[dict]) -> int:
        return TEMPLATE_TOKENS + sum(len(str(m.get("content", "")).split()) for m in messages)

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
        return "\n".join(lines) + "\n"

    async def _chat(self, writer: asyncio.StreamWriter, request: dict, arrived: float) -> None:
        loop = asyncio.get_running_loop()
        prompt_tokens = self._prompt_tokens(request["messages"])
        output_tokens = int(request.get("max_tokens") or 16)
        options = request.get("stream_options") or {}
        continuous = bool(options.get("continuous_usage_stats"))
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        prefill = prompt_tokens / self.prefill_rate if self.prefill_rate else 0.0
        per_token = 1 / self.decode_rate if self.decode_rate else 0.0

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
            data = f"data: {json.dumps(payload, separators=(',', ':'))}\n\n".encode()
            return f"{len(data):x}\r\n".encode() + data + b"\r\n"

        if self.mode == "role-first":
            writer.write(event({"role": "assistant", "content": ""}, 0))
            await writer.drain()
        timing: dict = {"arrival_ns": int(arrived * 1e9)}
        tag = "w"
        if self.echo:
            users = [m for m in request["messages"] if m.get("role") == "user"]
            words = str(users[-1].get("content", "")).split() if users else []
            tag = words[0] if words else "w"
            timing["tag"] = tag
        done = 0
        for size in self.chunk_sizes(output_tokens):
            last_token = done + size - 1
            wait = arrived + prefill + last_token * per_token - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            field_name = "reasoning" if self.mode == "reasoning" and done < self.reasoning_tokens else "content"
            text = "".join(f" {tag}{i}" for i in range(done, done + size))
            done += size
            writer.write(event({field_name: text}, done))
            sent = time.monotonic_ns()
            timing.setdefault("first_sent_ns", sent)
            if field_name == "content":
                timing.setdefault("first_output_sent_ns", sent)
            timing["last_sent_ns"] = sent
            self.counters.spec_drafts += 1
            self.counters.spec_draft_tokens += DRAFT_TOKENS_PER_STEP_FACTOR * (size - 1)
            self.counters.spec_accepted_tokens += size - 1
            if per_token:
                await writer.drain()
        writer.write(event({}, done, finish="length"))
        writer.write(event(None, done, usage_only=True))
        data = b"data: [DONE]\n\n"
        writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n0\r\n\r\n")
        self.timings.append(timing)
        self.counters.prompt_tokens += prompt_tokens
        self.counters.generation_tokens += done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--prefill-rate", type=float, default=0.0)
    parser.add_argument("--decode-rate", type=float, default=0.0)
    parser.add_argument("--mode", default="one", choices=["one", "several", "reasoning", "role-first"])
    parser.add_argument("--tokens-per-chunk", type=int, default=4)
    parser.add_argument("--reasoning-tokens", type=int, default=8)
    parser.add_argument("--echo", action="store_true", help="tokens carry the first word of the last user message")
    args = parser.parse_args()
    server = FixedRateServer(args.prefill_rate, args.decode_rate, args.mode, args.tokens_per_chunk,
                             args.reasoning_tokens, port=args.port, echo=args.echo)
    asyncio.run(server.serve_forever())


if __name__ == "__main__":
    main()

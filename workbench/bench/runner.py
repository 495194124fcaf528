"""Run a benchmark against a running vLLM server.

A run: read the model from GET /v1/models, build one prompt of exactly
`input_tokens` chat-formatted tokens per request (the server's /tokenize counts
them), send warm-up requests (not counted), snapshot /metrics, send the measured
load (concurrency N or a request rate; a request count or a duration), snapshot
/metrics again, and summarize (see workbench.bench.summary.DEFINITIONS).

One async core (`run_benchmark_async`), a thin sync wrapper (`run_benchmark`)
that also works inside a running event loop (Jupyter).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import httpx

from workbench.bench.client import counter_deltas, fetch_counters, fetch_model, stream_request
from workbench.bench.config import BenchConfig, BenchPhase, BenchProgress, ProgressCallback, check_fits, reference_for
from workbench.bench.prompts import Prompt, PromptBuilder
from workbench.bench.records import RequestRecord
from workbench.bench.results import BenchResult, SweepResult
from workbench.bench.summary import summarize
from workbench.errors import WorkbenchError
from workbench.metrics.parse import GENERATION_TOKENS, Snapshot

__all__ = ["request_body", "run_benchmark", "run_benchmark_async", "run_sweep"]


def request_body(config: BenchConfig, model: str, prompt: Prompt) -> dict[str, Any]:
    return {
        "model": model,
        "messages": prompt.messages,
        "max_tokens": config.output_tokens,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        "chat_template_kwargs": {"enable_thinking": config.reasoning},
        **config.extra_body,
    }


class _Reporter:
    """Turns counts into BenchProgress callbacks; no-op without a callback."""

    def __init__(self, callback: ProgressCallback | None) -> None:
        self.callback = callback
        self.phase_started = time.monotonic()

    def start(self, phase: BenchPhase, total: int | None, message: str = "") -> None:
        self.phase_started = time.monotonic()
        self.emit(phase, 0, total, message=message)

    def emit(self, phase: BenchPhase, done: int, total: int | None, errors: int = 0, tokens: int = 0, message: str = "") -> None:
        if self.callback is not None:
            elapsed = time.monotonic() - self.phase_started
            self.callback(BenchProgress(phase, done, total, errors, elapsed, tokens, message))


class _PromptSource:
    """Prompts built ahead of the run; more on demand when a duration bounds it."""

    def __init__(self, builder: PromptBuilder) -> None:
        self.builder = builder
        self.ready: dict[int, Prompt] = {}

    async def prepare(self, indices: Sequence[int], on_done: Callable[[int], None]) -> None:
        gate = asyncio.Semaphore(4)

        async def one(i: int) -> None:
            async with gate:
                self.ready[i] = await self.builder.build(i)
                on_done(len(self.ready))

        await asyncio.gather(*(one(i) for i in indices))

    async def get(self, index: int) -> Prompt:
        prompt = self.ready.pop(index, None)
        return prompt if prompt is not None else await self.builder.build(index)


async def _send_load(
    config: BenchConfig,
    client: httpx.AsyncClient,
    url: str,
    model: str,
    prompts: _PromptSource,
    first_index: int,
    count: int | None,
    duration_s: float | None,
    concurrency: int,
    rate: float | None,
    on_record: Callable[[RequestRecord], None],
) -> list[RequestRecord]:
    """Closed loop (N workers) or open loop (Poisson arrivals, at most N in flight)."""
    records: list[RequestRecord] = []
    deadline = None if duration_s is None else time.monotonic() + duration_s
    next_index = first_index
    end_index = None if count is None else first_index + count

    def take() -> int | None:
        nonlocal next_index
        if end_index is not None and next_index >= end_index:
            return None
        if deadline is not None and time.monotonic() >= deadline:
            return None
        next_index += 1
        return next_index - 1

    async def one(index: int) -> None:
        prompt = await prompts.get(index)
        record = await stream_request(client, url, request_body(config, model, prompt), index, prompt.input_tokens)
        records.append(record)
        on_record(record)

    if rate is None:

        async def worker() -> None:
            while (index := take()) is not None:
                await one(index)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    else:
        rng = random.Random(config.seed)
        gate = asyncio.Semaphore(concurrency)
        tasks = []
        next_at = time.monotonic()

        async def gated(index: int) -> None:
            try:
                await one(index)
            finally:
                gate.release()

        while (index := take()) is not None:
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
            await gate.acquire()
            tasks.append(asyncio.create_task(gated(index)))
            next_at += rng.expovariate(rate)
        await asyncio.gather(*tasks)
    records.sort(key=lambda r: r.index)
    return records


async def _counters_after(client: httpx.AsyncClient, url: str, before: Snapshot | None,
                          expected_output: int) -> Snapshot | None:
    """/metrics after the run; vLLM may publish the last iteration's counts a moment late."""
    after = await fetch_counters(client, url)
    for _ in range(20):
        if before is None or after is None:
            return after
        if (after.total(GENERATION_TOKENS) or 0.0) - (before.total(GENERATION_TOKENS) or 0.0) >= expected_output:
            return after
        await asyncio.sleep(0.1)
        after = await fetch_counters(client, url)
    return after


async def run_benchmark_async(config: BenchConfig, progress: ProgressCallback | None = None) -> BenchResult:
    reporter = _Reporter(progress)
    reporter.start("connecting", None, f"reading the model from {config.url}/v1/models")
    concurrency = config.concurrency if config.request_rate is None else max(config.concurrency, 1)
    limits = httpx.Limits(max_connections=concurrency + 4, max_keepalive_connections=concurrency + 4)
    timeout = httpx.Timeout(config.timeout_s, connect=10.0)
    async with httpx.AsyncClient(limits=limits, timeout=timeout) as client:
        model, max_model_len = await fetch_model(client, config.url)
        check_fits(config, max_model_len)
        builder = PromptBuilder(
            client, config.url, model, config.input_tokens, {"enable_thinking": config.reasoning}, config.seed
        )
        prompts = _PromptSource(builder)
        ahead = config.requests if config.requests is not None else concurrency * 4
        total_prepared = config.warmup_requests + ahead
        reporter.start("preparing", total_prepared, f"building {total_prepared} prompts of {config.input_tokens} tokens")
        await prompts.prepare(
            range(total_prepared), lambda done: reporter.emit("preparing", done, total_prepared)
        )
        chat_url = f"{config.url}/v1/chat/completions"

        if config.warmup_requests:
            reporter.start("warmup", config.warmup_requests)
            warm_done: list[RequestRecord] = []

            def on_warm(record: RequestRecord) -> None:
                warm_done.append(record)
                errors = sum(1 for r in warm_done if not r.ok)
                reporter.emit("warmup", len(warm_done), config.warmup_requests, errors)

            warm = await _send_load(
                config, client, chat_url, model, prompts, 0, config.warmup_requests, None,
                min(concurrency, config.warmup_requests), None, on_warm,
            )
            if not any(r.ok for r in warm):
                raise WorkbenchError(
                    f"Every warm-up request failed; the first said: {warm[0].error}",
                    hint="Check the server log; the server may be overloaded or reject these settings.",
                )

        before = await fetch_counters(client, config.url)
        started_at = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        reporter.start("running", config.requests)
        done: list[RequestRecord] = []
        tokens = 0

        def on_record(record: RequestRecord) -> None:
            nonlocal tokens
            done.append(record)
            tokens += record.completion_tokens or 0
            errors = sum(1 for r in done if not r.ok)
            reporter.emit("running", len(done), config.requests, errors, tokens)

        records = await _send_load(
            config, client, chat_url, model, prompts, config.warmup_requests, config.requests,
            config.duration_s, concurrency, config.request_rate, on_record,
        )
        summary = summarize(records)
        after = await _counters_after(client, config.url, before, summary.output_tokens)
    mismatches = sum(
        1 for r in records if r.ok and r.target_input_tokens is not None and r.prompt_tokens != r.target_input_tokens
    )
    result = BenchResult(
        config=config,
        model=model,
        max_model_len=max_model_len,
        started_at=started_at,
        summary=summary,
        records=records,
        warmup=config.warmup_requests,
        server_counters=counter_deltas(before, after),
        input_length_mismatches=mismatches,
        reference=reference_for(config, model),
    )
    reporter.emit("done", len(records), config.requests, summary.errors, summary.output_tokens)
    return result


def _run_sync(coro_factory: Callable[[], Any]) -> Any:
    """asyncio.run, or in a worker thread when a loop already runs (Jupyter)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro_factory())
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(coro_factory())
        except BaseException as exc:  # re-raised in the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=target, name="workbench-bench")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


def run_benchmark(config: BenchConfig, progress: ProgressCallback | None = None) -> BenchResult:
    """Run one benchmark and return its result; `progress` is called as it goes."""
    return _run_sync(lambda: run_benchmark_async(config, progress))


def run_sweep(
    config: BenchConfig,
    concurrencies: Sequence[int],
    progress: ProgressCallback | None = None,
    requests_per_user: int = 4,
) -> SweepResult:
    """The same shape at each concurrency; each level sends max(requests, 4 x concurrency) requests."""
    levels = []
    for concurrency in concurrencies:
        requests = None if config.requests is None else max(config.requests, requests_per_user * concurrency)
        level = replace(config, concurrency=concurrency, requests=requests, label=f"concurrency {concurrency}")
        levels.append(run_benchmark(level, progress))
    return SweepResult(levels)


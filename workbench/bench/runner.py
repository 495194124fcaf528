"""Run a benchmark against a running OpenAI-compatible server (vLLM, trtllm-serve).

A run: read the model from GET /v1/models (or take --model), build one prompt of
exactly `input_tokens` chat-formatted tokens per request (the server's /tokenize
counts them, or the model's own tokenizer where there is none; or, with
BenchConfig.prompts, a workload's own prompts, labelled by category), send warm-up
requests (not counted), open one connection per stream, snapshot /metrics, send
the measured load while a probe times the client's own event-loop lag, snapshot
/metrics again, and summarize (see workbench.bench.summary.DEFINITIONS).

Nothing measured is lost: a request that fails is counted with its message; a bad
/metrics answer loses only the counters; an interrupted run (Ctrl-C, the server
gone) returns what it measured, marked partial.

One async core (`run_benchmark_async`), a thin sync wrapper (`run_benchmark`)
that also works inside a running event loop (Jupyter).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import aiohttp

from workbench.bench.cache_check import fetch_cache_warnings
from workbench.bench.client import counter_deltas, fetch_counters, fetch_model, open_connections, open_session
from workbench.bench.config import (BenchConfig, BenchPhase, BenchProgress, ProgressCallback, chat_body, check_fits,
                                    reference_for)
from workbench.bench.lag import LagProbe, collector_held_off
from workbench.bench.load import send_load
from workbench.bench.prompts import Prompt, PromptBuilder, TokenCounter, choose_counter
from workbench.bench.records import RequestRecord
from workbench.bench.results import BenchResult, SweepResult
from workbench.bench.sessions import SessionPlan, plan_sessions, run_sessions, session_context_estimate
from workbench.bench.summary import summarize
from workbench.errors import BenchError, BenchStopped, StopReason, WorkbenchError
from workbench.metrics.parse import GENERATION_TOKENS, Snapshot
from workbench.syncbridge import run_sync
from workbench.telemetry import GpuPoller

__all__ = ["request_body", "run_benchmark", "run_benchmark_async", "run_sweep"]

StopCheck = Callable[[], bool]
GPU_INTERVAL_S = 0.5
log = logging.getLogger("workbench.bench")


def request_body(config: BenchConfig, model: str, prompt: Prompt, max_tokens: int | None = None) -> dict[str, Any]:
    return chat_body(config, model, prompt.messages, max_tokens or config.output_tokens)


class _Reporter:
    """Turns counts into BenchProgress callbacks; no-op without a callback."""

    def __init__(self, callback: ProgressCallback | None) -> None:
        self.callback = callback
        self.phase_started = time.monotonic()

    def start(self, phase: BenchPhase, total: int | None, message: str = "") -> None:
        self.phase_started = time.monotonic()
        self.emit(phase, 0, total, message=message)

    def emit(self, phase: BenchPhase, done: int, total: int | None, errors: int = 0, tokens: int = 0,
             message: str = "") -> None:
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


class _FixedPrompts:
    """A workload's own prompts (BenchConfig.prompts): measured request k sends prompts[k % n], so every
    level and every server gets the same prompts in the same order; warm-up takes from the end."""

    source = "the workload's own prompts (lengths as the server counts them)"

    def __init__(self, prompts: list[dict[str, Any]], warmup: int) -> None:
        self.prompts = prompts
        self.warmup = warmup

    def at(self, index: int) -> dict[str, Any]:
        return self.prompts[(index - self.warmup) % len(self.prompts)]

    async def get(self, index: int) -> Prompt:
        return Prompt(messages=self.at(index)["messages"], input_tokens=0)


async def _counters_after(session: aiohttp.ClientSession, url: str, before: Snapshot | None,
                          expected_output: int) -> tuple[Snapshot | None, str | None]:
    """/metrics after the run; vLLM may publish the last iteration's counts a moment late."""
    after, problem = await fetch_counters(session, url)
    for _ in range(20):
        if before is None or after is None:
            return after, problem
        if (after.total(GENERATION_TOKENS) or 0.0) - (before.total(GENERATION_TOKENS) or 0.0) >= expected_output:
            return after, problem
        await asyncio.sleep(0.1)
        after, problem = await fetch_counters(session, url)
    return after, problem


async def _model(config: BenchConfig, session: aiohttp.ClientSession, notes: list[str]) -> tuple[str, int | None]:
    if config.model is None:
        return await fetch_model(session, config.url)
    try:
        served, max_model_len = await fetch_model(session, config.url)
    except WorkbenchError as exc:
        notes.append(f"/v1/models was not usable ({exc.message}); benchmarked the model named {config.model} as given")
        return config.model, None
    return config.model, max_model_len if served == config.model else None


class _FirstPrompts:
    """Each session's first prompt, of an exact length, built before the measured window."""

    def __init__(self, counter: TokenCounter, seed: int) -> None:
        self.counter, self.seed = counter, seed
        self.builders: dict[int, PromptBuilder] = {}
        self.ready: dict[tuple[int, int], Prompt] = {}

    async def build(self, session: int, tokens: int) -> Prompt:
        builder = self.builders.setdefault(tokens, PromptBuilder(self.counter, tokens, self.seed + 1))
        return await builder.build(session)

    async def prepare(self, plans: list[SessionPlan], on_done: Callable[[int], None]) -> None:
        gate = asyncio.Semaphore(4)

        async def one(session: int, tokens: int) -> None:
            async with gate:
                self.ready[(session, tokens)] = await self.build(session, tokens)
                on_done(len(self.ready))

        firsts = {(p.session, p.turns[0].new_tokens) for p in plans if p.turns and p.turns[0].messages is None}
        await asyncio.gather(*(one(s, n) for s, n in firsts))

    async def get(self, session: int, tokens: int) -> Prompt:
        prompt = self.ready.pop((session, tokens), None)
        return prompt if prompt is not None else await self.build(session, tokens)


async def _session_setup(config: BenchConfig, plans: list[SessionPlan], session: aiohttp.ClientSession,
                         max_model_len: int | None, counter: TokenCounter, reporter: _Reporter,
                         on_warning: Callable[[str], None] | None) -> tuple[BenchConfig, _FirstPrompts, list[str]]:
    """A session workload's first prompts and the cache warnings, before the run."""
    turns = sum(len(p.turns) for p in plans)
    reached = max(session_context_estimate(p) for p in plans)
    if max_model_len is not None and reached > max_model_len:
        raise BenchError(
            f"The sessions would reach about {reached} tokens of context, past this server's max-model-len of "
            f"{max_model_len}.",
            hint="Use fewer turns, or shorter first prompts, turn inputs or turn outputs (or a trace with "
            "shorter inputs).",
            settings=("turns", "input_tokens", "turn_input_tokens", "turn_output_tokens"))
    config = replace(config, requests=turns, duration_s=None, concurrency=len(plans))
    _, warnings = await fetch_cache_warnings(session, config.url)
    for warning in warnings:
        log.warning("%s", warning)
        if on_warning is not None:
            on_warning(warning)
    firsts = _FirstPrompts(counter, config.seed)
    reporter.start("preparing", len(plans), f"building the first prompt of {len(plans)} sessions ({counter.source})")
    await firsts.prepare(plans, lambda done: reporter.emit("preparing", done, len(plans)))
    return config, firsts, [f"WARNING: {w}" for w in warnings]


async def run_benchmark_async(config: BenchConfig, progress: ProgressCallback | None = None,
                              should_stop: StopCheck | None = None,
                              on_warning: Callable[[str], None] | None = None) -> BenchResult:
    reporter = _Reporter(progress)
    reporter.start("connecting", None, f"reading the model from {config.url}/v1/models")
    plans = plan_sessions(config) if config.is_session_workload else []  # a bad trace fails before connecting
    concurrency = max(len(plans), 1) if plans else config.concurrency
    notes: list[str] = []
    async with open_session(concurrency, config.timeout_s) as session:
        model, max_model_len = await _model(config, session, notes)
        if config.prompts is None and not config.is_session_workload:
            check_fits(config, max_model_len)
        template_kwargs = {"enable_thinking": config.reasoning}
        fixed = None if config.prompts is None else _FixedPrompts(config.prompts, config.warmup_requests)
        prompts: _PromptSource | _FixedPrompts
        if fixed is not None:
            prompts, lengths_from = fixed, fixed.source
        else:
            counter = await choose_counter(session, config.url, model, config.tokenizer, template_kwargs)
            lengths_from = counter.source
            if plans:
                config, firsts, warned = await _session_setup(config, plans, session, max_model_len, counter,
                                                              reporter, on_warning)
                notes += warned
            prompts = _PromptSource(PromptBuilder(counter, config.input_tokens, config.seed))
            ahead = config.requests if config.requests is not None else concurrency * 4
            total_prepared = config.warmup_requests + (0 if plans else ahead)
            reporter.start("preparing", total_prepared,
                           f"building {total_prepared} prompts of {config.input_tokens} tokens ({counter.source})")
            await prompts.prepare(range(total_prepared),
                                  lambda done: reporter.emit("preparing", done, total_prepared))
        chat_url = f"{config.url}/v1/chat/completions"

        async def payload(index: int) -> tuple[bytes, int | None]:
            prompt = await prompts.get(index)
            if fixed is None:
                return json.dumps(request_body(config, model, prompt)).encode(), prompt.input_tokens
            body = request_body(config, model, prompt, fixed.at(index).get("output_tokens"))
            return json.dumps(body).encode(), None

        if config.warmup_requests:
            reporter.start("warmup", config.warmup_requests)
            warm_done: list[RequestRecord] = []

            def on_warm(record: RequestRecord) -> None:
                warm_done.append(record)
                errors = sum(1 for r in warm_done if not r.ok)
                reporter.emit("warmup", len(warm_done), config.warmup_requests, errors)

            warm = await send_load(session, chat_url, payload, 0, config.warmup_requests, None,
                                   min(concurrency, config.warmup_requests), None, config.seed, on_warm, should_stop)
            if warm.stopped is not None:
                raise BenchStopped(f"The warm-up ended early: {warm.stopped.message}. Nothing was measured yet.",
                                   reason=warm.stopped.reason,
                                   hint="Check that the server is up (its log), then run again.")
            if not any(r.ok for r in warm.records):
                raise BenchError(
                    f"Every warm-up request failed; the first said: {warm.records[0].error}",
                    hint="Check the server log; the server may be overloaded or reject these settings.",
                )

        # One pooled connection per stream, opened just before the window (not inside it).
        opened = await open_connections(session, config.url, concurrency)
        before, before_problem = await fetch_counters(session, config.url)
        started_at = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        reporter.start("running", config.requests, f"{opened} connections open")
        finished = errors = tokens = 0

        def on_record(record: RequestRecord) -> None:
            # Constant work per answer: at 256 streams the answers end together, and a count over all
            # records so far (quadratic) held back the reading of the last tokens still arriving.
            nonlocal finished, errors, tokens
            finished += 1
            errors += 0 if record.ok else 1
            tokens += record.completion_tokens or 0
            reporter.emit("running", finished, config.requests, errors, tokens)

        # The GPUs beside the server, read in their own thread over the measured window (NVML: ~0.05 ms a read).
        gpus = GpuPoller(interval=GPU_INTERVAL_S, history=100_000)
        gpu_start = time.time()
        gpus.start()
        try:
            with collector_held_off():
                async with LagProbe() as probe:
                    if plans:
                        outcome = await run_sessions(session, chat_url, config, model, plans, firsts.get,
                                                     config.warmup_requests, on_record, should_stop)
                    else:
                        outcome = await send_load(session, chat_url, payload, config.warmup_requests,
                                                  config.requests, config.duration_s, concurrency,
                                                  config.request_rate, config.seed, on_record, should_stop)
        finally:
            gpus.stop()
            gpus.sample_once()
            gpus.source.close()
        gpu = gpus.summarize(gpu_start)
        lag = probe.stop()
        records = outcome.records
        if fixed is not None:
            for record in records:
                record.category = fixed.at(record.index).get("category")
        summary = summarize(records, config.goodput)
        after_problem: str | None
        if outcome.stopped is not None and outcome.stopped.reason is StopReason.SERVER_GONE:
            after, after_problem = None, "not read: the server stopped answering"
        else:
            after, after_problem = await _counters_after(session, config.url, before, summary.output_tokens)
    server_counters = counter_deltas(before, after)
    if server_counters is not None:
        summary.prefix_cache_hit_rate_metrics = server_counters.prefix_cache_hit_rate
    mismatches = sum(
        1 for r in records if r.ok and r.target_input_tokens is not None and r.prompt_tokens != r.target_input_tokens
    )
    partial = None
    if outcome.stopped is not None:
        partial = outcome.stopped.message + (f"; {outcome.in_flight_dropped} requests in flight were dropped"
                                             if outcome.in_flight_dropped else "")
    result = BenchResult(
        config=config,
        model=model,
        max_model_len=max_model_len,
        started_at=started_at,
        summary=summary,
        records=records,
        warmup=config.warmup_requests,
        server_counters=server_counters,
        input_length_mismatches=mismatches,
        reference=reference_for(config, model),
        client_lag=lag,
        partial=partial,
        stop_reason=None if outcome.stopped is None else outcome.stopped.reason,
        counters_problem=before_problem or after_problem,
        input_lengths_from=lengths_from,
        notes=notes,
        gpu=gpu,
    )
    reporter.emit("done", len(records), config.requests, summary.errors, summary.output_tokens,
                  message="" if partial is None else f"partial: {partial}")
    return result


# The client's event loop: uvloop where installed (vLLM depends on it), asyncio's own otherwise;
# WORKBENCH_BENCH_LOOP=asyncio forces asyncio's (see benchmarks/bench_vs_aiperf.py for the difference).
LOOP_ENV = "WORKBENCH_BENCH_LOOP"


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    if os.environ.get(LOOP_ENV, "uvloop") == "asyncio":
        return None
    try:
        import uvloop  # optional: the faster loop where it is installed
    except ImportError:
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def run_benchmark(config: BenchConfig, progress: ProgressCallback | None = None,
                  should_stop: StopCheck | None = None,
                  on_warning: Callable[[str], None] | None = None) -> BenchResult:
    """Run one benchmark and return its result; `progress` is called as it goes.

    Ctrl-C (or `should_stop()` turning True) ends the load early: the result then
    holds what was measured, with `partial` saying why. `on_warning` hears, before the
    load starts, what would stop a session workload's prefix cache from hitting (also
    kept in the result's notes).
    """
    return run_sync(lambda: run_benchmark_async(config, progress, should_stop, on_warning),
                    loop_factory=_loop_factory(), thread_name="workbench-bench")


def run_sweep(
    config: BenchConfig,
    concurrencies: Sequence[int],
    progress: ProgressCallback | None = None,
    requests_per_user: int = 4,
    should_stop: StopCheck | None = None,
) -> SweepResult:
    """The same shape at each concurrency; each level sends max(requests, 4 x concurrency) requests.

    A level that ends partial (interrupted, the server gone) ends the sweep: the
    levels so far are the result.
    """
    levels = []
    for concurrency in concurrencies:
        requests = None if config.requests is None else max(config.requests, requests_per_user * concurrency)
        level = replace(config, concurrency=concurrency, requests=requests, label=f"concurrency {concurrency}")
        result = run_benchmark(level, progress, should_stop)
        levels.append(result)
        if result.partial is not None:
            break
    return SweepResult(levels, planned=list(concurrencies))

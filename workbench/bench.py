"""Benchmark a running vLLM server: the notebook/app API.

    from workbench.bench import BenchConfig, run_benchmark, preset_config
    result = run_benchmark(preset_config("smoke", url="http://127.0.0.1:8000"),
                           progress=print)
    result.summary.ttft_ms.p50, result.summary.output_tok_s, result.save("out/")

A run: read the model from GET /v1/models, build one prompt of exactly
`input_tokens` chat-formatted tokens per request (the server's /tokenize counts
them), send warm-up requests (not counted), snapshot /metrics, send the measured
load (concurrency N or a request rate; a request count or a duration), snapshot
/metrics again, and summarize (see bench_metrics.DEFINITIONS).

One async core (`run_benchmark_async`), a thin sync wrapper (`run_benchmark`)
that also works inside a running event loop (Jupyter).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import httpx

from workbench import __version__
from workbench.bench_client import counter_deltas, fetch_counters, fetch_model, stream_request
from workbench.bench_metrics import DEFINITIONS, RequestRecord, ServerCounters, Summary, summarize
from workbench.bench_prompts import Prompt, PromptBuilder
from workbench.errors import WorkbenchError

__all__ = [
    "MODEL_CARD_REFERENCE",
    "PRESETS",
    "BenchConfig",
    "BenchProgress",
    "BenchResult",
    "BenchShapeError",
    "check_fits",
    "SweepResult",
    "compare_results",
    "default_url",
    "load_result",
    "preset_config",
    "run_benchmark",
    "run_benchmark_async",
    "run_sweep",
    "sweep_levels",
]

Phase = Literal["connecting", "preparing", "warmup", "running", "done"]
ProgressCallback = Callable[["BenchProgress"], None]

# What the model card reports (NVIDIA's measurement, not ours): shown beside a
# SPEED-Bench-shaped result, never as if measured here.
MODEL_CARD_REFERENCE: dict[str, Any] = {
    "source": "NVIDIA Nemotron 3.5 Lightning model card",
    "hardware": "NVIDIA DGX Spark (GB10)",
    "shape": {"input_tokens": 8192, "output_tokens": 256, "concurrency": 1},
    "benchmark": "SPEED-Bench shape, aiperf 0.12.0",
    "server": "vLLM 0.28.1rc1.dev130, DSpark speculative decoding (7 tokens)",
    "measured": "2026-08-31",
    "prefill_tok_s_per_user": 7252.0,
    "decode_tok_s_per_user": 93.3,
    "e2e_mean_s": 3.98,
    # 8192 / 7252 + 255 / 93.3 = 3.86 s: the card's E2E agrees with its per-user rates.
    "e2e_from_rates_s": round(8192 / 7252 + 255 / 93.3, 2),
}


@dataclass
class BenchConfig:
    """The load to send. `url` is the server's base URL (no /v1)."""

    url: str
    input_tokens: int = 128
    output_tokens: int = 32
    concurrency: int = 1  # in-flight requests; with request_rate, the cap on them
    request_rate: float | None = None  # requests/s, Poisson arrivals; None = closed loop
    requests: int | None = 8  # measured requests; None with duration_s
    duration_s: float | None = None  # stop sending after this long, then let in-flight finish
    warmup_requests: int = 1
    reasoning: bool = False  # chat_template_kwargs.enable_thinking
    seed: int = 0
    timeout_s: float = 600.0
    preset: str | None = None
    label: str | None = None  # a name for this configuration in comparisons
    extra_body: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.url = self.url.rstrip("/")
        if self.url.endswith("/v1"):
            self.url = self.url[: -len("/v1")]
        problems = []
        if self.input_tokens < 1:
            problems.append("input_tokens must be at least 1 (--isl)")
        if self.output_tokens < 1:
            problems.append("output_tokens must be at least 1 (--osl)")
        if self.concurrency < 1:
            problems.append("concurrency must be at least 1 (--concurrency)")
        if self.request_rate is not None and self.request_rate <= 0:
            problems.append("request_rate must be positive (--request-rate)")
        if (self.requests is None) == (self.duration_s is None):
            problems.append("give exactly one of a request count (--requests) or a duration (--duration)")
        if self.requests is not None and self.requests < 1:
            problems.append("requests must be at least 1 (--requests)")
        if self.duration_s is not None and self.duration_s <= 0:
            problems.append("duration must be positive (--duration)")
        if self.warmup_requests < 0:
            problems.append("warmup_requests cannot be negative (--warmup)")
        if problems:
            raise WorkbenchError("Invalid benchmark settings: " + "; ".join(problems) + ".")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BenchConfig:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})

    @property
    def is_speed_bench_shaped(self) -> bool:
        return self.output_tokens == 256 and self.concurrency == 1 and self.request_rate is None


@dataclass(frozen=True)
class BenchProgress:
    phase: Phase
    done: int  # requests finished in this phase
    total: int | None  # None when the run is bounded by a duration
    errors: int = 0
    elapsed_s: float = 0.0
    output_tokens: int = 0
    message: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class BenchShapeError(WorkbenchError):
    """The requested shape does not fit the server; `suggested_input_tokens` does."""

    def __init__(self, message: str, *, hint: str, suggested_input_tokens: int | None) -> None:
        super().__init__(message, hint=hint)
        self.suggested_input_tokens = suggested_input_tokens


@dataclass
class BenchResult:
    config: BenchConfig
    model: str
    max_model_len: int | None
    started_at: str  # wall clock, ISO 8601 UTC
    summary: Summary
    records: list[RequestRecord]
    warmup: int  # warm-up requests sent and not counted
    server_counters: ServerCounters | None
    input_length_mismatches: int  # requests whose usage.prompt_tokens != the target
    definitions: dict[str, str] = field(default_factory=lambda: dict(DEFINITIONS))
    reference: dict[str, Any] | None = None
    workbench_version: str = __version__

    @property
    def label(self) -> str:
        return self.config.label or f"{self.model} @ {self.config.url}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "config": self.config.to_dict(),
            "model": self.model,
            "max_model_len": self.max_model_len,
            "started_at": self.started_at,
            "summary": self.summary.to_dict(),
            "server_counters": None if self.server_counters is None else self.server_counters.to_dict(),
            "input_length_mismatches": self.input_length_mismatches,
            "warmup": self.warmup,
            "definitions": self.definitions,
            "reference": self.reference,
            "workbench_version": self.workbench_version,
            "records": [r.to_dict() for r in self.records],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BenchResult:
        counters = data.get("server_counters")
        return cls(
            config=BenchConfig.from_dict(data["config"]),
            model=data["model"],
            max_model_len=data.get("max_model_len"),
            started_at=data["started_at"],
            summary=Summary.from_dict(data["summary"]),
            records=[RequestRecord.from_dict(r) for r in data.get("records", [])],
            warmup=data.get("warmup", 0),
            server_counters=None if counters is None else ServerCounters.from_dict(counters),
            input_length_mismatches=data.get("input_length_mismatches", 0),
            definitions=data.get("definitions", dict(DEFINITIONS)),
            reference=data.get("reference"),
            workbench_version=data.get("workbench_version", "?"),
        )

    def save(self, directory: Path | str, stem: str = "bench") -> dict[str, Path]:
        """Write <stem>.json (everything), <stem>-requests.csv and <stem>-summary.csv."""
        from workbench.bench_report import write_result_files

        return write_result_files(self, Path(directory), stem)


@dataclass
class SweepResult:
    """One BenchResult per concurrency level, same shape."""

    levels: list[BenchResult]

    def plot_rows(self) -> list[dict[str, Any]]:
        """Throughput vs concurrency and latency percentiles: one flat row per level."""
        rows = []
        for result in self.levels:
            s = result.summary
            rows.append(
                {
                    "concurrency": result.config.concurrency,
                    "requests": s.requests,
                    "errors": s.errors,
                    "request_throughput": s.request_throughput,
                    "output_tok_s": s.output_tok_s,
                    "total_tok_s": s.total_tok_s,
                    "decode_tok_s_per_user_mean": s.decode_tok_s_per_user.mean,
                    "prefill_tok_s_per_user_mean": s.prefill_tok_s_per_user.mean,
                    **{f"ttft_ms_p{q}": getattr(s.ttft_ms, f"p{q}") for q in (50, 90, 99)},
                    **{f"tpot_ms_p{q}": getattr(s.tpot_ms, f"p{q}") for q in (50, 90, 99)},
                    **{f"e2e_ms_p{q}": getattr(s.e2e_ms, f"p{q}") for q in (50, 90, 99)},
                }
            )
        return rows

    def to_dict(self) -> dict[str, Any]:
        return {"levels": [r.to_dict() for r in self.levels], "plot_rows": self.plot_rows()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SweepResult:
        return cls([BenchResult.from_dict(r) for r in data["levels"]])

    def save(self, directory: Path | str, stem: str = "sweep") -> dict[str, Path]:
        from workbench.bench_report import write_sweep_files

        return write_sweep_files(self, Path(directory), stem)


# ---------------------------------------------------------------- presets

PRESETS: dict[str, dict[str, Any]] = {
    "speed-bench": {
        "description": "the model card's SPEED-Bench shape: 8K input, 256 output, concurrency 1",
        "input_tokens": 8192,
        "output_tokens": 256,
        "concurrency": 1,
        "requests": 10,
        "warmup_requests": 1,
    },
    "sweep": {
        "description": "concurrency 1, 2, 4, ... up to max-num-seqs (or --max-concurrency); "
        "1024 input, 128 output, 4 requests per concurrent user (at least 8)",
        "input_tokens": 1024,
        "output_tokens": 128,
        "concurrency": 1,
        "requests": 8,
        "warmup_requests": 1,
    },
    "smoke": {
        "description": "a short check that the benchmark works: 128 input, 32 output, concurrency 2, 8 requests",
        "input_tokens": 128,
        "output_tokens": 32,
        "concurrency": 2,
        "requests": 8,
        "warmup_requests": 1,
    },
}


def preset_config(name: str, url: str, **overrides: Any) -> BenchConfig:
    """A preset's BenchConfig; keyword arguments (None ignored) override its fields."""
    if name not in PRESETS:
        from workbench.errors import SelectionError

        raise SelectionError(f"Unknown benchmark preset {name!r}.", hint="Choose one of: " + ", ".join(PRESETS))
    values = {k: v for k, v in PRESETS[name].items() if k != "description"}
    values.update({k: v for k, v in overrides.items() if v is not None})
    if values.get("duration_s") is not None and "requests" not in overrides:
        values["requests"] = None
    return BenchConfig(url=url, preset=name, **values)


def sweep_levels(max_concurrency: int) -> list[int]:
    """1, 2, 4, ... up to max_concurrency (which ends the list even if not a power of two)."""
    if max_concurrency < 1:
        raise WorkbenchError("The sweep needs a maximum concurrency of at least 1 (--max-concurrency).")
    levels = []
    level = 1
    while level < max_concurrency:
        levels.append(level)
        level *= 2
    levels.append(max_concurrency)
    return levels


def default_url() -> str:
    """The server the launcher started, if the launcher can say; else a clear error."""
    try:
        from workbench import launcher  # another area's module; may not exist yet
    except ImportError:
        launcher = None
    find_running = getattr(launcher, "find_running", None)
    if find_running is not None:
        running = find_running()
        if running:
            url = running if isinstance(running, str) else getattr(running, "base_url", None)
            if url:
                return str(url)
    raise WorkbenchError(
        "No server to benchmark: none started by the workbench is running.",
        hint="Pass --url http://HOST:PORT of a running vLLM server, or start one with `python -m workbench serve`.",
    )


def scaled_input_tokens(max_model_len: int, output_tokens: int) -> int | None:
    """The largest power-of-two input that fits beside the output."""
    room = max_model_len - output_tokens
    if room < 16:
        return None
    size = 16
    while size * 2 <= room:
        size *= 2
    return size


def check_fits(config: BenchConfig, max_model_len: int | None) -> None:
    if max_model_len is None or config.input_tokens + config.output_tokens <= max_model_len:
        return
    suggested = scaled_input_tokens(max_model_len, config.output_tokens)
    shape = f"{config.input_tokens} input + {config.output_tokens} output tokens"
    what = "The SPEED-Bench shape" if config.preset == "speed-bench" else "This shape"
    hint = "Lower --isl/--osl so input + output fits in the server's max-model-len."
    if suggested:
        preset = f"--preset {config.preset} " if config.preset else ""
        hint = (
            f"Run the scaled-down shape instead: python -m workbench bench {preset}--isl {suggested} "
            f"(the model card's 8K figures are not comparable to a {suggested}-token run)."
        )
    raise BenchShapeError(
        f"{what} ({shape}) does not fit this server's max-model-len of {max_model_len}.",
        hint=hint,
        suggested_input_tokens=suggested,
    )


def reference_for(config: BenchConfig, model: str) -> dict[str, Any] | None:
    """The model card's figures, with what differs from this run said plainly."""
    if not config.is_speed_bench_shaped:
        return None
    notes = [
        "Measured by NVIDIA on a DGX Spark (GB10) with speculative decoding, not on this machine; "
        f"this run measured {model} at {config.url}. Different hardware and model: compare the "
        "shape of the figures, not their size."
    ]
    if config.input_tokens != 8192:
        notes.append(f"This run used {config.input_tokens} input tokens, the card 8192.")
    return {**MODEL_CARD_REFERENCE, "notes": notes}


# ---------------------------------------------------------------- running


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

    def start(self, phase: Phase, total: int | None, message: str = "") -> None:
        self.phase_started = time.monotonic()
        self.emit(phase, 0, total, message=message)

    def emit(self, phase: Phase, done: int, total: int | None, errors: int = 0, tokens: int = 0, message: str = "") -> None:
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


async def _counters_after(client: httpx.AsyncClient, url: str, before: dict[str, float] | None, expected_output: int) -> dict[str, float] | None:
    """/metrics after the run; vLLM may publish the last iteration's counts a moment late."""
    after = await fetch_counters(client, url)
    for _ in range(20):
        if before is None or after is None:
            return after
        if after.get("generation_tokens", 0) - before.get("generation_tokens", 0) >= expected_output:
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


def load_result(path: Path | str) -> BenchResult:
    """A result saved by BenchResult.save (its .json file)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError as exc:
        raise WorkbenchError(f"No such result file: {path}", hint="Pass the .json a benchmark run wrote.") from exc
    except (OSError, ValueError) as exc:
        raise WorkbenchError(f"Cannot read {path} as a benchmark result: {exc}") from exc
    try:
        return BenchResult.from_dict(data)
    except (KeyError, TypeError) as exc:
        raise WorkbenchError(
            f"{path} is not a workbench benchmark result (missing {exc}).",
            hint="Pass the bench.json written by `python -m workbench bench`.",
        ) from exc


_COMPARED = (
    ("requests", "requests", lambda s: s.requests),
    ("errors", "errors", lambda s: s.errors),
    ("output tok/s", "tok/s", lambda s: s.output_tok_s),
    ("total tok/s", "tok/s", lambda s: s.total_tok_s),
    ("requests/s", "req/s", lambda s: s.request_throughput),
    ("TTFT mean", "ms", lambda s: s.ttft_ms.mean),
    ("TTFT p99", "ms", lambda s: s.ttft_ms.p99),
    ("TPOT mean", "ms", lambda s: s.tpot_ms.mean),
    ("ITL p99 (per chunk)", "ms", lambda s: s.itl_ms.p99),
    ("E2E mean", "ms", lambda s: s.e2e_ms.mean),
    ("E2E p99", "ms", lambda s: s.e2e_ms.p99),
    ("decode tok/s per user", "tok/s", lambda s: s.decode_tok_s_per_user.mean),
    ("prefill tok/s per user", "tok/s", lambda s: s.prefill_tok_s_per_user.mean),
)


def compare_results(a: BenchResult, b: BenchResult) -> list[dict[str, Any]]:
    """Side-by-side rows: metric, unit, a, b, and b's change relative to a in %."""
    rows = []
    for name, unit, get in _COMPARED:
        va, vb = get(a.summary), get(b.summary)
        change = None if va in (None, 0) or vb is None else (vb - va) / va * 100
        rows.append({"metric": name, "unit": unit, "a": va, "b": vb, "change_pct": change})
    return rows

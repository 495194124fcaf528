"""What a benchmark sends: BenchConfig, the presets, and the checks before a run.

    from workbench.bench import preset_config, run_benchmark
    result = run_benchmark(preset_config("smoke", url="http://127.0.0.1:8000"), progress=print)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from workbench.bench.goodput import parse_goodput
from workbench.errors import BenchError, BenchShapeError, SelectionError
from workbench.urls import normalize_base_url

__all__ = ["DGX_SPARK_REFERENCE", "PRESETS", "SESSION_WORKLOADS", "WORKLOADS", "BenchConfig", "chat_body", "BenchPhase", "BenchProgress", "ProgressCallback",
           "check_fits", "preset_config", "reference_for", "scaled_input_tokens", "sweep_levels"]

BenchPhase = Literal["connecting", "preparing", "warmup", "running", "done"]
# single: independent one-turn requests; multiturn / agentic / trace: sessions whose
# context grows turn by turn (workbench.bench.sessions).
WORKLOADS = ("single", "multiturn", "agentic", "trace")
SESSION_WORKLOADS = ("multiturn", "agentic", "trace")
ProgressCallback = Callable[["BenchProgress"], None]


# What the recipes.vllm.ai page for Nemotron 3.5 Lightning reports in its Notes
# (not the model card, and not measured here): shown beside a SPEED-Bench-shaped
# result, never as if measured here.
DGX_SPARK_REFERENCE: dict[str, Any] = {
    "source": "the recipes.vllm.ai page for Nemotron 3.5 Lightning (its Notes on DGX Spark), not the model card",
    "source_url": "https://recipes.vllm.ai/nvidia/NVIDIA-Nemotron-3.5-Lightning-30B-A3B-BF16",
    "hardware": "NVIDIA DGX Spark (GB10)",
    "shape": {"input_tokens": 8192, "output_tokens": 256, "concurrency": 1},
    "benchmark": "SPEED-Bench shape, aiperf 0.12.0",
    "server": "vLLM 0.28.1rc1.dev130, DSpark speculative decoding (7 tokens), fastsafetensors loading",
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
    model: str | None = None  # the served name; None = read from /v1/models
    tokenizer: str | None = None  # count input tokens with this tokenizer (folder or HF cache id), not /tokenize
    goodput: dict[str, float] | None = None  # SLOs, aiperf tags -> ms or tok/s (see bench.goodput)
    custom_shape: bool = False  # --isl/--osl changed the preset's shape
    # Session workloads (see workbench.bench.sessions): `sessions` run at once, each of
    # `turns` turns; the first turn's prompt is `input_tokens`, each later turn adds
    # `turn_input_tokens` (multiturn: a user message; agentic: a tool result) to the
    # whole history. Output per turn: `turn_output_tokens` (the last repeats), else
    # `output_tokens` (agentic: `tool_call_tokens`). `think_time_s` between a turn's
    # answer and the next turn. trace: sessions, lengths and timing from `trace_file`.
    workload: str = "single"
    sessions: int = 8
    turns: int = 6
    turn_input_tokens: int = 64
    turn_output_tokens: list[int] | None = None
    think_time_s: float = 0.0
    tool_call_tokens: int = 24
    trace_file: str | None = None
    # Fixed prompts instead of synthetic ones: each {"messages": [...], "category": str | None,
    # "output_tokens": int | None}. Measured request k sends prompts[k % len]; input_tokens is then unused.
    prompts: list[dict[str, Any]] | None = None

    def __post_init__(self) -> None:
        self.url = normalize_base_url(self.url)
        problems: dict[str, str] = {}  # setting -> what is wrong with it
        if self.input_tokens < 1:
            problems["input_tokens"] = "the input length must be at least 1 token"
        if self.output_tokens < 1:
            problems["output_tokens"] = "the output length must be at least 1 token"
        if self.concurrency < 1:
            problems["concurrency"] = "the concurrency must be at least 1"
        if self.request_rate is not None and self.request_rate <= 0:
            problems["request_rate"] = "the request rate must be positive"
        if (self.requests is None) == (self.duration_s is None):
            problems["requests"] = "give exactly one of a request count or a duration"
            problems["duration_s"] = problems["requests"]
        if self.requests is not None and self.requests < 1:
            problems["requests"] = "the request count must be at least 1"
        if self.duration_s is not None and self.duration_s <= 0:
            problems["duration_s"] = "the duration must be positive"
        if self.warmup_requests < 0:
            problems["warmup_requests"] = "the warm-up request count cannot be negative"
        problems |= self._session_problems()
        if self.prompts is not None and not self.prompts:
            problems["prompts"] = "the fixed prompt list is empty"
        if self.prompts is not None and self.workload != "single":
            problems["prompts"] = f"fixed prompts are for single-turn runs, not the {self.workload} workload"
        if problems:
            said = list(dict.fromkeys(problems.values()))  # one problem can name two settings
            raise BenchError("Invalid benchmark settings: " + "; ".join(said) + ".", settings=tuple(problems))
        if self.goodput is not None:
            self.goodput = parse_goodput(self.goodput)

    def _session_problems(self) -> dict[str, str]:
        problems: dict[str, str] = {}
        if self.workload not in WORKLOADS:
            return {"workload": f"the workload must be one of {', '.join(WORKLOADS)}, not {self.workload!r}"}
        if self.workload == "trace" and not self.trace_file:
            problems["trace_file"] = "the trace workload needs a trace file (JSONL)"
        if self.workload in ("multiturn", "agentic"):
            if self.sessions < 1:
                problems["sessions"] = "the session count must be at least 1"
            if self.turns < 1:
                problems["turns"] = "the turn count must be at least 1"
            if self.sessions >= 1 and self.turns >= 1:
                # A session workload is bounded by its turns: every session runs at once.
                self.requests, self.duration_s, self.concurrency = self.sessions * self.turns, None, self.sessions
        if self.turn_input_tokens < 1:
            problems["turn_input_tokens"] = "each later turn must add at least 1 input token"
        if self.turn_output_tokens is not None and (not self.turn_output_tokens
                                                    or any(n < 1 for n in self.turn_output_tokens)):
            problems["turn_output_tokens"] = "every per-turn output length must be at least 1"
        if not 0 <= self.think_time_s < float("inf"):
            problems["think_time_s"] = "the think time must be 0 or more seconds"
        if self.tool_call_tokens < 1:
            problems["tool_call_tokens"] = "a tool call's length must be at least 1 token"
        return problems

    @property
    def is_session_workload(self) -> bool:
        return self.workload in SESSION_WORKLOADS

    def output_tokens_for_turn(self, turn: int) -> int:
        """Output length of a session's turn (1-based)."""
        if self.turn_output_tokens:
            return self.turn_output_tokens[min(turn, len(self.turn_output_tokens)) - 1]
        return self.tool_call_tokens if self.workload == "agentic" else self.output_tokens

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BenchConfig:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})

    @property
    def shape_label(self) -> str:
        """"preset smoke", or "custom shape" once --isl/--osl changed it."""
        if self.custom_shape or self.preset is None:
            based = f", preset {self.preset}'s other settings" if self.preset else ""
            return f"custom shape: {self.input_tokens} in / {self.output_tokens} out{based}"
        return f"preset {self.preset}"

    @property
    def is_speed_bench_shaped(self) -> bool:
        return (self.output_tokens == 256 and self.concurrency == 1 and self.request_rate is None
                and not self.is_session_workload)


def chat_body(config: BenchConfig, model: str, messages: list[dict[str, Any]], max_tokens: int) -> dict[str, Any]:
    """One streamed chat request as the benchmark sends it (usage with cached tokens on the last chunk)."""
    return {
        "model": model,
        "messages": messages,
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        "chat_template_kwargs": {"enable_thinking": config.reasoning},
        **config.extra_body,
    }


@dataclass(frozen=True)
class BenchProgress:
    phase: BenchPhase
    done: int  # requests finished in this phase
    total: int | None  # None when the run is bounded by a duration
    errors: int = 0
    elapsed_s: float = 0.0
    output_tokens: int = 0
    message: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


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
        raise SelectionError(f"Unknown benchmark preset {name!r}.", hint="Choose one of: " + ", ".join(PRESETS))
    values = {k: v for k, v in PRESETS[name].items() if k != "description"}
    custom = any(overrides.get(k) is not None and overrides[k] != values[k] for k in ("input_tokens", "output_tokens"))
    values.update({k: v for k, v in overrides.items() if v is not None})
    if values.get("duration_s") is not None and overrides.get("requests") is None:
        values["requests"] = None
    return BenchConfig(url=url, preset=name, custom_shape=custom, **values)


def sweep_levels(max_concurrency: int) -> list[int]:
    """1, 2, 4, ... up to max_concurrency (which ends the list even if not a power of two)."""
    if max_concurrency < 1:
        raise BenchError("The sweep needs a maximum concurrency of at least 1.", settings=("max_concurrency",))
    levels = []
    level = 1
    while level < max_concurrency:
        levels.append(level)
        level *= 2
    levels.append(max_concurrency)
    return levels



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
    hint = "Lower the input or output length so that both fit in the server's max-model-len."
    settings: dict[str, object] = {"input_tokens": None, "output_tokens": None}
    if suggested:
        hint = (
            f"Run the scaled-down shape instead: {suggested} input tokens "
            f"(the model card's 8K figures are not comparable to a {suggested}-token run)."
        )
        settings = {"input_tokens": suggested}
    raise BenchShapeError(
        f"{what} ({shape}) does not fit this server's max-model-len of {max_model_len}.",
        hint=hint,
        suggested_input_tokens=suggested,
        settings=settings,
    )


def reference_for(config: BenchConfig, model: str) -> dict[str, Any] | None:
    """The recipe page's DGX Spark figures, with what differs from this run said plainly."""
    if not config.is_speed_bench_shaped:
        return None
    notes = [
        "Measured on a DGX Spark (GB10) with speculative decoding, as the recipes.vllm.ai page's notes "
        f"report (not the model card), not on this machine; this run measured {model} at {config.url}. "
        "Different hardware and model: compare the shape of the figures, not their size."
    ]
    if config.input_tokens != 8192:
        notes.append(f"This run used {config.input_tokens} input tokens, the DGX Spark reference 8192.")
    return {**DGX_SPARK_REFERENCE, "notes": notes}

"""Start-up phases of `vllm serve`, read from vLLM's own log lines.

(phase, pattern, detail) rules: LOADING_WEIGHTS, KV_CACHE and HTTP_UP were read
from a real CPU start (tests/fixtures/launch-logs/startup_cpu_smollm2.log);
COMPILING and CAPTURING_GRAPHS only happen on a GPU without --enforce-eager, and
were read from real CUDA starts of vLLM 0.26.0 on an H100
(tests/fixtures/vllm-0.26.0-cuda-h100/).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["PHASE_ORDER", "PhaseDetector", "PhaseRecord", "StartupPhase", "Status"]


class StartupPhase(str, enum.Enum):
    """Start-up phases, in the order vLLM 0.32 goes through them.

    On the CPU engine with --enforce-eager there is no compiling or graph
    capture; phases that do not happen are simply not reported."""

    STARTED = "started"  # the process exists
    LOADING_WEIGHTS = "loading_weights"  # "Starting to load model ..."
    COMPILING = "compiling"  # torch.compile (GPU, without --enforce-eager)
    KV_CACHE = "kv_cache"  # "<device> KV cache size: N tokens"
    CAPTURING_GRAPHS = "capturing_graphs"  # CUDA graph capture, after the KV cache
    HTTP_UP = "http_up"  # "Starting vLLM server on http://..." / /health answers
    READY = "ready"  # /health 200 and the served model listed in /v1/models

    @property
    def label(self) -> str:
        """How every view names the phase ("loading weights")."""
        return self.value.replace("_", " ")


PHASE_ORDER: tuple[StartupPhase, ...] = tuple(StartupPhase)


class Status(str, enum.Enum):
    STARTING = "starting"
    READY = "ready"
    FAILED = "failed"
    STOPPED = "stopped"
    # Only a record holds it: a stop is under way in some process. A handle never
    # reports it; one loaded from such a record checks again (STARTING).
    STOPPING = "stopping"


@dataclass
class PhaseRecord:
    phase: StartupPhase
    started_s: float  # since the process started
    duration_s: float | None = None  # None while it is the current phase
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "phase": self.phase.value}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> PhaseRecord:
        return cls(StartupPhase(d["phase"]), d["started_s"], d.get("duration_s"), d.get("detail", ""))



def _kv_detail(m: re.Match[str]) -> str:
    text = f"{m.group(1)} KV cache: {m.group(2)} tokens"
    return f"{text} ({m.group(4)}x requests of {m.group(3)} tokens)" if m.group(3) else text


_PHASE_PATTERNS: tuple[tuple[StartupPhase, re.Pattern[str], Callable[[re.Match[str]], str]], ...] = (
    (StartupPhase.LOADING_WEIGHTS, re.compile(r"Starting to load model (\S+?)(?:\.\.\.)?$"),
     lambda m: f"loading {m.group(1)}"),
    (StartupPhase.COMPILING, re.compile(r"Starting torch\.compile|Dynamo bytecode transform time|"
                                 r"Compiling a graph for"), lambda m: "torch.compile"),
    # vLLM 0.32 says the size and the concurrency on one line; 0.26 (CUDA) on two.
    (StartupPhase.KV_CACHE, re.compile(r"(\w+) KV cache size: ([\d,]+) tokens(?:, Maximum concurrency for "
                                r"([\d,]+) tokens per request: ([\d.]+)x)?"), _kv_detail),
    # Only the capture itself: "Profiling CUDA graph memory" comes before the KV cache is sized.
    (StartupPhase.CAPTURING_GRAPHS, re.compile(r"Capturing CUDA graphs"), lambda m: "CUDA graph capture"),
    (StartupPhase.HTTP_UP, re.compile(r"Starting vLLM server on (\S+)"), lambda m: m.group(1)),
)
_ENGINE_INIT = re.compile(r"Initializing a V1 LLM engine \((v[^)]+)\)")
_ARCHITECTURE = re.compile(r"Resolved architecture: (\w+)")
_CHECKPOINT_SIZE = re.compile(r"Checkpoint size: ([\d.]+ GiB)")
_SHARDS = re.compile(r"Loading safetensors checkpoint shards:\s+(\d+)% Completed \| (\d+)/(\d+)")
# Hybrid (Mamba) models warm their Triton kernels after compiling: about a minute the first time.
_MAMBA_WARMUP = re.compile(r"Warming up Mamba2? \w* ?Triton kernels|Initial profiling/warmup run took ([\d.]+) s")
_WEIGHTS_DONE = re.compile(r"Loading weights took ([\d.]+) seconds|Model loading took ([\d.]+) GiB memory")


class PhaseDetector:
    """Turns log lines into (phase, detail, progress) steps. Pure: no clock, no I/O.

    A phase is reported once, when first seen; progress lines while loading
    weights come out as (LOADING_WEIGHTS, detail, fraction)."""

    def __init__(self) -> None:
        self.seen: set[StartupPhase] = set()
        self.checkpoint_size: str | None = None

    def feed(self, line: str) -> list[tuple[StartupPhase, str, float | None]]:
        out: list[tuple[StartupPhase, str, float | None]] = []
        # Before weights load, the engine's set-up is detail of STARTED (it can take a while).
        arch = _ARCHITECTURE.search(line)
        if arch:
            out.append((StartupPhase.STARTED, f"architecture {arch.group(1)}", None))
        engine = _ENGINE_INIT.search(line)
        if engine:
            out.append((StartupPhase.STARTED, f"engine core {engine.group(1)} initializing", None))
        size = _CHECKPOINT_SIZE.search(line)
        if size:
            self.checkpoint_size = size.group(1)
            out.append((StartupPhase.LOADING_WEIGHTS, f"checkpoint {self.checkpoint_size}", None))
        shards = _SHARDS.search(line)
        if shards:
            done, total = int(shards.group(2)), int(shards.group(3))
            out.append((StartupPhase.LOADING_WEIGHTS, f"{done}/{total} shards", done / total if total else None))
        finished = _WEIGHTS_DONE.search(line)
        if finished:
            out.append((StartupPhase.LOADING_WEIGHTS, f"weights loaded in {finished.group(1) or '?'} s", 1.0))
        warmup = _MAMBA_WARMUP.search(line)
        if warmup:
            phase = StartupPhase.COMPILING if StartupPhase.COMPILING in self.seen else StartupPhase.LOADING_WEIGHTS
            out.append((phase, f"kernel warm-up took {warmup.group(1)} s" if warmup.group(1)
                        else "warming up the Mamba-2 Triton kernels (about a minute the first time)", None))
        for phase, pattern, detail in _PHASE_PATTERNS:
            match = pattern.search(line)
            if match and phase not in self.seen:
                self.seen.add(phase)
                out.append((phase, detail(match), None))
        return out


"""How figures read: units, "not reported", and the labels every view shows.

The Gradio Throughput tab, the chat strip, the notebooks' ThroughputView and
the Room view take their labels from FIGURE_LABELS; values come formatted from
ThroughputFigures.display (which calls `format_figure`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["FIGURE_LABELS", "LIVE_FIGURES", "NOT_REPORTED", "NO_DATA", "PER_ENGINE_LABEL", "STRIP_FIGURES",
           "format_figure", "format_per_engine", "format_seconds"]

NOT_REPORTED = "not reported"
# No value that can be shown yet, though the server reports the metric (no request
# finished in the window, no prefix-cache query, ...).
NO_DATA = "—"

# Every figure a view may show, in the order views show them.
FIGURE_LABELS: dict[str, str] = {
    "decode_tps": "Decode (generated tokens/s)",
    "prefill_tps": "Prefill (prompt tokens/s)",
    "running": "Requests running",
    "waiting": "Requests waiting",
    "kv_cache_pct": "KV cache used %",
    "prefix_cache_hit_rate": "Prefix-cache hit rate",
    "preemptions": "Preemptions (window)",
    "finished": "Finished requests (window)",
    "ttft": "Time to first token",
    "itl": "Inter-token latency",
    "tpot": "Time per output token",
    "e2e": "End-to-end latency",
    "spec_acceptance_rate": "Spec-decode acceptance rate",
    "spec_mean_acceptance_length": "Spec-decode mean acceptance length",
}
# The short live view (notebooks) and the one-line strip above the chat.
LIVE_FIGURES = ("decode_tps", "prefill_tps", "running", "waiting", "kv_cache_pct", "spec_acceptance_rate",
                "spec_mean_acceptance_length")
STRIP_FIGURES = {"decode_tps": "decode", "prefill_tps": "prefill", "running": "running", "kv_cache_pct": "KV"}


PER_ENGINE_LABEL = "Decode tok/s per engine"


def format_per_engine(by_engine: dict[str, float] | None) -> str | None:
    """Decode tok/s of each engine and their sum (vLLM's `engine` label: data-parallel
    ranks, multi-node); None with one engine or none, where the decode row says it all."""
    if not by_engine or len(by_engine) < 2:
        return None
    each = ", ".join(f"engine {engine} {rate:.1f}" for engine, rate in by_engine.items())
    return f"{each} (sum {sum(by_engine.values()):.1f})"


def format_number(value: float) -> str:
    return f"{value:.0f}" if float(value).is_integer() else f"{value:.2f}"


def format_seconds(value: float | None) -> str:
    if value is None:
        return NO_DATA
    return f"{value * 1000:.1f} ms" if value < 1 else f"{value:.2f} s"


def _format_latency(summary: Any) -> str:
    if not summary.count:
        return "no requests"
    return (
        f"mean {format_seconds(summary.mean_s)}  p50 {format_seconds(summary.p50_s)}  "
        f"p90 {format_seconds(summary.p90_s)}  p99 {format_seconds(summary.p99_s)}"
    )


_DISPLAY: dict[str, Callable[[Any], str]] = {
    "prefill_tps": lambda v: f"{v:.1f} tok/s",
    "decode_tps": lambda v: f"{v:.1f} tok/s",
    "kv_cache_pct": lambda v: f"{v:.2f} %",
    "prefix_cache_hit_rate": lambda v: f"{v * 100:.1f} %",
    "spec_acceptance_rate": lambda v: f"{v * 100:.1f} %",
    "spec_mean_acceptance_length": lambda v: f"{v:.2f} tokens",
    "spec_acceptance_by_position": lambda v: " ".join(f"{x * 100:.1f}%" for x in v),
    "finished_by_reason": lambda v: ", ".join(f"{k} {format_number(n)}" for k, n in v.items() if n)
    or "none",
    "window_s": lambda v: f"{v:.1f} s",
    "ttft": _format_latency,
    "itl": _format_latency,
    "tpot": _format_latency,
    "e2e": _format_latency,
}


def format_figure(name: str, value: Any) -> str:
    """One figure's value with its unit (the value is not None)."""
    return _DISPLAY.get(name, format_number)(value)

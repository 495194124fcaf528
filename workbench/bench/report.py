"""Rendering benchmark results for a terminal: the table, the progress bar, the comparison.

Only renders; the figures come from workbench.bench.summary.
"""

from __future__ import annotations

import sys
import time
from typing import IO

from workbench.bench.config import BenchProgress
from workbench.bench.goodput import describe_slos
from workbench.bench.results import BenchResult, SweepResult, compare_results
from workbench.bench.summary import Distribution

__all__ = ["TerminalProgress", "format_comparison", "format_result", "format_sessions", "format_sweep"]

# Per-request and /metrics hit rates further apart than this (in points) are reported as disagreeing.
HIT_RATE_AGREEMENT_POINTS = 2.0


BAR_WIDTH = 28


class TerminalProgress:
    """A progress callback that redraws one stderr line (no extra dependency)."""

    def __init__(self, stream: IO[str] | None = None, min_interval_s: float = 0.1) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.min_interval_s = min_interval_s
        self._last_draw = 0.0
        self._last_phase: str | None = None
        self._last_len = 0

    def __call__(self, p: BenchProgress) -> None:
        now = time.monotonic()
        final = p.total is not None and p.done >= p.total
        if p.phase == self._last_phase and not final and now - self._last_draw < self.min_interval_s:
            return
        if self._last_phase is not None and p.phase != self._last_phase:
            self.stream.write("\n")
            self._last_len = 0
        self._last_phase, self._last_draw = p.phase, now
        if p.phase == "done":
            self.stream.flush()
            return
        if p.total:
            filled = int(BAR_WIDTH * min(p.done, p.total) / p.total)
            bar = "[" + "#" * filled + "." * (BAR_WIDTH - filled) + f"] {p.done}/{p.total}"
        else:
            bar = f"{p.done} done"
        extra = []
        if p.errors:
            extra.append(f"{p.errors} errors")
        if p.output_tokens:
            extra.append(f"{p.output_tokens} output tokens")
        if p.message:
            extra.append(p.message)
        line = f"{p.phase:<10} {bar}  {p.elapsed_s:6.1f} s  " + "  ".join(extra)
        line = line[:160]
        self.stream.write("\r" + line.ljust(self._last_len))
        self._last_len = len(line)
        self.stream.flush()


def _fmt(value: float | None, digits: int = 2) -> str:
    if value is None:
        return "-"
    if isinstance(value, int):
        return f"{value:,}"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.{digits}f}"


_ROWS = (
    ("TTFT", "ttft_ms"),
    ("TTFO", "ttfo_ms"),
    ("E2E", "e2e_ms"),
    ("TPOT (per token)", "tpot_ms"),
    ("ITL (per chunk)", "itl_ms"),
    ("decode tok/s per user", "decode_tok_s_per_user"),
    ("prefill tok/s per user", "prefill_tok_s_per_user"),
    ("input tokens", "input_tokens_per_request"),
    ("output tokens", "output_tokens_per_request"),
)


def format_result(result: BenchResult) -> str:
    """The terminal table: shape, totals, distributions, server counters, reference."""
    c, s = result.config, result.summary
    load = f"concurrency {c.concurrency}" if c.request_rate is None else f"{c.request_rate} req/s (max {c.concurrency} in flight)"
    bound = f"{c.requests} requests" if c.requests is not None else f"{c.duration_s} s"
    lines = [f"Benchmark of {result.model} at {c.url}  ({c.shape_label})"]
    if result.partial is not None:
        lines.append(f"PARTIAL RESULT: {result.partial}; what was measured before that is below")
    if c.is_session_workload:
        lines.append(_session_shape(result))
    else:
        lines.append(
            f"shape: {c.input_tokens} input tokens, {c.output_tokens} output tokens (ignore_eos), {load}, "
            f"{bound}, {result.warmup} warm-up not counted, reasoning {'on' if c.reasoning else 'off'}")
    if result.input_lengths_from:
        lines.append(f"input lengths counted by {result.input_lengths_from}")
    if result.client_lag is not None:
        lines.append(result.client_lag.describe())
    if result.gpu is not None:
        lines.append(result.gpu.describe(result.summary.output_tokens))
    lines += [f"note: {note}" for note in result.notes]
    lines += [
        "",
        f"requests {s.requests}   succeeded {s.succeeded}   errors {s.errors}   duration {_fmt(s.duration_s)} s",
        f"request throughput {_fmt(s.request_throughput, 3)} req/s   output {_fmt(s.output_tok_s)} tok/s   "
        f"total {_fmt(s.total_tok_s)} tok/s",
        f"tokens (server usage): input {_fmt(s.input_tokens)}   output {_fmt(s.output_tokens)}   "
        f"reasoning {_fmt(s.reasoning_tokens)}",
    ]
    if result.input_length_mismatches:
        what = "the first turn's" if c.is_session_workload else str(c.input_tokens)
        lines.append(f"WARNING: {result.input_length_mismatches} requests had an input length other than {what}")
    for message in s.error_messages:
        lines.append(f"error: {message}")
    if s.goodput is not None:
        g = s.goodput
        fraction = "-" if g.good_fraction is None else f"{g.good_fraction * 100:.1f} %"
        lines.append(f"goodput {_fmt(g.goodput_req_s, 3)} req/s: {g.good_requests} of {g.requests} requests "
                     f"({fraction}) met every SLO ({describe_slos(g.slos)})")
    lines += ["", f"{'':<24}{'unit':>7}{'mean':>10}{'p50':>10}{'p90':>10}{'p99':>10}{'min':>10}{'max':>10}"]
    for title, name in _ROWS:
        d: Distribution = getattr(s, name)
        cells = [d.mean, d.p50, d.p90, d.p99, d.min, d.max]
        lines.append(f"{title:<24}{d.unit:>7}" + "".join(f"{_fmt(v):>10}" for v in cells))
    counters = result.server_counters
    if counters is None and result.counters_problem:
        lines += ["", f"server /metrics: no counters ({result.counters_problem})"]
    if counters is not None:
        lines += ["", "server /metrics over the run:"]
        lines.append(
            f"  prompt tokens {_fmt(counters.prompt_tokens, 0)}   generation tokens {_fmt(counters.generation_tokens, 0)}"
        )
        if counters.prefix_cache_queries:
            lines.append(f"  prefix cache: {_fmt(counters.prefix_cache_hits, 0)} of "
                         f"{_fmt(counters.prefix_cache_queries, 0)} queried tokens hit")
        if counters.spec_drafts:
            lines.append(
                f"  speculative decoding: acceptance rate {_fmt((counters.spec_acceptance_rate or 0) * 100, 1)} %   "
                f"mean acceptance length {_fmt(counters.spec_mean_acceptance_length)}"
            )
    if s.per_turn or s.prefix_cache_hit_rate is not None:
        lines += ["", format_sessions(result)]
    if result.reference:
        r = result.reference
        lines += [
            "",
            f"For reference, NOT measured here — from {r['source']}: {r['hardware']}, {r['benchmark']}, "
            f"{r['server']}, measured {r['measured']}:",
            f"  prefill {r['prefill_tok_s_per_user']:,.0f} tok/s per user   decode {r['decode_tok_s_per_user']} tok/s per user   "
            f"E2E {r['e2e_mean_s']} s mean",
            f"  this run: prefill {_fmt(s.prefill_tok_s_per_user.mean)}   decode {_fmt(s.decode_tok_s_per_user.mean)}   "
            f"E2E {_fmt(None if s.e2e_ms.mean is None else s.e2e_ms.mean / 1000)} s mean",
        ]
        lines += [f"  {note}" for note in r.get("notes", [])]
    lines += ["", "definitions (aiperf's):"]
    lines += [f"  {k}: {v}" for k, v in result.definitions.items()]
    return "\n".join(lines)


def _session_shape(result: BenchResult) -> str:
    c = result.config
    if c.workload == "trace":
        return (f"workload trace {c.trace_file}: {c.concurrency} sessions, {c.requests} turns, "
                f"{result.warmup} warm-up not counted")
    outputs = ",".join(map(str, c.turn_output_tokens)) if c.turn_output_tokens else str(c.output_tokens_for_turn(1))
    grows = "a tool result" if c.workload == "agentic" else "a user message"
    think = f", think time {c.think_time_s:g} s" if c.think_time_s else ""
    return (f"workload {c.workload}: {c.sessions} sessions x {c.turns} turns at once; turn 1 {c.input_tokens} tokens, "
            f"each later turn the whole history + {grows} of ~{c.turn_input_tokens} tokens; output {outputs} "
            f"tokens per turn (ignore_eos){think}; {result.warmup} warm-up not counted")


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f} %"


def hit_rate_verdict(requests: float | None, metrics: float | None) -> str:
    """Whether the per-request and /metrics prefix-cache hit rates agree."""
    if requests is None and metrics is None:
        return "prefix-cache hit rate: not reported (vLLM: --enable-prompt-tokens-details; /metrics counters)"
    line = f"prefix-cache hit rate: {_pct(requests)} from the requests' cached tokens, {_pct(metrics)} from /metrics"
    if requests is None:
        return line + " (the requests carried no cached_tokens: start vLLM with --enable-prompt-tokens-details)"
    if metrics is None:
        return line + " (no prefix-cache counters on /metrics)"
    gap = abs(requests - metrics) * 100
    if gap > HIT_RATE_AGREEMENT_POINTS:
        return line + (f"  DISAGREE by {gap:.1f} points: another client may be using the server, or it counts "
                       "cached tokens differently")
    return line + f"  (agree within {HIT_RATE_AGREEMENT_POINTS:g} points)"


def format_sessions(result: BenchResult) -> str:
    """Per-turn figures of a session workload, the hit rates, and late turns against early ones."""
    s = result.summary
    lines = [hit_rate_verdict(s.prefix_cache_hit_rate, s.prefix_cache_hit_rate_metrics)]
    rows = s.per_turn or []
    if not rows:
        return "\n".join(lines)
    lines += ["", "by turn (means over the sessions):",
              f"{'turn':>5}{'requests':>9}{'TTFT ms':>10}{'TTFT p50':>10}{'E2E ms':>10}{'decode/user':>12}"
              f"{'prompt tok':>11}{'cached tok':>11}{'hit rate':>10}{'context max':>12}"]
    for row in rows:
        lines.append(f"{row['turn']:>5}{row['requests']:>9}{_fmt(row['ttft_ms_mean']):>10}{_fmt(row['ttft_ms_p50']):>10}"
                     f"{_fmt(row['e2e_ms_mean']):>10}{_fmt(row['decode_tok_s_per_user_mean']):>12}"
                     f"{_fmt(row['prompt_tokens_mean'], 0):>11}{_fmt(row['cached_tokens_mean'], 0):>11}"
                     f"{_pct(row['cache_hit_rate']):>10}{_fmt(row['context_tokens_max']):>12}")
    first, last = rows[0], rows[-1]
    if len(rows) > 1 and first["ttft_ms_mean"] and last["ttft_ms_mean"] is not None:
        change = (last["ttft_ms_mean"] - first["ttft_ms_mean"]) / first["ttft_ms_mean"] * 100
        lines.append(f"turn {last['turn']} against turn {first['turn']}: TTFT {_fmt(last['ttft_ms_mean'])} ms vs "
                     f"{_fmt(first['ttft_ms_mean'])} ms ({change:+.0f} %), context {_fmt(last['context_tokens_max'])} "
                     f"vs {_fmt(first['context_tokens_max'])} tokens, hit rate {_pct(last['cache_hit_rate'])} vs "
                     f"{_pct(first['cache_hit_rate'])}")
    return "\n".join(lines)


def _load_shape(r: BenchResult) -> tuple[int, int, int, float | None]:
    return (r.config.input_tokens, r.config.output_tokens, r.config.concurrency, r.config.request_rate)


def format_comparison(a: BenchResult, b: BenchResult) -> str:
    lines = [f"A: {a.label}  ({a.config.input_tokens}/{a.config.output_tokens}, concurrency {a.config.concurrency})"]
    lines.append(f"B: {b.label}  ({b.config.input_tokens}/{b.config.output_tokens}, concurrency {b.config.concurrency})")
    if _load_shape(a) != _load_shape(b):
        lines.append("WARNING: the two runs had different loads; the comparison is not like for like.")
    lines.append(f"{'':<26}{'unit':>7}{'A':>12}{'B':>12}{'B vs A':>10}")
    for row in compare_results(a, b):
        change = "-" if row["change_pct"] is None else f"{row['change_pct']:+.1f} %"
        lines.append(f"{row['metric']:<26}{row['unit']:>7}{_fmt(row['a']):>12}{_fmt(row['b']):>12}{change:>10}")
    return "\n".join(lines)


def format_sweep(sweep: SweepResult) -> str:
    goodput = any(r.summary.goodput is not None for r in sweep.levels)
    lines = []
    if sweep.partial is not None:
        lines.append(f"PARTIAL SWEEP: {sweep.partial}")
    lines.append(f"{'concurrency':>11}{'req/s':>9}{'out tok/s':>11}{'TTFT p50':>10}{'TTFT p99':>10}"
                 f"{'TPOT p50':>10}{'decode/user':>12}{'errors':>8}" + (f"{'goodput':>9}{'good %':>8}" if goodput else "")
                 + "  client lag p99")
    for row in sweep.plot_rows():
        lag = row["client_lag_p99_ms"]
        verdict = "-" if lag is None else f"{lag:.1f} ms" + ("  CLIENT-BOUND" if row["client_bound"] else "")
        good = ""
        if goodput:
            fraction = row["good_fraction"]
            good = f"{_fmt(row['goodput_req_s'], 3):>9}{'-' if fraction is None else f'{fraction * 100:.0f}':>8}"
        lines.append(
            f"{row['concurrency']:>11}{_fmt(row['request_throughput'], 3):>9}{_fmt(row['output_tok_s']):>11}"
            f"{_fmt(row['ttft_ms_p50']):>10}{_fmt(row['ttft_ms_p99']):>10}{_fmt(row['tpot_ms_p50']):>10}"
            f"{_fmt(row['decode_tok_s_per_user_mean']):>12}{row['errors']:>8}{good}  {verdict}"
            + ("  partial" if row["partial"] else "")
        )
    if any(r.client_bound for r in sweep.levels):
        lines.append("CLIENT-BOUND levels: the load generator lagged, so their latencies include its own queueing.")
    return "\n".join(lines)



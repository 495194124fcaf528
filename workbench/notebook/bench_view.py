"""BenchView: a progress bar fed by run_benchmark's progress callback, then the result table."""

from __future__ import annotations

from typing import Any

import ipywidgets as W

from workbench.bench import BenchConfig, BenchProgress, BenchResult, run_benchmark
from workbench.bench.figures import latency_svg, session_rows, sessions_svg, tradeoff_svg
from workbench.bench.report import format_sessions
from workbench.notebook.html import esc, table

__all__ = ["BenchView", "bench_figures", "bench_table", "reference_table"]


def bench_figures(levels: list[BenchResult]) -> str:
    """HTML: the trade-off curve and the grouped latency bars (the ones saved beside the JSON); for a
    session workload, TTFT, cache-hit rate and context against turn index."""
    if session_rows(levels):
        return sessions_svg(levels) + "<br>" + latency_svg(levels)
    return tradeoff_svg(levels) + "<br>" + latency_svg(levels)


def _num(value: float | None, digits: int = 1) -> str:
    return "—" if value is None else f"{value:,.{digits}f}"


def bench_table(result: BenchResult) -> str:
    """HTML: the run's distributions, then what was measured here next to the model card's figures."""
    s, c = result.summary, result.config
    rows = []
    for name in type(s).DISTRIBUTIONS:
        d = getattr(s, name)
        rows.append([name, d.unit, _num(d.mean), _num(d.p50), _num(d.p90), _num(d.p99), str(d.count)])
    shape = (f"{c.input_tokens} input / {c.output_tokens} output tokens, concurrency {c.concurrency}, "
             f"{s.requests} requests ({s.succeeded} ok, {s.errors} errors) in {_num(s.duration_s)} s: "
             f"{_num(s.output_tok_s)} output tok/s, {_num(s.request_throughput, 2)} req/s")
    out = [f"<b>Benchmark of <code>{esc(result.model)}</code></b> ({esc(c.shape_label)})<br>{esc(shape)}"]
    if result.partial is not None:
        out.append(f"<br><b>Partial result:</b> {esc(result.partial)}")
    if result.client_lag is not None:
        out.append(f"<br>{esc(result.client_lag.describe())}")
    if result.gpu is not None:
        out.append(f"<br>{esc(result.gpu.describe(s.output_tokens))}")
    g = s.goodput
    if g is not None and g.good_fraction is not None:
        out.append(f"<br>goodput {_num(g.goodput_req_s, 2)} req/s ({g.good_fraction * 100:.0f} % of requests met every SLO)")
    for note in result.notes:  # each is something to read before the figures (a warning, a model named as given)
        out.append(f"<br><b>{esc(note)}</b>")
    out.append(table(["metric", "unit", "mean", "p50", "p90", "p99", "n"], rows))
    if s.per_turn or s.prefix_cache_hit_rate is not None:
        out.append(f"<pre>{esc(format_sessions(result))}</pre>")
    return "".join(out)


def reference_table(result: BenchResult, reference: dict[str, Any], here: str) -> str:
    """The recipe page's DGX Spark figures beside this run's, with both machines named."""
    s = result.summary
    e2e = None if s.e2e_ms.mean is None else s.e2e_ms.mean / 1000
    rows = [
        ["machine", reference["hardware"], here],
        ["model / server", reference["server"], f"{result.model}, vLLM CPU build"],
        ["shape (input / output / concurrency)",
         f"{reference['shape']['input_tokens']} / {reference['shape']['output_tokens']} / {reference['shape']['concurrency']}",
         f"{result.config.input_tokens} / {result.config.output_tokens} / {result.config.concurrency}"],
        ["prefill tok/s per user", _num(reference["prefill_tok_s_per_user"]), _num(s.prefill_tok_s_per_user.mean)],
        ["decode tok/s per user", _num(reference["decode_tok_s_per_user"]), _num(s.decode_tok_s_per_user.mean)],
        ["E2E mean, s", _num(reference["e2e_mean_s"], 2), _num(e2e, 2)],
    ]
    return table(["", f"DGX Spark, recipes.vllm.ai notes ({reference['measured']})", "measured here"], rows)


class BenchView:
    """A progress bar fed by run_benchmark's progress callback, then the result table."""

    def __init__(self) -> None:
        self.bar = W.IntProgress(value=0, min=0, max=1, description="benchmark", bar_style="info")
        self.phase = W.HTML()
        self.result = W.HTML()
        self.widget = W.VBox([W.HBox([self.bar, self.phase]), self.result])

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)

    def progress(self, p: BenchProgress) -> None:
        self.bar.max = max(1, p.total or 1)
        self.bar.value = min(p.done, self.bar.max)
        errors = f", {p.errors} errors" if p.errors else ""
        self.phase.value = f"{esc(p.phase)}: {p.done}/{p.total or '?'}{errors} {esc(p.message or '')}"
        if p.phase == "done":
            self.bar.bar_style = "success"

    def run(self, config: BenchConfig) -> BenchResult:
        result = run_benchmark(config, progress=self.progress)
        self.result.value = bench_table(result) + bench_figures([result])
        return result


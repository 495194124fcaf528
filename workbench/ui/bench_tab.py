"""Benchmark tab: run a load against the server, see the table and plots, compare
two runs side by side."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass

import gradio as gr
import pandas as pd

from workbench.bench import (
    PRESETS,
    BenchResult,
    compare_results,
    preset_config,
    run_benchmark,
    run_sweep,
    sweep_levels,
)
from workbench.bench.figures import PERCENTILE_NAMES, figure_rows, latency_rows, level_label, session_rows, sessions_svg
from workbench.bench.goodput import parse_goodput
from workbench.bench.report import format_result, format_sessions
from workbench.errors import WorkbenchError
from workbench.ui.background import BackgroundWork


@dataclass
class BenchTab:
    preset: gr.Dropdown
    run: gr.Button
    progress: gr.Markdown
    table: gr.Code
    latency_plot: gr.BarPlot
    sweep_plot: gr.ScatterPlot
    compare: gr.Dataframe
    download: gr.DownloadButton
    workload: gr.Dropdown
    sessions_plot: gr.HTML

WORKLOAD_CHOICES = [
    ("single: independent requests of the preset's shape", "single"),
    ("multiturn: sessions of user turns, each resending the whole history", "multiturn"),
    ("agentic: tool-loop turns (short call, long tool result) growing the context", "agentic"),
]


def sessions_html(levels: list[BenchResult]) -> str:
    """TTFT, cache-hit rate and context against turn index, one line per run (the last two compared)."""
    if not session_rows(levels):
        return "<p><i>Per-turn figures appear after a multiturn or agentic run.</i></p>"
    return sessions_svg(levels)


def latency_frame(levels: list[BenchResult] | BenchResult | None) -> pd.DataFrame:
    """Grouped bars: one bar per (figure, concurrency, percentile), each on its own x slot.

    Gradio's BarPlot stacks bars that share an x value, and E2E contains TTFT, so
    each bar gets an x category of its own ("TTFT c=4 p90"), coloured by percentile.
    """
    if isinstance(levels, BenchResult):
        levels = [levels]
    rows = [{"bar": f"{r['figure']} c={r['concurrency']} {r['percentile']}", "percentile": r["percentile"],
             "ms": r["ms"]} for r in latency_rows(levels or [])]
    # Category columns as object: Gradio's plots do not read pandas' string dtype as categories.
    return pd.DataFrame(rows, columns=["bar", "percentile", "ms"]).astype(
        {"bar": object, "percentile": object, "ms": float})


def sweep_frame(results: list[BenchResult]) -> pd.DataFrame:
    """The trade-off curve: per-user decode tok/s against total output tok/s, one point per level."""
    rows = [{"output tok/s": r["output_tok_s"], "decode tok/s per user": r["decode_tok_s_per_user"],
             "level": level_label(r)}
            for r in figure_rows(results)
            if r["output_tok_s"] is not None and r["decode_tok_s_per_user"] is not None]
    return pd.DataFrame(rows, columns=["output tok/s", "decode tok/s per user", "level"]).astype(
        {"output tok/s": float, "decode tok/s per user": float, "level": object})


def _whole_number(text: str | None, what: str) -> int | None:
    """A Textbox's whole number; empty means the preset's value."""
    text = (text or "").strip()
    if not text:
        return None
    try:
        return int(text)
    except ValueError:
        raise gr.Error(f"{what} must be a whole number, or empty for the preset's value (got {text!r}).",
                       print_exception=False) from None


def _seconds(text: str | None) -> float | None:
    text = (text or "").strip()
    if not text:
        return None
    try:
        return float(text)
    except ValueError:
        raise gr.Error(f"Think time must be a number of seconds, or empty for none (got {text!r}).",
                       print_exception=False) from None


def _progress_text(p) -> str:
    total = f"/{p.total}" if p.total else ""
    bar = ""
    if p.total:
        filled = int(20 * p.done / p.total)
        bar = "`[" + "#" * filled + "." * (20 - filled) + "]` "
    errors = f" · {p.errors} errors" if p.errors else ""
    return f"{bar}**{p.phase}** {p.done}{total}{errors} {p.message}"


def create_ui(resolve_url) -> BenchTab:
    with gr.Row():
        with gr.Column(scale=1, min_width=300):
            preset = gr.Dropdown([(f"{k}: {v['description']}", k) for k, v in PRESETS.items()], value="smoke",
                                 label="Preset", elem_id="bench-preset")
            # Textboxes, not gr.Number: this Gradio shows a Number without a value as 0, not empty.
            isl = gr.Textbox("", label="Input tokens (empty: preset)", placeholder="preset", elem_id="bench-isl")
            osl = gr.Textbox("", label="Output tokens (empty: preset)", placeholder="preset", elem_id="bench-osl")
            concurrency = gr.Textbox("", label="Concurrency (empty: preset)", placeholder="preset",
                                     elem_id="bench-concurrency")
            requests = gr.Textbox("", label="Requests (empty: preset)", placeholder="preset", elem_id="bench-requests")
            goodput = gr.Textbox("", label="Goodput SLOs (optional)", placeholder="e.g. ttft:500 tpot:30 (ms)",
                                 elem_id="bench-goodput")
            max_conc = gr.Number(8, precision=0, label="Sweep: max concurrency")
            with gr.Accordion("Session workload (agents)", open=False):
                workload = gr.Dropdown(WORKLOAD_CHOICES, value="single", label="Workload", elem_id="bench-workload")
                sessions = gr.Textbox("", label="Sessions at once (empty: 8)", elem_id="bench-sessions")
                turns = gr.Textbox("", label="Turns per session (empty: 6)", elem_id="bench-turns")
                turn_isl = gr.Textbox("", label="Tokens each later turn adds (empty: 64)", elem_id="bench-turn-isl")
                think = gr.Textbox("", label="Think time between turns, s (empty: none)", elem_id="bench-think")
            reasoning = gr.Checkbox(False, label="Reasoning on (enable_thinking)")
            label = gr.Textbox(label="Label for this configuration", placeholder="e.g. no spec decoding")
            run = gr.Button("Run benchmark", variant="primary", elem_id="bench-run")
            download = gr.DownloadButton("Download result JSON")
        with gr.Column(scale=2):
            progress = gr.Markdown("*Not run yet.*", elem_id="bench-progress")
            # Wrapped: its widest lines (the shape, notes) ran off the right of the column.
            table = gr.Code(label="Result", language=None, lines=22, interactive=False, wrap_lines=True,
                            elem_id="bench-table")
            # No initial value: a plot first drawn from an empty frame never draws its marks.
            latency_plot = gr.BarPlot(None, x="bar", y="ms", color="percentile", color_map=dict(zip(
                                      PERCENTILE_NAMES, ("#4c78a8", "#f58518", "#b279a2"))), x_label_angle=-45,
                                      title="Latency percentiles (ms), grouped: TTFT, TPOT, E2E per concurrency",
                                      elem_id="bench-latency", height=280)
            sweep_plot = gr.ScatterPlot(None, x="output tok/s", y="decode tok/s per user", color="level",
                                        title="Trade-off: decode tok/s per user vs total output tok/s "
                                        "(one point per concurrency)", elem_id="bench-sweep", height=260)
            sessions_plot = gr.HTML(sessions_html([]), elem_id="bench-sessions-plot")
            compare = gr.Dataframe(headers=["metric", "unit", "A (previous run)", "B (this run)", "change %"],
                                   label="Compare: the last two runs side by side", interactive=False)
    results = gr.State([])
    tab = BenchTab(preset, run, progress, table, latency_plot, sweep_plot, compare, download, workload, sessions_plot)

    def run_fn(preset_name, isl_v, osl_v, conc_v, req_v, goodput_v, max_c, reasoning_v, label_v, workload_v,
               sessions_v, turns_v, turn_isl_v, think_v, history):
        url = resolve_url()
        if url is None:
            raise gr.Error("No server is running: launch one in the Server tab first.")
        workload_v = workload_v or "single"
        if preset_name == "sweep" and workload_v != "single":
            raise gr.Error("The sweep preset sends single requests: choose another preset for a session workload.",
                           print_exception=False)
        try:
            config = preset_config(preset_name, url, input_tokens=_whole_number(isl_v, "Input tokens"),
                                   output_tokens=_whole_number(osl_v, "Output tokens"),
                                   concurrency=_whole_number(conc_v, "Concurrency"),
                                   requests=_whole_number(req_v, "Requests"), reasoning=bool(reasoning_v),
                                   label=label_v or None, goodput=parse_goodput(goodput_v or None),
                                   workload=workload_v, sessions=_whole_number(sessions_v, "Sessions"),
                                   turns=_whole_number(turns_v, "Turns"),
                                   turn_input_tokens=_whole_number(turn_isl_v, "Tokens each later turn adds"),
                                   think_time_s=_seconds(think_v))
        except WorkbenchError as exc:
            raise gr.Error(f"{exc.message} {exc.hint or ''}", print_exception=False) from exc
        warnings: list[str] = []

        def work(report):
            def warn(message: str) -> None:
                warnings.append(message)
                report(message)

            if preset_name == "sweep":
                return run_sweep(config, sweep_levels(int(max_c or 8)), progress=report)
            return run_benchmark(config, progress=report, on_warning=warn)

        background = BackgroundWork(work)
        skip = gr.skip
        for p in background:
            text = f"⚠ **Warning before the run:** {p}" if isinstance(p, str) else _progress_text(p)
            yield text, skip(), skip(), skip(), skip(), skip(), skip(), history
        if background.error is not None:
            yield f"**Benchmark failed:** {background.error}", skip(), skip(), skip(), skip(), skip(), skip(), history
            return
        sweep = background.result if preset_name == "sweep" else None
        levels = sweep.levels if sweep is not None else [background.result]
        last = levels[-1]
        text = "\n\n".join(format_result(r) for r in levels)
        history = [*history, last][-2:]
        rows = []
        if len(history) == 2:
            rows = [[r["metric"], r["unit"], r["a"], r["b"], None if r["change_pct"] is None else round(r["change_pct"], 1)]
                    for r in compare_results(history[0], history[1])]
        path = tempfile.mkdtemp(prefix="bench-")
        files = sweep.save(path) if sweep is not None else last.save(path)
        partial = next((r.partial for r in levels if r.partial is not None), None)
        bound = [str(r.config.concurrency) for r in levels if r.client_bound]
        status = "**Done.**" if partial is None else f"⚠ **Partial result:** {partial}"
        if bound:
            status += f" Client-bound at concurrency {', '.join(bound)}: the load generator lagged (see the table)."
        if last.summary.per_turn:
            status += "\n\n```\n" + format_sessions(last) + "\n```"
        status += "".join(f"\n\n⚠ {w}" for w in warnings)
        yield (status, text, latency_frame(levels), sweep_frame(levels), sessions_html(history), rows,
               str(files.get("json") or next(iter(files.values()))), history)

    run.click(run_fn, [preset, isl, osl, concurrency, requests, goodput, max_conc, reasoning, label, workload,
                       sessions, turns, turn_isl, think, results],
              [progress, table, latency_plot, sweep_plot, sessions_plot, compare, download, results],
              concurrency_limit=1, concurrency_id="bench")
    return tab

"""Benchmark tab: run a load against the server, see the table and plots, compare
two runs side by side."""

from __future__ import annotations

import queue
import tempfile
import threading
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
from workbench.bench.report import format_result
from workbench.errors import WorkbenchError


@dataclass
class BenchTab:
    preset: gr.Dropdown
    run: gr.Button
    progress: gr.Markdown
    table: gr.Code
    latency_plot: gr.BarPlot
    sweep_plot: gr.LinePlot
    compare: gr.Dataframe
    download: gr.DownloadButton


def latency_frame(result: BenchResult | None) -> pd.DataFrame:
    rows = []
    if result is not None:
        s = result.summary
        for name, dist in (("TTFT", s.ttft_ms), ("TPOT", s.tpot_ms), ("ITL (chunk)", s.itl_ms), ("E2E", s.e2e_ms)):
            for q in ("p50", "p90", "p99"):
                value = getattr(dist, q, None)
                if value is not None:
                    rows.append({"metric": name, "percentile": q, "ms": value})
    # Category columns as object: Gradio's plots do not read pandas' string dtype as categories.
    return pd.DataFrame(rows, columns=["metric", "percentile", "ms"]).astype(
        {"metric": object, "percentile": object, "ms": float})


def sweep_frame(results: list[BenchResult]) -> pd.DataFrame:
    rows = [{"concurrency": r.config.concurrency, "value": v, "series": name}
            for r in results
            for name, v in (("output tok/s", r.summary.output_tok_s),
                            ("decode tok/s per user", r.summary.decode_tok_s_per_user.mean))
            if v is not None]
    return pd.DataFrame(rows, columns=["concurrency", "value", "series"]).astype(
        {"concurrency": float, "value": float, "series": object})


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
            isl = gr.Number(None, precision=0, label="Input tokens (empty: preset)")
            osl = gr.Number(None, precision=0, label="Output tokens (empty: preset)")
            concurrency = gr.Number(None, precision=0, label="Concurrency (empty: preset)")
            requests = gr.Number(None, precision=0, label="Requests (empty: preset)")
            max_conc = gr.Number(8, precision=0, label="Sweep: max concurrency")
            reasoning = gr.Checkbox(False, label="Reasoning on (enable_thinking)")
            label = gr.Textbox(label="Label for this configuration", placeholder="e.g. no spec decoding")
            run = gr.Button("Run benchmark", variant="primary", elem_id="bench-run")
            download = gr.DownloadButton("Download result JSON")
        with gr.Column(scale=2):
            progress = gr.Markdown("*Not run yet.*", elem_id="bench-progress")
            table = gr.Code(label="Result", language=None, lines=22, interactive=False, elem_id="bench-table")
            # No initial value: a plot first drawn from an empty frame never draws its marks.
            latency_plot = gr.BarPlot(None, x="percentile", y="ms", color="metric",
                                      title="Latency percentiles (ms)", elem_id="bench-latency", height=240)
            sweep_plot = gr.LinePlot(None, x="concurrency", y="value", color="series",
                                     title="Throughput vs concurrency", elem_id="bench-sweep", height=240)
            compare = gr.Dataframe(headers=["metric", "unit", "A (previous run)", "B (this run)", "change %"],
                                   label="Compare: the last two runs side by side", interactive=False)
    results = gr.State([])
    tab = BenchTab(preset, run, progress, table, latency_plot, sweep_plot, compare, download)

    def run_fn(preset_name, isl_v, osl_v, conc_v, req_v, max_c, reasoning_v, label_v, history):
        url = resolve_url()
        if url is None:
            raise gr.Error("No server is running: launch one in the Server tab first.")
        try:
            config = preset_config(preset_name, url, input_tokens=int(isl_v) if isl_v else None,
                                   output_tokens=int(osl_v) if osl_v else None,
                                   concurrency=int(conc_v) if conc_v else None,
                                   requests=int(req_v) if req_v else None, reasoning=bool(reasoning_v),
                                   label=label_v or None)
        except WorkbenchError as exc:
            raise gr.Error(f"{exc.message} {exc.hint or ''}", print_exception=False) from exc
        events: queue.Queue = queue.Queue()
        outcome: dict = {}

        def work():
            try:
                if preset_name == "sweep":
                    outcome["sweep"] = run_sweep(config, sweep_levels(int(max_c or 8)), progress=events.put)
                else:
                    outcome["result"] = run_benchmark(config, progress=events.put)
            except WorkbenchError as exc:
                outcome["error"] = f"{exc.message} {exc.hint or ''}"
            except Exception as exc:  # shown in the tab; the app stays up
                outcome["error"] = f"{type(exc).__name__}: {exc}"
            finally:
                events.put(None)

        threading.Thread(target=work, daemon=True).start()
        while (p := events.get()) is not None:
            yield _progress_text(p), gr.skip(), gr.skip(), gr.skip(), gr.skip(), gr.skip(), history
        if "error" in outcome:
            yield f"❌ **Benchmark failed:** {outcome['error']}", gr.skip(), gr.skip(), gr.skip(), gr.skip(), gr.skip(), history
            return
        levels = outcome["sweep"].levels if "sweep" in outcome else [outcome["result"]]
        last = levels[-1]
        text = "\n\n".join(format_result(r) for r in levels)
        history = [*history, last][-2:]
        rows = []
        if len(history) == 2:
            rows = [[r["metric"], r["unit"], r["a"], r["b"], None if r["change_pct"] is None else round(r["change_pct"], 1)]
                    for r in compare_results(history[0], history[1])]
        path = tempfile.mkdtemp(prefix="bench-")
        files = last.save(path)
        yield ("✅ **Done.**", text, latency_frame(last), sweep_frame(levels), rows,
               str(files.get("json") or next(iter(files.values()))), history)

    run.click(run_fn, [preset, isl, osl, concurrency, requests, max_conc, reasoning, label, results],
              [progress, table, latency_plot, sweep_plot, compare, download, results], concurrency_limit=1,
              concurrency_id="bench")
    return tab

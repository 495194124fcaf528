"""Throughput tab: the server's own /metrics as live figures and plots, the GPUs
beside it (NVML: one series per GPU), and the compact strip shown beside the chat."""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr
import pandas as pd

from workbench.metrics import SERIES_COLUMNS, MetricsPoller, SharedPoller, ThroughputFigures
from workbench.metrics.display import FIGURE_LABELS, PER_ENGINE_LABEL, STRIP_FIGURES, format_per_engine
from workbench.telemetry import GpuPoller, GpuReading, gpu_rows, shared_gpu_poller
from workbench.telemetry.sample import NO_GPU
from workbench.ui.exports import EXPORTS

TICK_S = 1.0
WINDOW_S = 5.0


@dataclass
class ThroughputTab:
    figures: gr.Markdown
    tokens_plot: gr.LinePlot
    requests_plot: gr.LinePlot
    kv_plot: gr.LinePlot
    spec_plot: gr.LinePlot
    gpu_figures: gr.Markdown
    gpu_util_plot: gr.LinePlot
    gpu_power_plot: gr.LinePlot
    export_csv: gr.DownloadButton
    export_json: gr.DownloadButton
    timer: gr.Timer


def figures_markdown(figures: ThroughputFigures | None, error: str | None = None) -> str:
    if figures is None:
        return f"*{error or 'Waiting for the first scrape…'}*"
    window = f"{figures.window_s:.1f} s" if figures.window_s else "since start"
    lines = [f"**Server figures** (from `/metrics`, window {window}, {figures.scrapes} scrapes)", "",
             "| figure | value |", "|---|---|"]
    lines += [f"| {label} | {figures.display(name)} |" for name, label in FIGURE_LABELS.items()]
    if figures.spec_acceptance_by_position:
        per_pos = ", ".join(f"{v:.2f}" for v in figures.spec_acceptance_by_position)
        lines.append(f"| Acceptance per draft position | {per_pos} |")
    per_engine = format_per_engine(figures.decode_tps_by_engine)
    if per_engine:
        lines.append(f"| {PER_ENGINE_LABEL} | {per_engine} |")
    if figures.counter_reset:
        lines.append("\n⚠ The server's counters went down: it restarted; rates restart from zero.")
    if error:
        lines.append(f"\n⚠ Last scrape failed: {error}")
    return "\n".join(lines)


def strip_markdown(figures: ThroughputFigures | None) -> str:
    """The compact line beside the chat."""
    if figures is None:
        return "*Server: no figures yet.*"
    return "**Server now** · " + " · ".join(f"{label} {figures.display(name)}" for name, label in STRIP_FIGURES.items())


def frames(poller: MetricsPoller | None) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Long-form frames for the plots; x is seconds relative to the newest scrape (0 = now)."""
    rows = poller.series_frame() if poller else []
    df = pd.DataFrame(rows, columns=list(SERIES_COLUMNS))
    times = df["time"].astype(float)
    seconds = (times - times.max()).round(2) if len(df) else times

    def long(columns: dict[str, str]) -> pd.DataFrame:
        # object, not pandas' string dtype: Gradio's plots read only object columns as categories.
        parts = [pd.DataFrame({"seconds": seconds, "value": df[col].astype(float),
                               "series": pd.Series([label] * len(df), dtype=object)})
                 for col, label in columns.items()]
        return pd.concat(parts, ignore_index=True).dropna(subset=["value"])

    tokens = long({"decode_tps": "decode tok/s", "prefill_tps": "prefill tok/s"})
    engines = per_engine_frame(poller, times.max() if len(df) else 0.0)
    return (
        pd.concat([tokens, engines], ignore_index=True) if len(engines) else tokens,
        long({"running": "running", "waiting": "waiting"}),
        long({"kv_pct": "KV cache %"}),
        long({"spec_acceptance": "acceptance rate"}),
    )


def per_engine_frame(poller: MetricsPoller | None, newest: float) -> pd.DataFrame:
    """Decode tok/s of each engine (data-parallel rank) as its own line, when there are several;
    the "decode tok/s" line is their sum."""
    rows = []
    for f in poller.figures() if poller else []:
        if f.decode_tps_by_engine and len(f.decode_tps_by_engine) > 1:
            for engine, value in f.decode_tps_by_engine.items():
                rows.append({"seconds": round(f.window_end - newest, 2), "value": value,
                             "series": f"decode tok/s engine {engine}"})
    frame = pd.DataFrame(rows, columns=["seconds", "value", "series"])
    frame["series"] = frame["series"].astype(object)
    return frame


def gpu_markdown(reading: GpuReading | None) -> str:
    """The GPUs now, as a table; or plainly that this machine has no NVIDIA GPU, and why."""
    if reading is None:
        return "*GPU: waiting for the first reading…*"
    if not reading.gpus:
        return f"**GPU** · {NO_GPU} on this machine ({reading.reason}). The plots stay empty."
    driver = f", driver {reading.driver_version}" if reading.driver_version else ""
    lines = [f"**GPUs** (this machine, via {reading.source}{driver})", "",
             "| GPU | name | util | memory used / total | power / limit | SM clock | temp | throttle |",
             "|---|---|---|---|---|---|---|---|"]
    lines += ["| " + " | ".join(row) + " |" for row in gpu_rows(reading)]
    return "\n".join(lines)


def gpu_frames(poller: GpuPoller) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Utilization and power, one series per GPU (and each GPU's power limit); x as the other plots."""
    readings = poller.readings()
    newest = readings[-1].taken_at if readings else 0.0
    util, power = [], []
    for r in readings:
        seconds = round(r.taken_at - newest, 2)
        for g in r.gpus:
            if g.utilization_pct is not None:
                util.append({"seconds": seconds, "value": g.utilization_pct, "series": f"GPU{g.index} util %"})
            if g.power_w is not None:
                power.append({"seconds": seconds, "value": g.power_w, "series": f"GPU{g.index} W"})
            if g.power_limit_w is not None:
                power.append({"seconds": seconds, "value": g.power_limit_w, "series": f"GPU{g.index} limit W"})

    def frame(rows: list[dict[str, object]]) -> pd.DataFrame:
        df = pd.DataFrame(rows, columns=["seconds", "value", "series"])
        df["series"] = df["series"].astype(object)
        return df

    return frame(util), frame(power)


def create_ui(shared: SharedPoller, gpus: GpuPoller | None = None) -> ThroughputTab:
    gpus = gpus or shared_gpu_poller()
    timer = gr.Timer(TICK_S, active=False)
    with gr.Row():
        with gr.Column(scale=2):
            # No initial value: a plot first drawn from an empty frame never draws its lines.
            empty = None
            tokens_plot = gr.LinePlot(empty, x="seconds", y="value", color="series", x_title="seconds (0 = now)", title="Tokens per second",
                                      elem_id="plot-tokens", height=260)
            requests_plot = gr.LinePlot(empty, x="seconds", y="value", color="series", x_title="seconds (0 = now)", title="Requests",
                                        elem_id="plot-requests", height=200)
            with gr.Row():
                kv_plot = gr.LinePlot(empty, x="seconds", y="value", color="series", x_title="seconds (0 = now)", title="KV cache usage (%)",
                                      elem_id="plot-kv", height=200)
                spec_plot = gr.LinePlot(empty, x="seconds", y="value", color="series", x_title="seconds (0 = now)",
                                        title="Speculative-decoding acceptance", elem_id="plot-spec", height=200)
            with gr.Row():
                gpu_util_plot = gr.LinePlot(empty, x="seconds", y="value", color="series", x_title="seconds (0 = now)",
                                            title="GPU utilization (%)", elem_id="plot-gpu-util", height=200)
                gpu_power_plot = gr.LinePlot(empty, x="seconds", y="value", color="series", x_title="seconds (0 = now)",
                                             title="GPU power (W)", elem_id="plot-gpu-power", height=200)
        with gr.Column(scale=1):
            figures = gr.Markdown(figures_markdown(None), elem_id="throughput-figures")
            gpu_figures = gr.Markdown(gpu_markdown(None), elem_id="gpu-figures")
            with gr.Row():
                export_csv = gr.DownloadButton("Export CSV")
                export_json = gr.DownloadButton("Export JSON")
    tab = ThroughputTab(figures, tokens_plot, requests_plot, kv_plot, spec_plot, gpu_figures, gpu_util_plot,
                        gpu_power_plot, export_csv, export_json, timer)

    def tick():
        latest = shared.tick()
        reading = gpus.tick()
        return (figures_markdown(latest, shared.error), *frames(shared.poller()), gpu_markdown(reading),
                *gpu_frames(gpus))

    timer.tick(tick, None, [figures, tokens_plot, requests_plot, kv_plot, spec_plot, gpu_figures, gpu_util_plot,
                            gpu_power_plot], show_progress="hidden")

    def export(kind: str):
        poller = shared.poller()
        if poller is None:
            raise gr.Error("No server: nothing recorded yet.")
        write = poller.export_csv if kind == "csv" else poller.export_json
        return EXPORTS.write(f"throughput.{kind}", write)

    export_csv.click(lambda: export("csv"), None, export_csv)
    export_json.click(lambda: export("json"), None, export_json)
    return tab

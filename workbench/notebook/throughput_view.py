"""ThroughputView: the server's own /metrics, scraped every `interval` s and redrawn, with the GPUs beside it."""

from __future__ import annotations

import threading
from typing import Any

import ipywidgets as W

from workbench.errors import WorkbenchError
from workbench.metrics import MetricsPoller
from workbench.metrics.display import FIGURE_LABELS, LIVE_FIGURES, PER_ENGINE_LABEL, format_per_engine
from workbench.notebook.html import error_html, esc, table
from workbench.telemetry import GpuPoller, gpu_rows
from workbench.telemetry.sample import NO_GPU

__all__ = ["ThroughputView"]

_SPARK = "▁▂▃▄▅▆▇█"


def _sparkline(values: list[float | None]) -> str:
    known = [v for v in values if v is not None]
    top = max(known, default=0.0) or 1.0
    return "".join(" " if v is None else _SPARK[min(7, int(v / top * 7.999))] for v in values)


class ThroughputView:
    """Scrapes the server's /metrics every `interval` s (a MetricsPoller) and redraws the figures."""

    def __init__(self, base_url: str, *, interval: float = 1.0, window: float = 5.0, spark_points: int = 60,
                 gpus: GpuPoller | None = None) -> None:
        self.poller = MetricsPoller(base_url, interval=interval, window=window)
        self.gpus = gpus or GpuPoller(interval=interval)
        self.spark_points = spark_points
        self.table = W.HTML("<i>not started</i>")
        self.gpu_table = W.HTML("")
        self.widget = W.VBox([W.HTML(f"<b>Live throughput</b> from <code>{esc(self.poller.url)}</code> "
                                     f"(rates over the last {window:g} s)"), self.table, self.gpu_table])
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.peak_decode_tps = 0.0

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)

    def scrape(self) -> None:
        """One scrape and redraw (the thread calls this every `interval`)."""
        self.gpu_table.value = self.gpu_html()
        try:
            figures = self.poller.scrape_once()
        except WorkbenchError as exc:
            self.table.value = error_html(exc)
            return
        self.peak_decode_tps = max(self.peak_decode_tps, figures.decode_tps or 0.0)
        history = [row["decode_tps"] for row in self.poller.series_frame()[-self.spark_points:]]
        rows = [[FIGURE_LABELS[name], figures.display(name)] for name in LIVE_FIGURES]
        per_engine = format_per_engine(figures.decode_tps_by_engine)
        if per_engine:
            rows.append([PER_ENGINE_LABEL, per_engine])
        rows.append(["decode tok/s history", _sparkline(history)])
        rows.append(["peak decode tok/s", f"{self.peak_decode_tps:.1f}"])
        self.table.value = table(["figure", "value"], rows)

    def gpu_html(self) -> str:
        """This machine's GPUs now (NVML), each with its utilization history; or plainly none."""
        reading = self.gpus.sample_once()
        if not reading.gpus:
            return f"<b>GPU</b>: {NO_GPU} on this machine ({esc(reading.reason)})"
        history = self.gpus.readings()[-self.spark_points:]
        rows = []
        for row, gpu in zip(gpu_rows(reading), reading.gpus):
            utils = [next((g.utilization_pct for g in r.gpus if g.index == gpu.index), None) for r in history]
            rows.append([*row, _sparkline(utils)])
        return f"<b>GPUs</b> (this machine, via {esc(reading.source)})" + table(
            ["GPU", "name", "util", "memory used / total", "power / limit", "SM clock", "temp", "throttle",
             "util history"], rows)

    def start(self) -> ThroughputView:
        self._stop.clear()

        def loop() -> None:
            while not self._stop.is_set():
                self.scrape()
                self._stop.wait(self.poller.interval)

        self._thread = threading.Thread(target=loop, name="throughput-view", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(self.poller.timeout + self.poller.interval + 1)
        self.scrape()  # the final figures stay on screen
        self.poller.close()

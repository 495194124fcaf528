"""Metrics: a vLLM server's own /metrics, turned into the figures people watch.

    parse.py    the one Prometheus parser: /metrics text -> Snapshot (vLLM's metric names)
    figures.py  Snapshots over a window -> ThroughputFigures (rates, gauges, percentiles,
                speculative-decoding acceptance: its formulas written once, here)
    display.py  units and the labels every view shows
    poller.py   MetricsPoller (one server, a bounded history), SharedPoller (one per app)
"""

from workbench.errors import MetricsError
from workbench.metrics.display import FIGURE_LABELS, NOT_REPORTED
from workbench.metrics.figures import (
    SERIES_COLUMNS,
    LatencySummary,
    ThroughputFigures,
    acceptance_rate,
    derive_figures,
    histogram_quantile,
    mean_acceptance_length,
    select_window,
)
from workbench.metrics.parse import Snapshot, fetch_metrics_text, parse_metrics
from workbench.metrics.poller import MetricsPoller, SharedPoller
from workbench.urls import metrics_url

__all__ = [
    "FIGURE_LABELS",
    "NOT_REPORTED",
    "SERIES_COLUMNS",
    "LatencySummary",
    "MetricsError",
    "MetricsPoller",
    "SharedPoller",
    "Snapshot",
    "ThroughputFigures",
    "acceptance_rate",
    "derive_figures",
    "fetch_metrics_text",
    "histogram_quantile",
    "mean_acceptance_length",
    "metrics_url",
    "parse_metrics",
    "select_window",
]

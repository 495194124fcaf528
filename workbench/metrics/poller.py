"""Scrape one server's /metrics on a schedule and keep a bounded history of figures."""

from __future__ import annotations

import csv
import json
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from workbench.errors import MetricsError, WorkbenchError
from workbench.metrics.figures import SERIES_COLUMNS, ThroughputFigures, derive_figures, select_window
from workbench.metrics.parse import Snapshot, fetch_metrics_text, parse_metrics
from workbench.urls import metrics_url

__all__ = ["MetricsPoller", "SharedPoller"]


def finite_or_none(value: Any) -> Any:
    """`value` with every NaN and infinity (at any depth) replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite_or_none(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_or_none(v) for v in value]
    return value


class MetricsPoller:
    """Scrapes one server's /metrics and keeps a bounded history of snapshots and figures.

    Pull (a UI timer):  poller.scrape_once(); poller.latest; poller.series_frame()
    Push (a thread):    poller.start() ... poller.stop()   (or `with MetricsPoller(...)`)

    `interval` is the thread's scrape period, `window` the default span of the figures,
    `history` how many scrapes (snapshots and one figures row each) are kept.
    """

    def __init__(
        self,
        base_url: str,
        interval: float = 1.0,
        window: float = 10.0,
        history: int = 600,
        timeout: float = 5.0,
    ) -> None:
        for name, value in (("interval", interval), ("window", window), ("timeout", timeout)):
            if not value > 0:
                raise MetricsError(f"{name} must be a positive number of seconds, not {value!r}")
        if history < 2:
            raise MetricsError(f"history must keep at least 2 scrapes, not {history!r}")
        self.base_url = base_url
        self.url = metrics_url(base_url)
        self.interval = interval
        self.window = window
        self.timeout = timeout
        # Enough snapshots to cover the window, whatever `history` says.
        self._snapshots: deque[Snapshot] = deque(
            maxlen=max(history, math.ceil(window / interval) + 2)
        )
        self._figures: deque[ThroughputFigures] = deque(maxlen=history)
        self._lock = threading.Lock()
        self._client = httpx.Client(timeout=timeout)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_error: MetricsError | None = None

    # pull API
    def scrape_once(self) -> ThroughputFigures:
        """Scrape now, record the snapshot, and return the figures over `window`."""
        text = fetch_metrics_text(self.url, self._client, self.timeout)
        return self.record(parse_metrics(text, time.time()))

    def record(self, snapshot: Snapshot) -> ThroughputFigures:
        """Add a snapshot (from scrape_once, or replayed text) and derive its figures row."""
        with self._lock:
            if self._snapshots and snapshot.taken_at <= self._snapshots[-1].taken_at:
                raise MetricsError(
                    "snapshots must be recorded in time order",
                    hint=f"this one was taken at {snapshot.taken_at}, "
                    f"the last at {self._snapshots[-1].taken_at}",
                )
            self._snapshots.append(snapshot)
            figures = derive_figures(select_window(self._snapshots, self.window))
            self._figures.append(figures)
            return figures

    def derive(self, window_s: float | None = None, until: float | None = None) -> ThroughputFigures:
        """Figures over the last `window_s` seconds (default: `window`) of what was scraped,
        ending at the last scrape at or before `until` (default: the newest)."""
        with self._lock:
            snapshots = select_window(
                list(self._snapshots), self.window if window_s is None else window_s, until
            )
        return derive_figures(snapshots)

    @property
    def latest(self) -> ThroughputFigures | None:
        """The figures of the newest scrape, None before the first."""
        with self._lock:
            return self._figures[-1] if self._figures else None

    def snapshots(self) -> list[Snapshot]:
        with self._lock:
            return list(self._snapshots)

    def figures(self) -> list[ThroughputFigures]:
        """One figures row per kept scrape, oldest first."""
        with self._lock:
            return list(self._figures)

    def series_frame(self) -> list[dict[str, float | None]]:
        """Rows for a live plot, oldest first, with the keys of SERIES_COLUMNS
        (time in unix seconds; None where there is no value)."""
        return [figures.series_row() for figures in self.figures()]

    # export
    def export_csv(self, path: str | Path) -> Path:
        """Write one row per kept scrape (flat_row columns; empty cell = None)."""
        rows = [figures.flat_row() for figures in self.figures()]
        path = Path(path)
        with path.open("w", newline="") as handle:
            columns = list(rows[0]) if rows else list(SERIES_COLUMNS)
            writer = csv.DictWriter(handle, fieldnames=columns)
            writer.writeheader()
            writer.writerows(rows)
        return path

    def export_json(self, path: str | Path) -> Path:
        """Write the poller's settings and every kept figures row (to_dict) as JSON."""
        path = Path(path)
        document = {
            "url": self.url,
            "interval_s": self.interval,
            "window_s": self.window,
            "figures": [figures.to_dict() for figures in self.figures()],
        }
        # A server may expose NaN or +Inf (a histogram's sum, a gauge): JSON has no such numbers.
        path.write_text(json.dumps(finite_or_none(document), indent=2, allow_nan=False) + "\n")
        return path

    # push API
    def start(self) -> None:
        """Scrape every `interval` seconds in a daemon thread until stop(). Errors do not
        end the thread (the server may come back); the newest is in `last_error`."""
        if self._thread and self._thread.is_alive():
            return
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._run, name=f"metrics-poller {self.url}", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(self.timeout + self.interval + 1)
            self._thread = None

    def close(self) -> None:
        self.stop()
        self._client.close()

    def __enter__(self) -> MetricsPoller:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _run(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            try:
                self.scrape_once()
                self.last_error = None
            except MetricsError as exc:
                self.last_error = exc
            # Keep to the schedule; after a slow scrape, skip the missed ticks.
            next_at = max(next_at + self.interval, time.monotonic())
            self._stop.wait(next_at - time.monotonic())


class SharedPoller:
    """One poller per server for a whole app: every viewer sees the same series, and
    several open pages do not multiply the scrapes. `resolve_url` names the server
    to watch now (None: no server); a new URL starts a new series."""

    def __init__(self, resolve_url: Callable[[], str | None], *, interval: float = 1.0,
                 window: float = 5.0, history: int = 900) -> None:
        self._resolve_url = resolve_url
        self.interval = interval
        self.window = window
        self.history = history
        self._poller: MetricsPoller | None = None
        self._lock = threading.Lock()
        self._last_scrape = 0.0
        self.error: str | None = None

    def poller(self) -> MetricsPoller | None:
        url = self._resolve_url()
        if url is None:
            return None
        if self._poller is None or self._poller.base_url != url:
            if self._poller is not None:
                self._poller.close()
            self._poller = MetricsPoller(url, interval=self.interval, window=self.window, history=self.history)
        return self._poller

    def tick(self) -> ThroughputFigures | None:
        """Scrape if the last scrape is older than the interval; the newest figures."""
        with self._lock:
            poller = self.poller()
            if poller is None:
                self.error = "No server is running."
                return None
            if time.monotonic() - self._last_scrape >= self.interval * 0.8:
                try:
                    poller.scrape_once()
                    self.error = None
                except WorkbenchError as exc:
                    self.error = exc.message
                self._last_scrape = time.monotonic()
            return poller.latest

"""The client's own lag: is the load generator, not the server, the bottleneck?

A probe task sleeps PROBE_INTERVAL_S over and over on the client's event loop and
records how late it wakes. A socket read waits on the same loop, so the probe's
lateness is how late a chunk's timestamp can be. A run whose p99 lag exceeds
CLIENT_BOUND_LAG_MS (or whose client used a whole core) is marked client-bound:
its latencies include the client's own queueing, not only the server's.

`collector_held_off()` keeps the garbage collector's older generations from running
inside the measured window: at 256 streams one full collection stopped the client's
loop for 16-19 ms (every stream's next chunk read that late), while the young
generation's collections (0.1-2 ms) keep running. What was allocated before the
window is frozen out of later collections; everything is restored after.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

from workbench.bench.summary import percentile

__all__ = ["CLIENT_BOUND_CPU_PERCENT", "CLIENT_BOUND_LAG_MS", "PROBE_INTERVAL_S", "ClientLag", "LagProbe",
           "collector_held_off"]

PROBE_INTERVAL_S = 0.010
# 10 ms is 5 % of a 200 ms TTFT: more than that and the client is part of the figure.
CLIENT_BOUND_LAG_MS = 10.0
CLIENT_BOUND_CPU_PERCENT = 90.0


@dataclass
class ClientLag:
    """How late the client's event loop ran during the measured window."""

    mean_ms: float | None
    p99_ms: float | None
    max_ms: float | None
    samples: int
    cpu_percent: float | None  # the client process's CPU time / wall time (100 = one core)

    @property
    def client_bound(self) -> bool:
        lagging = self.p99_ms is not None and self.p99_ms > CLIENT_BOUND_LAG_MS
        busy = self.cpu_percent is not None and self.cpu_percent >= CLIENT_BOUND_CPU_PERCENT
        return lagging or busy

    def describe(self) -> str:
        if self.p99_ms is None:
            return "client lag not measured"
        verdict = "CLIENT-BOUND: latencies include the client's own queueing" if self.client_bound else "ok"
        cpu = "" if self.cpu_percent is None else f", client CPU {self.cpu_percent:.0f} %"
        return (f"client event-loop lag p99 {self.p99_ms:.1f} ms (mean {self.mean_ms:.1f}, max {self.max_ms:.1f})"
                f"{cpu}: {verdict}")

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "client_bound": self.client_bound}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ClientLag:
        fields: dict[str, Any] = {k: data.get(k) for k in cls.__dataclass_fields__}
        return cls(**fields)


class LagProbe:
    """Start before the measured window, stop after it: `async with LagProbe() as probe: ...; probe.result`."""

    def __init__(self, interval_s: float = PROBE_INTERVAL_S) -> None:
        self.interval_s = interval_s
        self.lags_ns: list[int] = []
        self._task: asyncio.Task[None] | None = None
        self._cpu0 = 0.0
        self._wall0 = 0.0
        self.result: ClientLag | None = None

    async def _run(self) -> None:
        interval_ns = int(self.interval_s * 1e9)
        while True:
            before = time.monotonic_ns()
            await asyncio.sleep(self.interval_s)
            self.lags_ns.append(max(0, time.monotonic_ns() - before - interval_ns))

    async def __aenter__(self) -> LagProbe:
        self._cpu0, self._wall0 = time.process_time(), time.monotonic()
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> ClientLag:
        if self.result is not None:
            return self.result
        if self._task is not None:
            self._task.cancel()
        wall = time.monotonic() - self._wall0
        cpu = (time.process_time() - self._cpu0) / wall * 100 if wall > 0 else None
        lags = sorted(v / 1e6 for v in self.lags_ns)
        if not lags:
            self.result = ClientLag(None, None, None, 0, cpu)
        else:
            self.result = ClientLag(sum(lags) / len(lags), percentile(lags, 99), lags[-1], len(lags), cpu)
        return self.result


# Several benchmarks may run at once (threads of the web app): the first in sets the thresholds,
# the last out restores them.
_held = threading.Lock()
_holders = 0
_saved_thresholds: tuple[int, int, int] = gc.get_threshold()
_NEVER = 1 << 30


@contextlib.contextmanager
def collector_held_off() -> Iterator[None]:
    """Only the young generation is collected inside the block (see the module's docstring)."""
    global _holders, _saved_thresholds
    with _held:
        if _holders == 0:
            _saved_thresholds = gc.get_threshold()
            gc.freeze()
            gc.set_threshold(_saved_thresholds[0], _NEVER, _NEVER)
        _holders += 1
    try:
        yield
    finally:
        with _held:
            _holders -= 1
            if _holders == 0:
                gc.set_threshold(*_saved_thresholds)
                gc.unfreeze()

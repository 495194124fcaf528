"""Sending the measured load: a closed loop of N users, or Poisson arrivals with at
most N in flight; bounded by a request count or a duration.

The load stops early, keeping every finished record, when it is interrupted
(Ctrl-C cancels the task; `should_stop` returns True) or when the server stops
accepting connections. The reason is returned, so the run is saved as partial.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import aiohttp

from workbench.bench.client import stream_request
from workbench.bench.records import RequestFailure, RequestRecord
from workbench.errors import StopReason

__all__ = ["LoadOutcome", "LoadStop", "run_until_done", "send_load", "stop_for"]

# index -> (request JSON, target input tokens); built before the request's clock starts.
PayloadFactory = Callable[[int], Awaitable[tuple[bytes, int | None]]]


@dataclass(frozen=True)
class LoadStop:
    """Why the load ended early: the reason to branch on, and the words to show."""

    reason: StopReason
    message: str


def stop_for(record: RequestRecord) -> LoadStop | None:
    """The stop a finished request calls for: the server no longer accepts connections."""
    if record.failure is RequestFailure.CONNECT:
        return LoadStop(StopReason.SERVER_GONE, f"the server stopped accepting connections ({record.error})")
    return None


USER_STOP = LoadStop(StopReason.USER, "stopped by the user")


@dataclass
class LoadOutcome:
    records: list[RequestRecord]  # finished requests, by index
    stopped: LoadStop | None  # why the load ended early; None when it ran to its end
    in_flight_dropped: int = 0  # requests cut off by the stop (not in `records`)


async def run_until_done(start: Callable[[list[asyncio.Task[None]]], Awaitable[None]],
                         stopped: list[LoadStop]) -> None:
    """Await `start` (it adds the load's tasks to the list) and then every task.

    Ctrl-C cancels this task: it is taken as a stop, not an error (INTERRUPTED goes
    into `stopped`), the unfinished requests are cancelled and what finished stays."""
    tasks: list[asyncio.Task[None]] = []
    try:
        await start(tasks)
        await asyncio.gather(*tasks)
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if current is not None:
            current.uncancel()  # handled here: the finished records are the result
        stopped.append(LoadStop(StopReason.INTERRUPTED, "interrupted (Ctrl-C)"))
    finally:
        pending = [t for t in tasks if not t.done()]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)


async def send_load(
    session: aiohttp.ClientSession,
    url: str,
    payload: PayloadFactory,
    first_index: int,
    count: int | None,
    duration_s: float | None,
    concurrency: int,
    rate: float | None,
    seed: int,
    on_record: Callable[[RequestRecord], None],
    should_stop: Callable[[], bool] | None = None,
) -> LoadOutcome:
    records: list[RequestRecord] = []
    deadline = None if duration_s is None else time.monotonic() + duration_s
    next_index = first_index
    end_index = None if count is None else first_index + count
    stopped: list[LoadStop] = []

    def take() -> int | None:
        nonlocal next_index
        if stopped or (end_index is not None and next_index >= end_index):
            return None
        if deadline is not None and time.monotonic() >= deadline:
            return None
        if should_stop is not None and should_stop():
            stopped.append(USER_STOP)
            return None
        next_index += 1
        return next_index - 1

    async def one(index: int) -> None:
        body, target = await payload(index)
        record = await stream_request(session, url, body, index, target)
        gone = stop_for(record)
        if gone is not None and not stopped:
            stopped.append(gone)
        records.append(record)
        on_record(record)

    async def start(tasks: list[asyncio.Task[None]]) -> None:
        if rate is None:

            async def user() -> None:
                while (index := take()) is not None:
                    await one(index)
                    # Behind the other streams' chunks already read off the socket: in a closed loop the
                    # answers end together, and starting the next request (~0.2 ms of aiohttp each)
                    # first held up the reading of the other streams' last tokens.
                    await asyncio.sleep(0)

            tasks.extend(asyncio.create_task(user()) for _ in range(concurrency))
        else:
            rng = random.Random(seed)
            gate = asyncio.Semaphore(concurrency)
            next_at = time.monotonic()

            async def gated(index: int) -> None:
                try:
                    await one(index)
                finally:
                    gate.release()

            while (index := take()) is not None:
                await asyncio.sleep(max(0.0, next_at - time.monotonic()))
                await gate.acquire()
                tasks.append(asyncio.create_task(gated(index)))
                next_at += rng.expovariate(rate)

    await run_until_done(start, stopped)
    records.sort(key=lambda r: r.index)
    dropped = max(0, next_index - first_index - len(records))
    return LoadOutcome(records, stopped[0] if stopped else None, dropped)

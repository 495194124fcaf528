"""Async code for synchronous callers: the one bridge the chat turn and the benchmark share.

The coroutine runs on a private event loop in this thread; where this thread already runs
a loop (a Jupyter kernel, Gradio's event thread) a private loop cannot run here, so it runs
on a worker thread and what it yields or raises is handed back to the caller's thread."""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import AsyncGenerator, Callable, Coroutine, Iterator
from typing import Any, TypeVar

__all__ = ["iterate_sync", "loop_running", "run_sync"]

T = TypeVar("T")
LoopFactory = Callable[[], asyncio.AbstractEventLoop]


def loop_running() -> bool:
    """Whether this thread runs an event loop (so a private one cannot run here)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def run_sync(make: Callable[[], Coroutine[Any, Any, T]], loop_factory: LoopFactory | None = None,
             thread_name: str = "workbench-async") -> T:
    """Run the coroutine `make()` to its end and return its value (or raise its error)."""

    def here() -> T:
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            return runner.run(make())

    if not loop_running():
        return here()
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = here()
        except BaseException as exc:  # re-raised in the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=target, name=thread_name)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]  # type: ignore[no-any-return]


def iterate_sync(make: Callable[[], AsyncGenerator[T, None]], thread_name: str = "workbench-stream") -> Iterator[T]:
    """Iterate the async generator `make()`; closing this iterator closes it (a stream ends)."""
    if not loop_running():
        yield from _iterate_here(make)
        return
    items: queue.Queue[Any] = queue.Queue()
    done = object()

    def pump() -> None:
        try:
            for item in _iterate_here(make):
                items.put(item)
        except BaseException as exc:  # handed to the caller's thread below
            items.put(exc)
        finally:
            items.put(done)

    threading.Thread(target=pump, name=thread_name, daemon=True).start()
    while (item := items.get()) is not done:
        if isinstance(item, BaseException):
            raise item
        yield item


def _iterate_here(make: Callable[[], AsyncGenerator[T, None]]) -> Iterator[T]:
    loop = asyncio.new_event_loop()
    agen = make()
    try:
        while True:
            try:
                item = loop.run_until_complete(agen.__anext__())
            except StopAsyncIteration:
                break
            yield item
    finally:
        def close() -> None:
            loop.run_until_complete(agen.aclose())  # ends what the generator holds open (an HTTP stream)
            loop.close()

        if not loop_running():
            close()
        else:
            # Closed from a thread that runs a loop (Gradio closing a turn whose browser
            # went away): the private loop cannot run here.
            closer = threading.Thread(target=close, name=f"{threading.current_thread().name}-close", daemon=True)
            closer.start()
            closer.join(10)

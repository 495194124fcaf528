"""The one sync-over-async bridge (chat turns, benchmarks): it works from plain code and
from a thread that already runs an event loop (a Jupyter kernel, Gradio), hands errors back,
and closing the iterator closes the async generator (the HTTP stream of a chat turn)."""

import asyncio
import threading

import pytest

from workbench.syncbridge import iterate_sync, loop_running, run_sync


async def _value(x):
    await asyncio.sleep(0)
    return x * 2, threading.current_thread().name


async def _boom():
    raise ValueError("the server said no")


def test_run_sync_here_and_under_a_running_loop():
    assert not loop_running()
    value, thread = run_sync(lambda: _value(21))
    assert value == 42 and thread == threading.current_thread().name

    async def in_a_kernel():
        assert loop_running()
        return run_sync(lambda: _value(4), thread_name="bridge-test")

    assert asyncio.run(in_a_kernel()) == (8, "bridge-test")


def test_run_sync_reraises_in_the_callers_thread():
    with pytest.raises(ValueError, match="the server said no"):
        run_sync(_boom)

    async def in_a_kernel():
        run_sync(_boom)

    with pytest.raises(ValueError, match="the server said no"):
        asyncio.run(in_a_kernel())


def _counting(closed):
    async def gen():
        try:
            for i in range(100):
                await asyncio.sleep(0)
                yield i
        finally:
            closed.append(True)
    return gen


def test_iterate_sync_stops_the_generator_when_the_caller_stops():
    closed = []
    items = iterate_sync(_counting(closed))
    assert [next(items) for _ in range(3)] == [0, 1, 2]
    items.close()
    assert closed == [True]


def test_iterate_sync_under_a_running_loop_and_errors():
    closed = []

    async def in_a_kernel():
        return list(iterate_sync(_counting(closed)))

    assert asyncio.run(in_a_kernel()) == list(range(100)) and closed == [True]

    async def failing():
        yield 1
        raise ValueError("stream broke")

    got = []
    with pytest.raises(ValueError, match="stream broke"):
        for item in iterate_sync(failing):
            got.append(item)
    assert got == [1]

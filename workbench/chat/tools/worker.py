"""Run one tool call in a process of its own, with a hard timeout.

A thread cannot be stopped: a tool that loops (or a C call that never yields the
GIL, such as a huge `round`) would keep running after its timeout and stall the
whole app. So each call runs in a forked child, which sees the function and its
arguments as they are here (closures, notebook functions: nothing is pickled on
the way in), and is SIGKILLed when its time is up. Whatever the tool does,
raise SystemExit, call os._exit, print, the parent gets a `WorkerOutcome` back.

Where fork does not exist (not POSIX) the call runs in a daemon thread, with a
soft timeout, as before.
"""

from __future__ import annotations

import concurrent.futures
import os
import pickle
import select
import signal
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from workbench.errors import WorkbenchError

__all__ = ["WorkerOutcome", "run_in_worker"]

MAX_RESULT_BYTES = 1_000_000  # what a tool may send back; more is an error for the model


@dataclass(frozen=True)
class WorkerOutcome:
    """`result` when `error` is None; `timed_out` when the call was killed at its deadline."""

    result: Any = None
    error: str | None = None
    timed_out: bool = False


def error_text(exc: BaseException) -> str:
    """What the model is told about an exception a tool raised."""
    if isinstance(exc, WorkbenchError):
        return exc.message + (f" {exc.hint}" if exc.hint else "")
    if isinstance(exc, SystemExit):
        return f"The tool tried to exit (SystemExit {exc.code!r}); it was stopped, the chat goes on."
    if isinstance(exc, KeyboardInterrupt):
        return "The tool was interrupted (KeyboardInterrupt)."
    return f"{type(exc).__name__}: {exc}"


def _child(function: Callable[[], Any], write_fd: int) -> None:
    """In the forked child: run, send one pickled (ok, value) back, exit without cleanup."""
    code = 0
    try:
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(sig, signal.SIG_DFL)  # not the parent's handlers (they stop servers)
        try:
            payload: tuple[bool, Any] = (True, function())
        except BaseException as exc:  # everything, SystemExit included, is the model's news
            payload = (False, error_text(exc))
        try:
            data = pickle.dumps(payload)
        except Exception as exc:
            data = pickle.dumps((False, f"The tool returned a value that cannot be sent back ({exc})."))
        if len(data) > MAX_RESULT_BYTES:
            data = pickle.dumps((False, f"The tool's result is larger than {MAX_RESULT_BYTES} bytes."))
        view = memoryview(data)
        while view:
            view = view[os.write(write_fd, view):]
    except BaseException:
        code = 1
    finally:
        os._exit(code)  # no atexit handlers: those belong to the parent (they stop its servers)


def _read_until(fd: int, deadline: float) -> tuple[bytes, bool]:
    """Everything the child writes until it closes the pipe; (data, finished in time)."""
    chunks: list[bytes] = []
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return b"".join(chunks), False
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            return b"".join(chunks), True
        chunks.append(chunk)


def _reap(pid: int, kill: bool) -> int | None:
    if kill:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:
        return None
    return os.waitstatus_to_exitcode(status)


def _run_forked(function: Callable[[], Any], timeout: float) -> WorkerOutcome:
    read_fd, write_fd = os.pipe()
    with warnings.catch_warnings():
        # Python 3.12+ warns about fork() in a threaded process; the child only runs
        # the tool and exits, and the timeout ends it if it blocks on a lock.
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        _child(function, write_fd)
    os.close(write_fd)
    try:
        data, finished = _read_until(read_fd, time.monotonic() + timeout)
    finally:
        os.close(read_fd)
    exit_code = _reap(pid, kill=not finished)
    if not finished:
        return WorkerOutcome(timed_out=True)
    try:
        ok, value = pickle.loads(data)
    except Exception:
        return WorkerOutcome(error=f"The tool's process ended (exit code {exit_code}) without a result.")
    return WorkerOutcome(result=value) if ok else WorkerOutcome(error=value)


def _run_threaded(function: Callable[[], Any], timeout: float) -> WorkerOutcome:
    future: concurrent.futures.Future[Any] = concurrent.futures.Future()

    def target() -> None:
        try:
            future.set_result(function())
        except BaseException as exc:
            future.set_exception(exc)

    threading.Thread(target=target, name="workbench-tool", daemon=True).start()
    try:
        return WorkerOutcome(result=future.result(timeout))
    except concurrent.futures.TimeoutError:
        return WorkerOutcome(timed_out=True)
    except BaseException as exc:
        return WorkerOutcome(error=error_text(exc))


def run_in_worker(function: Callable[[], Any], timeout: float) -> WorkerOutcome:
    """Call `function()` in a child process, killed after `timeout` seconds. Never raises."""
    if hasattr(os, "fork"):
        return _run_forked(function, timeout)
    return _run_threaded(function, timeout)

"""Ending on a signal the way Ctrl-C ends: what this process launched is stopped.

Servers started with `stop_at_exit` are stopped by an atexit handler, which
Python runs on a normal exit, on Ctrl-C (KeyboardInterrupt) and on SystemExit,
but not when SIGTERM (a `kill`, a service stop) or SIGHUP (its terminal
closed) kills the process with their default action. `exit_on_signals()` turns
both into SystemExit in the main thread, so the same handlers run.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType

__all__ = ["EXIT_SIGNALS", "exit_on_signals"]

EXIT_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def exit_on_signals(before_exit: Callable[[int], None] | None = None) -> bool:
    """SIGTERM and SIGHUP raise SystemExit(128 + signal) in the main thread (SIGINT
    already raises KeyboardInterrupt). `before_exit(signum)` runs first (e.g. to pass
    the signal on to a child). False when called off the main thread (nothing set)."""
    if threading.current_thread() is not threading.main_thread():
        return False

    def handler(signum: int, frame: FrameType | None) -> None:
        for sig in EXIT_SIGNALS:  # a second signal while stopping must not cut the stop short
            signal.signal(sig, signal.SIG_IGN)
        if before_exit is not None:
            before_exit(signum)
        sys.exit(128 + signum)

    for sig in EXIT_SIGNALS:
        signal.signal(sig, handler)
    return True

"""Long work off Gradio's event thread: the view iterates the work's progress as it
comes and then reads its result or a one-line cause (never a traceback)."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any

from workbench.errors import WorkbenchError

__all__ = ["BackgroundWork"]

log = logging.getLogger(__name__)

_DONE = object()


class BackgroundWork:
    """`work(report)` runs in a daemon thread; iterating yields each value it reported.

    After the iteration ends, `result` holds what `work` returned, or `error` says why
    it failed (a WorkbenchError's message and hint, else the exception's type and text)."""

    def __init__(self, work: Callable[[Callable[[Any], None]], Any]) -> None:
        self._work = work
        self._events: queue.Queue[Any] = queue.Queue()
        self.result: Any = None
        self.error: str | None = None

    def _run(self) -> None:
        try:
            self.result = self._work(self._events.put)
        except WorkbenchError as exc:
            self.error = f"{exc.message} {exc.hint or ''}".strip()
        except Exception as exc:  # shown in the tab; the app stays up
            log.exception("background work failed")
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            self._events.put(_DONE)

    def __iter__(self) -> Iterator[Any]:
        threading.Thread(target=self._run, daemon=True).start()
        while (event := self._events.get()) is not _DONE:
            yield event

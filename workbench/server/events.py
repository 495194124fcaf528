"""`ServerEvent` and the event log a supervised server keeps: every event, in order, and who listens."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, Literal

from workbench.server.diagnosis import Diagnosis
from workbench.server.phases import StartupPhase, Status

__all__ = ["EventLog", "ServerEvent", "ServerEventKind"]

log = logging.getLogger("workbench.server")

ServerEventKind = Literal["phase", "progress", "status"]


@dataclass(frozen=True)
class ServerEvent:
    """One thing a view can show: a phase entered, progress within it, a status change."""

    kind: ServerEventKind
    phase: StartupPhase | None
    status: Status
    elapsed_s: float  # since the process started
    detail: str = ""
    progress: float | None = None  # 0..1, while loading weights
    diagnosis: Diagnosis | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["phase"] = self.phase.value if self.phase else None
        d["status"] = self.status.value
        d["diagnosis"] = self.diagnosis.to_dict() if self.diagnosis else None
        return d


class EventLog:
    """Events kept in order; subscribers called for each, waiters woken."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self._events: list[ServerEvent] = []
        self._subscribers: list[Callable[[ServerEvent], None]] = []

    def snapshot(self) -> list[ServerEvent]:
        with self.cond:
            return list(self._events)

    def since(self, index: int) -> list[ServerEvent]:
        """Events from `index` on (call holding `cond`)."""
        return self._events[index:]

    def __len__(self) -> int:
        return len(self._events)

    def subscribe(self, callback: Callable[[ServerEvent], None], *, replay: bool = True) -> Callable[[], None]:
        with self.cond:
            past = list(self._events) if replay else []
            self._subscribers.append(callback)
        for event in past:
            callback(event)
        return lambda: self._subscribers.remove(callback) if callback in self._subscribers else None

    def publish(self, event: ServerEvent) -> None:
        with self.cond:
            self._events.append(event)
            subscribers = list(self._subscribers)
            self.cond.notify_all()
        for callback in subscribers:
            try:
                callback(event)
            except Exception:  # a view's bug must not stop the supervision
                log.exception("an event subscriber failed on %s %s", event.kind, event.detail)

"""`AttachedURL`: a server started elsewhere. Alive while /health answers; stopping forgets it."""

from __future__ import annotations

from typing import ClassVar

from workbench.server.diagnosis import Diagnosis
from workbench.server.probe import probe
from workbench.server.process import StopResult, StopStage
from workbench.server.record import ServerRecord
from workbench.server.runtime import Runtime

__all__ = ["AttachedURL"]


class AttachedURL(Runtime):
    kind: ClassVar[str] = "attach"
    owns_processes: ClassVar[bool] = False

    def __init__(self, base_url: str, model: str, api_key: str | None) -> None:
        self.base_url = base_url
        self.model = model
        self.api_key = api_key
        self._last_health: int | None = None

    @classmethod
    def from_record(cls, record: ServerRecord) -> AttachedURL:
        return cls(record.base_url or "", record.served_model, record.api_key)

    @property
    def started_here(self) -> bool:
        return False

    def is_alive(self) -> bool:
        self._last_health = probe(self.base_url, self.model, self.api_key, timeout=1.5)[0]
        return self._last_health is not None

    def members(self) -> list[int]:
        return []

    def stop(self, timeout: float) -> StopResult:
        return StopResult(StopStage.DETACHED, 0.0)

    def gone_diagnosis(self) -> Diagnosis:
        health = self._last_health
        return Diagnosis("engine_died" if health else "unknown",
                         f"The attached server at {self.base_url} does not answer /health"
                         + (f" (HTTP {health})." if health else "."),
                         "Check the server where it was started; attach again once it is up.")

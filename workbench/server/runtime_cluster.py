"""`ClusterHead`: a multi-node deployment's head here; stopping it stops its workers alongside.

The cluster (cluster.py) wraps the head's own runtime in one of these, both when it
starts the nodes and when a record is loaded in another process (`adopt_head`):
the supervisor never needs to know that a head has workers."""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Callable
from typing import Any, ClassVar

from workbench.server.diagnosis import Diagnosis
from workbench.server.process import StopResult
from workbench.server.runtime import Runtime

__all__ = ["ClusterHead"]


class ClusterHead(Runtime):
    """`head` (a local process group), plus `stop_workers(timeout)` run beside its stop."""

    kind: ClassVar[str] = "cluster"

    def __init__(self, head: Runtime, stop_workers: Callable[[float], None]) -> None:
        self.head = head
        self.stop_workers = stop_workers

    @property
    def started_here(self) -> bool:
        return self.head.started_here

    def is_alive(self) -> bool:
        return self.head.is_alive()

    def has_exited(self) -> bool:
        return self.head.has_exited()

    @property
    def popen(self) -> subprocess.Popen[bytes] | None:
        return self.head.popen

    @property
    def exit_code(self) -> int | None:
        return self.head.exit_code

    def members(self) -> list[int]:
        return self.head.members()

    def stop(self, timeout: float) -> StopResult:
        # Even when the head is already gone, its workers are stopped.
        workers = threading.Thread(target=self.stop_workers, args=(timeout,), name="cluster-stop-workers",
                                   daemon=True)
        workers.start()
        try:
            return self.head.stop(timeout)
        finally:
            workers.join()

    def gone_diagnosis(self) -> Diagnosis | None:
        return self.head.gone_diagnosis()

    def record_fields(self) -> dict[str, Any]:
        return self.head.record_fields()

"""`Runtime`: how one kind of server runs, behind one interface the supervisor uses.

    Runtime (this file)
    ├─ LocalProcessGroup   runtime_local.py     `vllm serve` in its own process group here
    ├─ DockerContainer     runtime_docker.py    `docker run` in a process group; `docker stop` first
    ├─ AttachedURL         runtime_attached.py  a server started elsewhere: probed, never signalled
    └─ ClusterHead         runtime_cluster.py   a multi-node head: its group, and its workers' stop

The supervisor (`ServerProcess`, handle.py) owns readiness, phases, events, the
watcher and the record; a runtime answers only "is it alive?", "has it ended, with
what code?", "which processes are it?" and "stop it", and names what of it goes
into the record. A new kind of server is one new file with one subclass.
"""

from __future__ import annotations

import abc
import subprocess
from typing import Any, ClassVar

from workbench.server.diagnosis import Diagnosis
from workbench.server.process import StopResult

__all__ = ["Runtime"]


class Runtime(abc.ABC):
    """One running (or recorded) server's process side, as the supervisor sees it."""

    kind: ClassVar[str]  # the record's `mode` for a runtime it can be rebuilt from
    owns_processes: ClassVar[bool] = True  # False: nothing here is ever signalled (an attached URL)

    @property
    @abc.abstractmethod
    def started_here(self) -> bool:
        """True when this process started it (and so must reap it)."""

    @abc.abstractmethod
    def is_alive(self) -> bool:
        """Does it still run? For one loaded from a record: only if provably the same process."""

    def has_exited(self) -> bool:
        """The watcher's question: has what it follows ended? (exit_code then says how)."""
        return not self.is_alive()

    @property
    def popen(self) -> subprocess.Popen[bytes] | None:
        """The Popen of what this process started (None otherwise)."""
        return None

    @property
    def exit_code(self) -> int | None:
        """Its exit status once ended and known (started here), else None."""
        return None

    @abc.abstractmethod
    def members(self) -> list[int]:
        """The live pids that are it here (empty when gone, or not a process here)."""

    @abc.abstractmethod
    def stop(self, timeout: float) -> StopResult:
        """Staged stop; nothing of it is left running after it (or it raises LaunchError)."""

    def gone_diagnosis(self) -> Diagnosis | None:
        """Why it is gone, when the runtime knows better than the log (None: read the log)."""
        return None

    def record_fields(self) -> dict[str, Any]:
        """What of it the record keeps (ServerRecord field -> value), to find it again."""
        return {}

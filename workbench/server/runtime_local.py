"""`LocalProcessGroup`: `vllm serve` (or any command) in its own process group on this machine."""

from __future__ import annotations

import subprocess
from typing import Any, ClassVar

from workbench.server.process import ProcessGroup, Spawned, StopResult, StopStage, same_process, stop_group
from workbench.server.record import ServerRecord
from workbench.server.runtime import Runtime

__all__ = ["LocalProcessGroup"]


class LocalProcessGroup(Runtime):
    """A process group whose leader is `pid` (start_new_session=True), started at `pid_started_at`.

    Started here (`popen` set): alive while any member lives, and its exit code is
    known. Loaded from a record: alive only while the leader runs with the
    recorded start time (a record without one, or a reused pid, never counts), and
    such a group is never signalled unless proven."""

    kind: ClassVar[str] = "local"

    def __init__(self, pid: int | None, pid_started_at: float | None,
                 popen: subprocess.Popen[bytes] | None = None) -> None:
        self.pid = pid
        self.pid_started_at = pid_started_at
        self._popen = popen
        self.group = ProcessGroup(pid, popen) if pid else None

    @classmethod
    def spawned(cls, spawned: Spawned) -> LocalProcessGroup:
        return cls(spawned.pid, spawned.started_at, spawned.popen)

    @classmethod
    def from_record(cls, record: ServerRecord) -> LocalProcessGroup:
        return cls(record.pid, record.pid_started_at)

    @property
    def popen(self) -> subprocess.Popen[bytes] | None:
        return self._popen

    @property
    def started_here(self) -> bool:
        return self._popen is not None

    def is_alive(self) -> bool:
        if self.group is None:
            return False
        if self.popen is not None:
            # Ours: while any member lives the group id cannot be handed to another process.
            return bool(self.group.members())
        return same_process(self.pid, self.pid_started_at)

    def has_exited(self) -> bool:
        if self.popen is not None:
            return self.popen.poll() is not None
        return not self.is_alive()

    @property
    def exit_code(self) -> int | None:
        if self.popen is None:
            return None
        self.popen.poll()
        code: int | None = self.popen.returncode
        return code

    def members(self) -> list[int]:
        return self.group.members() if self.group else []

    def stop(self, timeout: float) -> StopResult:
        if self.group is None or (self.popen is None and not self.is_alive()):
            return StopResult(StopStage.ALREADY_GONE, 0.0)  # not provably ours: never signalled
        return stop_group(self.group, timeout)

    def record_fields(self) -> dict[str, Any]:
        return {"pid": self.pid, "pgid": self.pid, "pid_started_at": self.pid_started_at}

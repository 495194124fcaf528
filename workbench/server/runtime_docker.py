"""`DockerContainer`: `docker run` in a process group here; its stop asks Docker first."""

from __future__ import annotations

import logging
import subprocess
from typing import Any, ClassVar

from workbench.server.process import Spawned, StopResult
from workbench.server.record import ServerRecord
from workbench.server.runtime_local import LocalProcessGroup

__all__ = ["DockerContainer"]

log = logging.getLogger("workbench.server")


class DockerContainer(LocalProcessGroup):
    """The `docker run` client runs in a local process group; the container has a name.

    Stopping runs `docker stop -t <timeout> <name>` (the engine stops the container),
    then the group's staged stop ends the client if it is still there."""

    kind: ClassVar[str] = "docker"

    def __init__(self, pid: int | None, pid_started_at: float | None, container_name: str | None,
                 popen: subprocess.Popen[bytes] | None = None) -> None:
        super().__init__(pid, pid_started_at, popen)
        self.container_name = container_name

    @classmethod
    def for_container(cls, spawned: Spawned, container_name: str | None) -> DockerContainer:
        return cls(spawned.pid, spawned.started_at, container_name, spawned.popen)

    @classmethod
    def from_record(cls, record: ServerRecord) -> DockerContainer:
        return cls(record.pid, record.pid_started_at, record.container_name)

    def stop(self, timeout: float) -> StopResult:
        if self.container_name and self.is_alive():
            try:
                subprocess.run(["docker", "stop", "-t", str(int(timeout)), self.container_name],
                               capture_output=True, timeout=timeout + 30)
            except (OSError, subprocess.SubprocessError) as exc:
                log.warning("docker stop %s failed (%s); stopping the docker client's group instead",
                            self.container_name, exc)
        return super().stop(timeout)

    def record_fields(self) -> dict[str, Any]:
        return {**super().record_fields(), "container_name": self.container_name}

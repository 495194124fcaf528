"""`SshSession`: a worker node on another host, run through an ssh client here.

The ssh client is a local process group (`LocalProcessGroup`); on the worker host the
command runs in a session of its own, whose id its first line names in the node's log
(workbench.server.nodes.PGID_MARKER). Stopping signals that remote session over ssh
(SIGTERM, wait, SIGKILL), then the client here, which ends with it.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any, ClassVar

from workbench.server.nodes import PGID_MARKER, remote_stop_argv
from workbench.server.process import StopResult, StopStage
from workbench.server.runtime import Runtime
from workbench.server.runtime_local import LocalProcessGroup

__all__ = ["SshSession", "remote_session_id"]

_HEAD_BYTES = 64 * 1024  # the marker is the remote side's first line; ssh may print a warning before it


def remote_session_id(log_path: Path) -> int | None:
    """The remote session's id, from the marker line near the start of the node's log."""
    try:
        with log_path.open("rb") as f:
            head = f.read(_HEAD_BYTES).decode(errors="replace")
    except OSError:
        return None
    for line in head.splitlines():
        words = line.split()
        if len(words) == 2 and words[0] == PGID_MARKER and words[1].isdigit():
            return int(words[1])
    return None


class SshSession(Runtime):
    """`client` (the ssh process group here) and the session it started on `host`."""

    kind: ClassVar[str] = "ssh"

    def __init__(self, client: LocalProcessGroup, host: str, log_path: Path, ssh: str = "ssh",
                 remote_pgid: int | None = None) -> None:
        self.client = client
        self.host = host
        self.log_path = log_path
        self.ssh = ssh
        self._remote_pgid = remote_pgid

    @property
    def remote_pgid(self) -> int | None:
        """The remote session's id, once its log names it."""
        if self._remote_pgid is None:
            self._remote_pgid = remote_session_id(self.log_path)
        return self._remote_pgid

    @property
    def started_here(self) -> bool:
        return self.client.started_here

    def is_alive(self) -> bool:
        return self.client.is_alive()

    def has_exited(self) -> bool:
        return self.client.has_exited()

    @property
    def popen(self) -> subprocess.Popen[bytes] | None:
        return self.client.popen

    @property
    def exit_code(self) -> int | None:
        return self.client.exit_code

    def members(self) -> list[int]:
        return self.client.members()

    def stop(self, timeout: float) -> StopResult:
        started = time.monotonic()
        pgid = self.remote_pgid
        if not self.is_alive() or pgid is None:
            return self.client.stop(timeout)  # nothing runs there that this client does not end with it
        stage = StopStage.TERMINATED
        self._remote(pgid, "TERM")
        deadline = time.monotonic() + timeout
        while self._remote(pgid, "0") and time.monotonic() < deadline:
            time.sleep(0.5)
        if self._remote(pgid, "0"):
            self._remote(pgid, "KILL")
            stage = StopStage.KILLED
        self.client.stop(10.0)  # the ssh client here ends with the remote command
        return StopResult(stage, time.monotonic() - started, [self.client.pid] if self.client.pid else [])

    def _remote(self, pgid: int, sig: str) -> bool:
        """Send `sig` (TERM, KILL, or 0 to test) to the remote session; True when ssh says it was delivered."""
        try:
            return subprocess.run(remote_stop_argv(self.host, pgid, sig, self.ssh), capture_output=True,
                                  timeout=30).returncode == 0
        except (OSError, subprocess.SubprocessError):
            return False

    def record_fields(self) -> dict[str, Any]:
        return self.client.record_fields()

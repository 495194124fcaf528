"""Process groups: the one spawner, what a group holds now (psutil), and the staged stop.

A server (and each local worker node) runs in its own session
(`start_new_session=True`), so its process group holds it and every child it
spawns; stopping signals the whole group: SIGTERM, wait, then SIGKILL.
`StopStage` records how far it had to go. A process is known again by its pid
and its start time (`started_at`), so a reused pid is never taken for it.
"""

from __future__ import annotations

import enum
import logging
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil

from workbench.errors import LaunchError
from workbench.server.state import open_private

__all__ = ["STOP_TIMEOUT_S", "ProcessGroup", "Spawned", "StopResult", "StopStage", "cmdline", "descendants",
           "same_process", "spawn_group", "started_at", "stop_group"]

log = logging.getLogger("workbench.server")

STOP_TIMEOUT_S = 30.0
_DEAD = (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
# Two reads of one process's start time agree exactly; a margin far below the clock tick covers float rounding.
_SAME_START_S = 1e-3


class StopStage(str, enum.Enum):
    """How far the staged stop had to go."""

    ALREADY_GONE = "already_gone"  # nothing of the group was running
    TERMINATED = "terminated"  # everything exited after SIGTERM
    KILLED = "killed"  # something outlived SIGTERM's grace period: SIGKILL
    DETACHED = "detached"  # an attached server: forgotten, not signalled


@dataclass(frozen=True)
class StopResult:
    stage: StopStage
    seconds: float
    signalled_pids: list[int] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "stage": self.stage.value}


def _live(proc: psutil.Process) -> bool:
    try:
        return proc.status() not in _DEAD
    except psutil.Error:
        return False


def started_at(pid: int) -> float | None:
    """When `pid` started (seconds since the epoch), or None if no such live process."""
    try:
        proc = psutil.Process(pid)
        return proc.create_time() if _live(proc) else None
    except psutil.Error:
        return None


def same_process(pid: int | None, recorded_start: float | None) -> bool:
    """Is `pid` still the process that started at `recorded_start` (and not a zombie)?
    Without a recorded start nothing is proven: False."""
    if not pid or recorded_start is None:
        return False
    now = started_at(pid)
    return now is not None and abs(now - recorded_start) < _SAME_START_S


def cmdline(pid: int) -> str:
    """The command line of `pid`, or "?" when it is gone or hidden."""
    try:
        return " ".join(psutil.Process(pid).cmdline()) or "?"
    except psutil.Error:
        return "?"


def descendants(pids: Sequence[int]) -> dict[int, float]:
    """pid -> start time of `pids` and every live descendant of theirs."""
    found: dict[int, float] = {}
    for pid in pids:
        try:
            root = psutil.Process(pid)
            family = [root, *root.children(recursive=True)]
        except psutil.Error:
            continue
        for proc in family:
            try:
                if _live(proc):
                    found[proc.pid] = proc.create_time()
            except psutil.Error:
                continue
    return found


class ProcessGroup:
    """A process group started with start_new_session=True."""

    def __init__(self, pgid: int, popen: subprocess.Popen[bytes] | None = None) -> None:
        self.pgid = pgid
        self.popen = popen  # set when this process started it (so it must reap it)

    def members(self) -> list[int]:
        """Live pids in the group; zombies are dead and left out."""
        if self.popen is not None:
            self.popen.poll()  # reap the leader if it exited
        pids = []
        for pid in psutil.pids():
            try:
                # getpgid is one system call; the process's state is read only for members.
                if os.getpgid(pid) == self.pgid and _live(psutil.Process(pid)):
                    pids.append(pid)
            except (OSError, psutil.Error):
                continue  # exited while we looked
        return sorted(pids)

    def signal(self, sig: signal.Signals) -> bool:
        """Signal every member; False if the group no longer exists."""
        try:
            os.killpg(self.pgid, sig)
            return True
        except ProcessLookupError:
            return False

    def wait_gone(self, timeout: float) -> list[int]:
        """Wait until no member is left; returns the survivors (empty when all gone)."""
        deadline = time.monotonic() + timeout
        while True:
            alive = self.members()
            if not alive or time.monotonic() >= deadline:
                return alive
            time.sleep(0.1)


@dataclass(frozen=True)
class Spawned:
    """A process started in its own session by `spawn_group`."""

    popen: subprocess.Popen[bytes]
    started_at: float | None  # its start time, to know it again later

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def group(self) -> ProcessGroup:
        return ProcessGroup(self.popen.pid, self.popen)


def spawn_group(argv: Sequence[str], env: Mapping[str, str], log_path: Path, *, what: str, hint: str) -> Spawned:
    """Run `argv` in a new session (its own process group), stdout and stderr to
    `log_path` (0600; the previous log kept beside it as *.previous.log). The one
    way the workbench starts a server or a node. LaunchError names `what` failed."""
    if log_path.exists():
        log_path.replace(log_path.with_name(log_path.stem + ".previous" + log_path.suffix))
    with open_private(log_path) as out:
        try:
            popen = subprocess.Popen(list(argv), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     env={**os.environ, **env}, start_new_session=True)
        except OSError as exc:
            raise LaunchError(f"Could not start {what} ({argv[0]}): {exc}", hint=hint) from exc
    log.info("started %s: pid %d, log %s", what, popen.pid, log_path)
    return Spawned(popen, started_at(popen.pid))


def stop_group(group: ProcessGroup, timeout: float = STOP_TIMEOUT_S, kill_wait: float = 10.0) -> StopResult:
    """Staged stop: SIGTERM to the whole group, wait `timeout`, then SIGKILL."""
    started = time.monotonic()
    pids = group.members()
    if not pids:
        return StopResult(StopStage.ALREADY_GONE, 0.0, [])
    group.signal(signal.SIGTERM)
    if not group.wait_gone(timeout):
        return StopResult(StopStage.TERMINATED, time.monotonic() - started, pids)
    log.warning("group %d outlived SIGTERM by %.0f s: SIGKILL", group.pgid, timeout)
    group.signal(signal.SIGKILL)
    survivors = group.wait_gone(kill_wait)
    if survivors:
        raise LaunchError(
            f"Processes {survivors} of group {group.pgid} survived SIGKILL.",
            hint="They are stuck in the kernel (state D, often a hung GPU driver); "
            "check `ps -o pid,stat,cmd -g " + str(group.pgid) + "`.",
        )
    return StopResult(StopStage.KILLED, time.monotonic() - started, pids)

"""Process groups seen through /proc, and the staged stop.

A server runs in its own session (start_new_session=True), so its process group
holds it and every child it spawns; stopping signals the whole group: SIGTERM,
wait, then SIGKILL. `StopStage` records how far it had to go.
"""

from __future__ import annotations

import enum
import os
import signal
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from workbench.errors import LaunchError

__all__ = ["STOP_TIMEOUT_S", "ProcessGroup", "StopResult", "StopStage", "cmdline", "proc_stat", "stop_group"]

STOP_TIMEOUT_S = 30.0


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


def proc_stat(pid: int) -> tuple[str, int, int] | None:
    """(state, pgrp, start time in clock ticks) of a pid, from /proc/<pid>/stat."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name is in parentheses and may hold spaces: split after the last ')'.
    fields = text[text.rfind(")") + 2 :].split()
    return fields[0], int(fields[2]), int(fields[19])


def cmdline(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "?"
    return " ".join(p.decode(errors="replace") for p in raw.split(b"\0") if p) or "?"


class ProcessGroup:
    """A process group started with start_new_session=True, seen through /proc."""

    def __init__(self, pgid: int, popen: subprocess.Popen[bytes] | None = None) -> None:
        self.pgid = pgid
        self.popen = popen  # set when this process started it (so it must reap it)

    def members(self) -> list[int]:
        """Live pids in the group; zombies are dead and left out."""
        if self.popen is not None:
            self.popen.poll()  # reap the leader if it exited
        pids = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                stat = proc_stat(int(entry.name))
                if stat and stat[1] == self.pgid and stat[0] not in ("Z", "X"):
                    pids.append(int(entry.name))
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


def stop_group(group: ProcessGroup, timeout: float = STOP_TIMEOUT_S, kill_wait: float = 10.0) -> StopResult:
    """Staged stop: SIGTERM to the whole group, wait `timeout`, then SIGKILL."""
    started = time.monotonic()
    pids = group.members()
    if not pids:
        return StopResult(StopStage.ALREADY_GONE, 0.0, [])
    group.signal(signal.SIGTERM)
    if not group.wait_gone(timeout):
        return StopResult(StopStage.TERMINATED, time.monotonic() - started, pids)
    group.signal(signal.SIGKILL)
    survivors = group.wait_gone(kill_wait)
    if survivors:
        raise LaunchError(
            f"Processes {survivors} of group {group.pgid} survived SIGKILL.",
            hint="They are stuck in the kernel (state D, often a hung GPU driver); "
            "check `ps -o pid,stat,cmd -g " + str(group.pgid) + "`.",
        )
    return StopResult(StopStage.KILLED, time.monotonic() - started, pids)

"""How a wait for a server (or a multi-node deployment) ended, as a type.

`wait_ready(timeout, stop=...)` returns the server once it is ready; any other end raises
`NotReady`, a LaunchError whose `outcome` says which end it was, decided where the wait
ended (code branches on it, never on the message):

    ReadyOutcome.FAILED      it failed to start: `diagnosis` says why and what to change
    ReadyOutcome.TIMED_OUT   still starting when the timeout passed (it still runs)
    ReadyOutcome.STOPPED     `stop()` turned True (it still runs), or the server was stopped
"""

from __future__ import annotations

import enum

from workbench.errors import LaunchError
from workbench.server.diagnosis import Diagnosis

__all__ = ["NotReady", "ReadyOutcome"]


class ReadyOutcome(str, enum.Enum):
    READY = "ready"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    STOPPED = "stopped"


class NotReady(LaunchError):
    """A wait for readiness that did not end ready: `outcome`, `waited_s` (how long this wait
    lasted) and, for FAILED, the `diagnosis`."""

    def __init__(self, message: str, *, outcome: ReadyOutcome, waited_s: float, hint: str | None = None,
                 diagnosis: Diagnosis | None = None) -> None:
        super().__init__(message, hint=hint, settings=diagnosis.settings if diagnosis else ())
        self.outcome = outcome
        self.waited_s = waited_s
        self.diagnosis = diagnosis

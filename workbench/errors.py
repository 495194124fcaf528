"""The workbench's one exception tree.

WorkbenchError                  a user can fix it; `hint` says how, `settings` names what to change
├── InputError                  a value the user gave is malformed (a URL, a number, shell words)
├── RecipeError                 a recipe file is malformed (names file and key)
├── SelectionError              an unknown choice (lists the valid values)
├── LaunchError                 a server cannot be started or reached
├── MetricsError                /metrics cannot be read or is not a vLLM server's
├── BenchError                  a benchmark cannot run as configured
│   ├── BenchShapeError         the shape does not fit the server (suggests one that does)
│   └── BenchStopped            the load was stopped before anything was measured (`reason`)
├── PlannerError                the memory planner lacks what it needs (a config.json) or cannot model it
├── RoomError                   a workshop room refuses a sign-in or a turn (says why, and what to do)
└── ToolError                   a tool call failed (sent back to the model)

Errors from lower libraries are translated where they happen (`raise ... from exc`);
the CLI prints message and hint, the UIs show them, nothing shows a traceback.
Why work ended early is a `StopReason`, decided where the stop happens: code branches on
it, never on a message's wording (messages are for people; tests/test_wording.py checks).
The library says a setting in words and names it in `settings` (a BenchConfig field, a
serve option); each front end says where that setting lives (the CLI its flag: cli/hints.py).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping

__all__ = ["BenchError", "BenchShapeError", "BenchStopped", "InputError", "LaunchError", "MetricsError",
           "PlannerError", "RecipeError", "RoomError", "SelectionError", "StopReason", "ToolError",
           "WorkbenchError"]


class StopReason(str, enum.Enum):
    """Why work (a benchmark's load, an experiment, a wait for a server) ended before its end."""

    USER = "user"  # asked to stop: a Stop button, `should_stop()` or `stop()` turned True
    INTERRUPTED = "interrupted"  # Ctrl-C (KeyboardInterrupt, or the task was cancelled)
    SERVER_GONE = "server_gone"  # the server stopped accepting connections

    @property
    def by_user(self) -> bool:
        """Did a person end it (a Stop button, Ctrl-C), rather than the server going away?"""
        return self is not StopReason.SERVER_GONE


class WorkbenchError(Exception):
    """An error whose message says what went wrong, `hint` what to change and `settings`
    which settings (by name, e.g. "input_tokens", "workers") that change is to, each with the
    value to give it where the library knows one (else None)."""

    def __init__(self, message: str, *, hint: str | None = None,
                 settings: Iterable[str] | Mapping[str, object] = ()) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.settings: dict[str, object] = (dict(settings) if isinstance(settings, Mapping)
                                            else dict.fromkeys(settings))

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\n{self.hint}"

    def _render_traceback_(self) -> list[str]:
        """What IPython (a notebook cell) shows instead of a traceback: the cause and the change to make."""
        return [f"{type(self).__name__}: {self.message}", *([self.hint] if self.hint else [])]


class InputError(WorkbenchError):
    """A value the user gave is malformed: a URL, a number out of range, unbalanced shell quotes."""


class RecipeError(WorkbenchError):
    """A recipe file is malformed; the message names the file and every bad key."""


class SelectionError(WorkbenchError):
    """A choice names nothing that exists; the hint lists the valid values."""


class LaunchError(WorkbenchError):
    """A server cannot be started, reached or stopped."""


class MetricsError(WorkbenchError):
    """/metrics cannot be read or is not a vLLM server's."""


class BenchError(WorkbenchError):
    """A benchmark cannot run as configured."""


class BenchShapeError(BenchError):
    """The requested shape does not fit the server; `suggested_input_tokens` does."""

    def __init__(self, message: str, *, hint: str, suggested_input_tokens: int | None,
                 settings: Iterable[str] | Mapping[str, object] = ("input_tokens",)) -> None:
        super().__init__(message, hint=hint, settings=settings)
        self.suggested_input_tokens = suggested_input_tokens


class BenchStopped(BenchError):
    """The load was stopped before anything was measured (during the warm-up); `reason` says why."""

    def __init__(self, message: str, *, reason: StopReason, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.reason = reason


class PlannerError(WorkbenchError):
    """The memory planner lacks what it needs (the checkpoint's config.json) or cannot model the model."""


class RoomError(WorkbenchError):
    """A workshop room refuses a sign-in or a turn: a wrong room code, a turn already running.
    `retry_after_s` is set when the refusal is only for now (too many attempts from one
    address): the seconds until trying again is worth it."""

    def __init__(self, message: str, *, hint: str | None = None,
                 settings: Iterable[str] | Mapping[str, object] = (), retry_after_s: float | None = None) -> None:
        super().__init__(message, hint=hint, settings=settings)
        self.retry_after_s = retry_after_s


class ToolError(WorkbenchError):
    """A tool call failed; the message goes back to the model as the tool's result."""

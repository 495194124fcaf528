"""The workbench's one exception tree.

WorkbenchError                  a user can fix it; `hint` says how
├── InputError                  a value the user gave is malformed (a URL, a number, shell words)
├── RecipeError                 a recipe file is malformed (names file and key)
├── SelectionError              an unknown choice (lists the valid values)
├── LaunchError                 a server cannot be started or reached
├── MetricsError                /metrics cannot be read or is not a vLLM server's
├── BenchError                  a benchmark cannot run as configured
│   └── BenchShapeError         the shape does not fit the server (suggests one that does)
├── PlannerError                the memory planner lacks what it needs (a config.json) or cannot model it
├── RoomError                   a workshop room refuses a sign-in or a turn (says why, and what to do)
└── ToolError                   a tool call failed (sent back to the model)

Errors from lower libraries are translated where they happen (`raise ... from exc`);
the CLI prints message and hint, the UIs show them, nothing shows a traceback.
"""

from __future__ import annotations

__all__ = ["BenchError", "BenchShapeError", "InputError", "LaunchError", "MetricsError", "PlannerError",
           "RecipeError", "RoomError", "SelectionError", "ToolError", "WorkbenchError"]


class WorkbenchError(Exception):
    """An error whose message says what went wrong and `hint` what to change."""

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

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

    def __init__(self, message: str, *, hint: str, suggested_input_tokens: int | None) -> None:
        super().__init__(message, hint=hint)
        self.suggested_input_tokens = suggested_input_tokens


class PlannerError(WorkbenchError):
    """The memory planner lacks what it needs (the checkpoint's config.json) or cannot model the model."""


class RoomError(WorkbenchError):
    """A workshop room refuses a sign-in or a turn: a wrong room code, a turn already running."""


class ToolError(WorkbenchError):
    """A tool call failed; the message goes back to the model as the tool's result."""

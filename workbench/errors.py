"""The workbench's one exception tree.

WorkbenchError                  a user can fix it; `hint` says how
├── RecipeError                 a recipe file is malformed (names file and key)
├── SelectionError              an unknown choice (lists the valid values)
├── LaunchError                 a server cannot be started or reached
└── ToolError                   a tool call failed (sent back to the model)
"""

from __future__ import annotations


class WorkbenchError(Exception):
    """An error whose message says what went wrong and `hint` what to change."""

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\n{self.hint}"


class RecipeError(WorkbenchError):
    pass


class SelectionError(WorkbenchError):
    pass


class LaunchError(WorkbenchError):
    pass


class ToolError(WorkbenchError):
    pass

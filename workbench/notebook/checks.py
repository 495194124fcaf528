"""The DGX Spark environment checks as a table (the checks are workbench.server.environment's)."""

from __future__ import annotations

from collections.abc import Sequence

from workbench.notebook.html import table
from workbench.server.checks import EnvironmentCheck

__all__ = ["checks_table"]


def checks_table(checks: Sequence[EnvironmentCheck]) -> str:
    marks = {"ok": "ok", "missing": "MISSING", "warning": "⚠ check"}
    return table(["check", "result", "found here", "what to do"],
                 [[c.name, marks[c.status], c.found, c.fix] for c in checks])

"""`EnvironmentCheck`: what one check of this machine (or a running server) found, and what to do.

Checks report; none raises. Where each kind lives: the machine (environment.py), the weights in
the Hugging Face cache (hub.py), the memory free now (headroom.py), an endpoint for agents
(workbench.agents.checks), a room's day-of list (workbench.workshop.day_of).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["CheckStatus", "EnvironmentCheck"]

CheckStatus = Literal["ok", "missing", "warning"]


@dataclass
class EnvironmentCheck:
    """One thing a launch needs: what was found here, and what to do if it is missing."""

    name: str
    status: CheckStatus
    found: str
    fix: str = ""
    settings: tuple[str, ...] = ()  # the workbench settings `fix` is about (see workbench.errors)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

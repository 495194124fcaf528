"""The models the workbench builds itself, by the name a plan's `local_build` gives (the CPU demo
model, the forcing model, the rehearsal stand-in): `build_local(name)` builds one (once) and says
where it is.

The supervisor (workbench.server) serves what a plan names and asks here for a local build's
folder; the builders themselves are workbench.demo's, which knows nothing of servers.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from workbench.demo import models, rehearsal
from workbench.errors import LaunchError

__all__ = ["LOCAL_BUILDS", "build_local"]

LOCAL_BUILDS: dict[str, Callable[..., models.BuiltModel]] = {
    models.DEMO_MODEL_NAME: models.build_demo_model,
    models.FORCING_MODEL_NAME: models.build_forcing_model,
    rehearsal.REHEARSAL_NAME: rehearsal.build_rehearsal_model,
}


def build_local(name: str, progress: Callable[[str], None]) -> Path:
    """The folder of the local build `name`, built first if it is not there yet."""
    if name not in LOCAL_BUILDS:
        raise LaunchError(f"The plan asks for a local build named {name!r}, which the workbench cannot build.",
                          hint=f"Known local builds: {', '.join(LOCAL_BUILDS)}.")
    return LOCAL_BUILDS[name](progress=progress).path

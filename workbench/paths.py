"""Where the workbench keeps what it builds and caches: $WORKBENCH_CACHE or ~/.cache/nemotron-workbench.

    models/       models built here (the CPU demo, the forcing and rehearsal stand-ins): workbench.demo
    vllm-flags/   `vllm serve --help=all` read once per vLLM version: workbench.server.page_flags

(Servers' state folders are elsewhere: workbench.server.state.state_root.)
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["CACHE_ENV", "built_models_dir", "workbench_cache"]

CACHE_ENV = "WORKBENCH_CACHE"


def workbench_cache() -> Path:
    """$WORKBENCH_CACHE, or ~/.cache/nemotron-workbench."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "nemotron-workbench")


def built_models_dir() -> Path:
    """Where built models live (one folder each, by the build's name)."""
    return workbench_cache() / "models"

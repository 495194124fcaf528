"""Where servers are recorded: one folder per server, its state.json and its log.

A server keeps its folder after it exits, so a crash keeps its log and another
process (`python -m workbench status`, a restarted UI) can find it again.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["LOG_FILE", "STATE_DIR_ENV", "STATE_FILE", "read_json", "server_dir", "state_root", "write_json"]

STATE_DIR_ENV = "WORKBENCH_STATE_DIR"
STATE_FILE = "state.json"
LOG_FILE = "vllm.log"


def state_root(override: Path | str | None = None) -> Path:
    """Folder of per-server folders: the argument, $WORKBENCH_STATE_DIR, or
    ~/.cache/nemotron-workbench/servers."""
    if override is not None:
        return Path(override)
    env = os.environ.get(STATE_DIR_ENV)
    return Path(env) if env else Path.home() / ".cache" / "nemotron-workbench" / "servers"


def write_json(path: Path, data: Mapping[str, Any]) -> None:
    # Write then rename, so a reader never sees half a file. 0600: it may hold an API key.
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=2)
    os.replace(tmp, path)


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def server_dir(root: Path, mode: str, host: str, port: int) -> Path:
    name = str(port) if mode != "attach" else f"attach-{re.sub(r'[^A-Za-z0-9.-]', '_', host)}-{port}"
    return root / name


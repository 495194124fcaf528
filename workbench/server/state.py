"""Where servers are recorded: one folder per server, its state.json and its log.

A server keeps its folder after it exits, so a crash keeps its log and another
process (`python -m workbench status`, a restarted UI) can find it again.

What a record holds is `workbench.server.record.ServerRecord`; this module knows
where it lives and how a file is written safely. Folders are 0700 and files
0600: a record may hold an API key, a log what a server printed.
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

__all__ = ["LOG_FILE", "PREVIOUS_LOG_FILE", "SECRET_ENV", "STATE_DIR_ENV", "STATE_FILE", "make_private_dir",
           "open_private", "read_json", "redact", "redact_record", "server_dir", "state_root", "write_json"]

STATE_DIR_ENV = "WORKBENCH_STATE_DIR"
STATE_FILE = "state.json"
LOG_FILE = "vllm.log"
PREVIOUS_LOG_FILE = "vllm.previous.log"
REDACTED = "***"
SECRET_ENV = ("VLLM_API_KEY", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "OPENAI_API_KEY")


def state_root(override: Path | str | None = None) -> Path:
    """Folder of per-server folders: the argument, $WORKBENCH_STATE_DIR, or
    ~/.cache/nemotron-workbench/servers."""
    if override is not None:
        return Path(override)
    env = os.environ.get(STATE_DIR_ENV)
    return Path(env) if env else Path.home() / ".cache" / "nemotron-workbench" / "servers"


def make_private_dir(path: Path) -> Path:
    """Create `path` (and parents) and make it 0700; returns it."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(path, 0o700)
    return path


def open_private(path: Path, mode: str = "wb") -> Any:
    """Open a file for writing, created 0600 (and made 0600 if it existed)."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if "a" in mode else os.O_TRUNC)
    fd = os.open(path, flags, 0o600)
    os.fchmod(fd, 0o600)
    return os.fdopen(fd, mode)


def write_json(path: Path, data: Mapping[str, Any]) -> None:
    # Write then rename, so a reader never sees half a file. 0600: it may hold an API key.
    # The temporary name is per thread: two threads of one process may save at once.
    tmp = path.with_name(path.name + f".{os.getpid()}.{threading.get_ident()}.tmp")
    with open_private(tmp, "w") as f:
        json.dump(data, f, indent=2)
    os.replace(tmp, path)


def read_json(path: Path) -> dict[str, Any] | None:
    """The JSON object in `path`, or None if it is missing, unreadable or not an object."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def server_dir(root: Path, mode: str, host: str, port: int) -> Path:
    name = str(port) if mode != "attach" else f"attach-{re.sub(r'[^A-Za-z0-9.-]', '_', host)}-{port}"
    return root / name


# ── keys never shown ────────────────────────────────────────────────────────

_KEY_PATTERNS = (
    re.compile(r"(--api[-_]key[= ]+)(\S+)"),
    re.compile(r"""(['"]?api_key['"]?\s*[:=]\s*\[?\s*['"]?)([^'"\]\s,}]+)"""),
    re.compile(r"(Authorization:\s*Bearer\s+)(\S+)", re.IGNORECASE),
    re.compile(r"((?:VLLM_API_KEY|HF_TOKEN|OPENAI_API_KEY)=)(\S+)"),
)


def redact(text: str, secrets: Iterable[str | None] = ()) -> str:
    """`text` with every known secret and every `--api-key X`-like value replaced by ***."""
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, REDACTED)
    for pattern in _KEY_PATTERNS:
        text = pattern.sub(lambda m: m.group(1) + (m.group(2) if m.group(2) == REDACTED else REDACTED), text)
    return text


def _redact_argv(argv: list[str]) -> list[str]:
    out, hide = [], False
    for word in argv:
        if hide:
            out.append(REDACTED)
            hide = False
        elif word in ("--api-key", "--api_key"):
            out.append(word)
            hide = True
        else:
            out.append(redact(word))
    return out


def _redact_value(key: str | None, value: Any) -> Any:
    if key in SECRET_ENV or key == "api_key":
        return REDACTED if value else value
    if isinstance(value, dict):
        return {k: _redact_value(k, v) for k, v in value.items()}
    if isinstance(value, list):
        if all(isinstance(v, str) for v in value):
            return _redact_argv(value)
        return [_redact_value(None, v) for v in value]
    if isinstance(value, str):
        return redact(value)
    return value


def redact_record(record: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a record fit to print: API keys and tokens replaced by ***, wherever they stand."""
    return {k: _redact_value(k, v) for k, v in record.items()}

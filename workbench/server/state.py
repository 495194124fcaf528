"""Where servers are recorded: one folder per server, its state.json and its log.

A server keeps its folder after it exits, so a crash keeps its log and another
process (`python -m workbench status`, a restarted UI) can find it again.

A record is trusted only as far as it checks out: `check_record` refuses one
that is not what the workbench writes (a field missing or of the wrong type, an
unknown status, a log path outside its folder, a pgid that is not the pid), and
`scan_records` reports such a folder instead of failing on it. Folders are 0700
and files 0600: a record may hold an API key, a log what a server printed.
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["LOG_FILE", "PREVIOUS_LOG_FILE", "STATE_DIR_ENV", "STATE_FILE", "BadRecord", "RecordProblem",
           "check_record", "make_private_dir", "open_private", "read_json", "redact", "redact_record",
           "scan_records", "server_dir", "state_root", "write_json"]

STATE_DIR_ENV = "WORKBENCH_STATE_DIR"
STATE_FILE = "state.json"
LOG_FILE = "vllm.log"
PREVIOUS_LOG_FILE = "vllm.previous.log"
MODES = ("local", "docker", "attach")
STATUSES = ("starting", "ready", "failed", "stopped", "stopping")
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


# ── checking a record ───────────────────────────────────────────────────────


class BadRecord(ValueError):
    """A state file that is not a record the workbench writes."""


@dataclass(frozen=True)
class RecordProblem:
    """A server folder whose state file was skipped, and why."""

    folder: Path
    reason: str

    def describe(self) -> str:
        return f"skipped {self.folder / STATE_FILE}: {self.reason}"


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return (_is_int(value) or isinstance(value, float)) and value == value  # NaN is not a time


def _expect(record: Mapping[str, Any], key: str, ok: bool, what: str) -> None:
    if not ok:
        raise BadRecord(f"{key} is {record.get(key)!r}, not {what}")


def check_record(data: object, folder: Path) -> dict[str, Any]:
    """`data` if it is a record the workbench could have written in `folder`, else BadRecord."""
    if not isinstance(data, dict):
        raise BadRecord(f"it holds a JSON {type(data).__name__}, not an object")
    r = data
    for key in ("mode", "port", "served_model", "started_at"):
        if key not in r:
            raise BadRecord(f"it has no {key!r}")
    _expect(r, "mode", r["mode"] in MODES, "one of " + ", ".join(MODES))
    _expect(r, "port", _is_int(r["port"]) and 1 <= r["port"] <= 65535, "a port number 1-65535")
    _expect(r, "served_model", isinstance(r["served_model"], str), "a name")
    _expect(r, "started_at", _is_number(r["started_at"]), "a time")
    _expect(r, "status", r.get("status", "starting") in STATUSES, "one of " + ", ".join(STATUSES))
    for key in ("host", "base_url", "api_key", "container_name", "log_path", "run_id"):
        _expect(r, key, r.get(key) is None or isinstance(r[key], str), "text")
    for key in ("pid", "pgid", "pid_start_ticks", "exit_code"):
        _expect(r, key, r.get(key) is None or _is_int(r[key]), "a whole number")
    for key in ("pid", "pgid"):
        _expect(r, key, r.get(key) is None or r[key] > 1, "a process id")
    if r["mode"] != "attach" and r.get("pgid") != r.get("pid"):
        # Servers start in their own session, so the group id is the leader's pid.
        raise BadRecord(f"pgid {r.get('pgid')} is not pid {r.get('pid')}")
    _expect(r, "argv", r.get("argv") is None or (isinstance(r["argv"], list)
                                                 and all(isinstance(a, str) for a in r["argv"])), "a list of words")
    _expect(r, "env", r.get("env") is None or (isinstance(r["env"], dict)
                                               and all(isinstance(v, str) for v in r["env"].values())), "a mapping")
    for key in ("plan", "diagnosis"):
        _expect(r, key, r.get(key) is None or isinstance(r[key], dict), "an object")
    _expect(r, "phases", isinstance(r.get("phases", []), list), "a list")
    _expect(r, "time_to_ready_s", r.get("time_to_ready_s") is None or _is_number(r["time_to_ready_s"]), "seconds")
    if r.get("log_path"):
        log = Path(r["log_path"])
        inside = (folder / log.name).resolve() == (folder / log).resolve() and log.name in (LOG_FILE, PREVIOUS_LOG_FILE)
        if not inside:
            raise BadRecord(f"its log_path {r['log_path']} is outside {folder}")
    return r


def scan_records(root: Path) -> tuple[list[Any], list[RecordProblem]]:
    """Handles of every recorded server under `root` (newest first) and the folders skipped."""
    from workbench.server.handle import ServerProcess  # the handle reads records; records do not need it

    handles: list[ServerProcess] = []
    problems: list[RecordProblem] = []
    if not root.is_dir():
        return handles, problems
    for folder in sorted(d for d in root.iterdir() if d.is_dir()):
        path = folder / STATE_FILE
        if not path.exists():
            continue
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            problems.append(RecordProblem(folder, f"it cannot be read as JSON ({exc.__class__.__name__})"))
            continue
        try:
            handles.append(ServerProcess.from_record(data, folder))
        except BadRecord as exc:
            problems.append(RecordProblem(folder, str(exc)))
    handles.sort(key=lambda h: h.started_at, reverse=True)
    return handles, problems


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

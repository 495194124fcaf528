"""A server's (or node's) log file: its tail, its whole text, and new lines as they come."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

from workbench.server.state import redact

__all__ = ["LogFollower", "log_tail", "log_text", "without_exit_noise"]

# nanobind (Triton's Python bindings) prints a leak report when the interpreter exits: a
# "nanobind: leaked N types!" line and one line per leaked object. Nothing is wrong then.
_NANOBIND_HEAD = re.compile(r"^nanobind: ")
_NANOBIND_ITEM = re.compile(r"^ - (leaked |\.\.\. skipped remainder)")
_NANOBIND_SEE = "See https://nanobind.readthedocs.io/en/latest/refleaks.html"


def log_tail(path: Path | None, lines: int = 40, secrets: Iterable[str | None] = ()) -> list[str]:
    """The last `lines` lines of `path`, secrets redacted (empty when there is no log)."""
    if lines <= 0 or not path:
        return []
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 256 * lines))
            data = f.read().decode(errors="replace")
    except OSError:
        return []
    return [redact(line, secrets) for line in data.splitlines()[-lines:]]


def without_exit_noise(lines: Sequence[str]) -> list[str]:
    """`lines` with nanobind's leak report at exit folded into one line that says what it was."""
    out: list[str] = []
    hidden = 0
    for line in lines:
        if _NANOBIND_HEAD.match(line) or (hidden and _NANOBIND_ITEM.match(line)):
            hidden += 1
            continue
        if hidden and line.startswith(_NANOBIND_SEE):
            hidden += 1
            line = line[len(_NANOBIND_SEE):]  # the next message may follow on the same line
        if hidden:
            out.append(_folded(hidden))
            hidden = 0
        if line:
            out.append(line)
    return out + ([_folded(hidden)] if hidden else [])


def _folded(count: int) -> str:
    return (f"(nanobind's leak report at exit, {count} lines, left out: Triton's bindings print it when the "
            "process ends; nothing is wrong)")


def log_text(path: Path | None, secrets: Iterable[str | None] = ()) -> str:
    """The whole log, secrets redacted ("" when there is none)."""
    try:
        text = path.read_text(errors="replace") if path else ""
    except OSError:
        return ""
    return redact(text, secrets)


class LogFollower:
    """Reads what was appended to a log since the last call, as whole lines."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._offset = 0
        self._pending = b""

    def new_lines(self) -> list[str]:
        if not self.path:
            return []
        try:
            with self.path.open("rb") as f:
                f.seek(self._offset)
                chunk = f.read()
        except OSError:
            return []
        self._offset += len(chunk)
        # tqdm redraws with \r: treat it as a line end too.
        lines = (self._pending + chunk).replace(b"\r", b"\n").split(b"\n")
        self._pending = lines.pop()
        return [raw.decode(errors="replace") for raw in lines]

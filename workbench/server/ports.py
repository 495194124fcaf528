"""Ports: who listens on one (from /proc), whether one is free, a free one.

The one place the workbench checks ports: the launcher's busy-port refusal, the
notebooks' fallback to a free port and the tests' servers all use it.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path

from workbench.server.process import cmdline

__all__ = ["PortHolder", "free_port", "port_free", "port_holder"]


@dataclass(frozen=True)
class PortHolder:
    pid: int | None  # None when the socket's owner is not visible (another user)
    command: str

    def describe(self) -> str:
        return f"pid {self.pid} ({self.command})" if self.pid else self.command

def _listening_inodes(port: int) -> set[str]:
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            if len(cols) > 9 and cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(cols[9])
    return inodes


def port_holder(port: int) -> PortHolder | None:
    """Who listens on `port`, from /proc/net/tcp{,6} and /proc/*/fd; None if nobody."""
    inodes = _listening_inodes(port)
    if not inodes:
        return None
    targets = {f"socket:[{i}]" for i in inodes}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fds = list((entry / "fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(fd) in targets:
                    return PortHolder(int(entry.name), cmdline(int(entry.name)))
            except OSError:
                continue
    return PortHolder(None, "a process this user cannot see (another user's, or a container)")


def port_free(host: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now (the kernel's pick)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])

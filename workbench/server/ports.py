"""Ports: who listens on one (psutil), whether one is free, a free one.

The one place the workbench checks ports: the launcher's busy-port refusal, the
notebooks' fallback to a free port and the tests' servers all use it.
"""

from __future__ import annotations

import logging
import socket
from dataclasses import dataclass
from typing import Any, Protocol

import psutil

from workbench.errors import InputError
from workbench.server.process import cmdline

log = logging.getLogger("workbench.server")

__all__ = ["PortHolder", "check_listen_address", "check_port_number", "free_port", "port_free", "port_holder"]


def check_port_number(port: object, what: str = "The server's port", setting: str = "server_port") -> int:
    """`port` if it is a TCP port a server can listen on (1-65535), else InputError."""
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise InputError(f"{what} {port} is not a TCP port (1-65535).",
                         hint="Pick a free one, e.g. 8000 (vLLM's default) or 8001.", settings=(setting,))
    return port


def check_listen_address(host: str, port: int, what: str = "The server's port", setting: str = "server_port") -> None:
    """InputError when `host` is no address of this machine (a typo, a name that does not
    resolve), so it is not reported as a busy port later; `what`/`setting` name the port."""
    check_port_number(port, what, setting)
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError, ValueError) as exc:
        raise InputError(f"The address {host!r} to listen on is not one of this machine's ({exc}).",
                         hint="Use 127.0.0.1 (this machine only), 0.0.0.0 (every interface) or one of its IPs.",
                         settings=("host",)) from exc
    problem = "no address"
    for family, kind, proto, _, address in infos:
        with socket.socket(family, kind, proto) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(address)
                return
            except OSError as exc:
                if exc.errno == 98:  # EADDRINUSE: a real address, a busy port (reported by the caller)
                    return
                problem = exc.strerror or str(exc)
    raise InputError(f"The address {host!r} cannot be listened on here ({problem}).",
                     hint="Use 127.0.0.1 (this machine only), 0.0.0.0 (every interface) or one of its IPs.",
                     settings=("host",))


@dataclass(frozen=True)
class PortHolder:
    pid: int | None  # None when the socket's owner is not visible (another user)
    command: str

    def describe(self) -> str:
        return f"pid {self.pid} ({self.command})" if self.pid else self.command


def port_holder(port: int) -> PortHolder | None:
    """Who listens on `port` (psutil: the kernel's socket table and each process's
    descriptors); None if nobody."""
    try:
        conns = psutil.net_connections(kind="tcp")
    except psutil.Error as exc:  # e.g. macOS without privileges
        log.info("cannot read the socket table (%s); the port's holder is unknown", exc)
        return None
    listening = [c for c in conns if _listens_on(c, port)]
    if not listening:
        return None
    pid = next((conn.pid for conn in listening if conn.pid), None)
    if pid is None:
        return PortHolder(None, "a process this user cannot see (another user's, or a container)")
    # The socket table names one process per socket; a child that inherited it (a forked
    # worker, or the instant between fork and exec) may be the one named. Name the
    # ancestor that holds it too: the process that opened it.
    while (parent := _parent_listening(pid, port)) is not None:
        pid = parent
    return PortHolder(pid, cmdline(pid))


def _parent_listening(pid: int, port: int) -> int | None:
    try:
        parent = psutil.Process(pid).parent()
        if parent is None:
            return None
        held = parent.net_connections(kind="tcp")
    except psutil.Error:
        return None
    return parent.pid if any(_listens_on(c, port) for c in held) else None


class _Connection(Protocol):  # psutil's system-wide and per-process connection tuples
    status: str
    laddr: Any


def _listens_on(conn: _Connection, port: int) -> bool:
    return conn.status == psutil.CONN_LISTEN and bool(conn.laddr) and conn.laddr.port == port


def port_free(host: str, port: int) -> bool:
    if not 1 <= port <= 65535:
        return False
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except (OSError, OverflowError, UnicodeError):
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now (the kernel's pick)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])

"""How a workshop is served: where it listens, the room code, the presenter's login.

The secrets come from the command line or the environment (WORKBENCH_ROOM_CODE,
WORKBENCH_PRESENTER_AUTH). They are taken out of the environment once read, so
no child (vLLM, Docker) inherits them, and nothing here prints them.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from collections.abc import MutableMapping
from dataclasses import dataclass, field

from workbench.errors import InputError
from workbench.server.ports import check_listen_address

__all__ = ["LOOPBACK_HOSTS", "MIN_PASSWORD", "ROOM_CODE_ENV", "PRESENTER_AUTH_ENV", "WorkshopSettings",
           "check_password", "settings_from"]

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
ROOM_CODE_ENV = "WORKBENCH_ROOM_CODE"
PRESENTER_AUTH_ENV = "WORKBENCH_PRESENTER_AUTH"
MIN_ROOM_CODE = 4
MIN_PASSWORD = 8


def check_password(password: str, what: str, example: str, setting: str) -> None:
    """Refuse a login password short enough to guess (the presenter's, the UI's login)."""
    if len(password) < MIN_PASSWORD:
        raise InputError(f"{what} password is {len(password)} characters long; it must be at least {MIN_PASSWORD}.",
                         hint=f"Choose a longer one, e.g. {example}", settings=(setting,))


@dataclass(frozen=True)
class WorkshopSettings:
    host: str = "127.0.0.1"
    port: int = 7860
    room_code: str | None = field(default=None, repr=False)
    presenter_auth: tuple[str, str] | None = field(default=None, repr=False)
    # The address of a reverse proxy in front of the app: only its X-Forwarded-For is
    # believed (otherwise the header is ignored: anyone could rotate it past the throttles).
    trusted_proxy: str | None = None

    @property
    def exposed(self) -> bool:
        return self.host not in LOOPBACK_HOSTS

    def attendee_url(self) -> str:
        host = self.host
        if host in ("0.0.0.0", "::"):
            host = socket.gethostname()
        elif ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}/"

    def presenter_url(self) -> str:
        return self.attendee_url() + "presenter/"

    def check(self) -> None:
        """Refuse a room anyone on the network could use without the code, or drive without the login."""
        check_listen_address(self.host, self.port, "The app's port", setting="app_port")
        if self.trusted_proxy is not None:
            try:
                ipaddress.ip_address(self.trusted_proxy)
            except ValueError:
                raise InputError(f"The trusted proxy {self.trusted_proxy!r} is not an IP address.",
                                 hint="Give the address your reverse proxy connects from, e.g. 127.0.0.1.",
                                 settings=("trusted_proxy",)) from None
        if self.room_code is not None and len(self.room_code) < MIN_ROOM_CODE:
            raise InputError(f"The room code must be at least {MIN_ROOM_CODE} characters long.",
                             hint=f"Choose a longer one (or set {ROOM_CODE_ENV}).", settings=("room_code",))
        if not self.exposed:
            return
        missing = [what for what, value in (("a room code", self.room_code), ("a presenter login", self.presenter_auth))
                   if value is None]
        if missing:
            raise InputError(
                f"Refusing to serve the workshop on {self.host} without {' and '.join(missing)}: anyone who can "
                "reach this machine could chat with the model, or start and stop its server.",
                hint=f"Set {ROOM_CODE_ENV} and {PRESENTER_AUTH_ENV}=user:password (or give a room code and a "
                "presenter login), or bind 127.0.0.1.", settings=("room_code", "presenter_auth"))


def _presenter_auth(value: str | None) -> tuple[str, str] | None:
    if not value:
        return None
    user, sep, password = value.partition(":")
    if not sep or not user or not password:
        raise InputError("The presenter login must look like user:password.",
                         hint=f"For example {PRESENTER_AUTH_ENV}=presenter:some-long-password",
                         settings=("presenter_auth",))
    check_password(password, "The presenter's", f"{PRESENTER_AUTH_ENV}=presenter:some-long-password",
                   setting="presenter_auth")
    return user, password


def settings_from(host: str, port: int, room_code: str | None = None, presenter_auth: str | None = None,
                  environ: MutableMapping[str, str] | None = None, trusted_proxy: str | None = None) -> WorkshopSettings:
    """Settings from the flags, else the environment; the variables are removed from `environ`."""
    env = os.environ if environ is None else environ
    code_env = env.pop(ROOM_CODE_ENV, None)
    auth_env = env.pop(PRESENTER_AUTH_ENV, None)
    code = (room_code or code_env or "").strip() or None
    settings = WorkshopSettings(host, port, code, _presenter_auth(presenter_auth or auth_env), trusted_proxy or None)
    settings.check()
    return settings

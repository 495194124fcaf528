"""ASGI guards in front of the Gradio apps (pure ASGI: SSE streams pass through untouched).

    HostCheck       answers only the app's own host names: a web page whose name rebinds
                    to 127.0.0.1 (DNS rebinding) gets 421, not the single-user UI
    LoginThrottle   wrong logins (Gradio's POST .../login) put that address on a back-off:
                    a login that comes too soon gets 429 at once, with Retry-After, and
                    Gradio's login page is given a script that shows the wait; the right
                    password is refused at most LOGIN_MAX_BACKOFF_S after the last wrong one
    AttendeeGuard   the attendee app takes no files (Gradio's upload routes answer 403),
                    no request body over MAX_ATTENDEE_BODY bytes (413), and queue joins
                    (each message is one) at a bounded rate per session and per address (429),
                    refused here before Gradio spends anything on them
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Iterable
from typing import Any

from workbench.ui.login_wait import refusal_body, with_wait_script
from workbench.workshop.throttle import FailureBackoff, RateLimit, retry_after

__all__ = ["AttendeeGuard", "HostCheck", "LoginThrottle", "allowed_hosts", "login_throttle"]

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")
WILDCARDS = ("0.0.0.0", "::", "")
# Logins: 5 wrong in 5 minutes are free; after the 5th the next is checked 1 s later, then
# 2 s, 4 s ... up to LOGIN_MAX_BACKOFF_S after each wrong one; sooner ones get 429 at once.
LOGIN_FREE, LOGIN_WINDOW_S, LOGIN_BACKOFF_S, LOGIN_MAX_BACKOFF_S = 5, 300.0, 1.0, 30.0
# Pages larger than this are not Gradio's login page (its page is a few KiB): passed on as they come.
MAX_PAGE_SCANNED = 1 << 20
MAX_ATTENDEE_BODY = 256 * 1024  # a message at the room's largest limit is far below this
# Gradio routes that take files or media from the page; the attendee app has no such input.
# Queue joins: a message is one (its panels' refresh another); a page sends a few a minute.
# Per session 10 at once then 1/s; per address (a room behind one NAT: everyone) 128 at
# once, as when the presenter sends a prompt to everyone, then 16/s.
QUEUE_JOIN = "/gradio_api/queue/join"
JOINS_PER_SESSION, JOINS_PER_SESSION_S = 10, 1.0
JOINS_PER_ADDRESS, JOINS_PER_ADDRESS_S = 128, 16.0
UPLOAD_PATHS = ("/gradio_api/upload", "/gradio_api/upload_progress", "/gradio_api/process_recording",
                "/gradio_api/stream", "/gradio_api/vibe", "/gradio_api/mcp", "/upload")


async def _plain(send: Any, status: int, text: str, headers: Iterable[tuple[bytes, bytes]] = ()) -> None:
    body = text.encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                            (b"content-length", str(len(body)).encode()), *headers]})
    await send({"type": "http.response.body", "body": body})


def allowed_hosts(bind_host: str) -> frozenset[str] | None:
    """The Host names an app bound to `bind_host` answers (None: any, for a wildcard bind,
    which the CLI allows only behind a password)."""
    if bind_host in WILDCARDS:
        return None
    return frozenset({*LOOPBACK_NAMES, bind_host.strip("[]").lower()})


def _header(scope: dict[str, Any], name: bytes) -> bytes:
    return next((v for k, v in scope.get("headers", []) if k == name), b"")


def _host_name(headers: list[tuple[bytes, bytes]]) -> str:
    raw = next((v for k, v in headers if k == b"host"), b"").decode("latin-1").strip().lower()
    if raw.startswith("["):  # [::1]:7860
        return raw[1:raw.find("]")] if "]" in raw else raw
    name, _, port = raw.rpartition(":")
    if name and port.isdigit():
        return name
    return raw


class HostCheck:
    """421 for any Host not in `hosts` (HTTP and websockets)."""

    def __init__(self, app: Any, hosts: frozenset[str] | None) -> None:
        self.app = app
        self.hosts = hosts

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if self.hosts is not None and scope["type"] in ("http", "websocket"):
            host = _host_name(scope.get("headers", []))
            if host not in self.hosts and not _is_loopback_ip(host):
                if scope["type"] == "websocket":
                    await send({"type": "websocket.close", "code": 1008})
                    return
                await _plain(send, 421, f"This app answers only {', '.join(sorted(self.hosts))}, not {host!r}.")
                return
        await self.app(scope, receive, send)


def _is_loopback_ip(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def login_throttle() -> FailureBackoff:
    return FailureBackoff(free=LOGIN_FREE, window_s=LOGIN_WINDOW_S, base_s=LOGIN_BACKOFF_S,
                          max_s=LOGIN_MAX_BACKOFF_S)


class LoginThrottle:
    """Wrong logins per client address: a POST to a path ending in /login is checked only
    when the address's back-off allows (`FailureBackoff`), else answered 429 at once with
    Retry-After; an answer other than 200 counts as a failure. Pages a browser opens that
    show Gradio's login form get the script that shows the wait (`login_wait`)."""

    def __init__(self, app: Any, failures: FailureBackoff | None = None) -> None:
        self.app = app
        self.failures = failures or login_throttle()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
        elif scope.get("method") == "POST" and scope.get("path", "").rstrip("/").endswith("/login"):
            await self._login(scope, receive, send)
        elif scope.get("method") == "GET" and b"text/html" in _header(scope, b"accept"):
            # A page a browser opens (not its streams, nor its API calls): it may be the login form.
            await self.app(scope, receive, _LoginPageSender(send))
        else:
            await self.app(scope, receive, send)

    async def _login(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        address = (scope.get("client") or ("", 0))[0]
        wait = self.failures.admit(address)
        if wait:
            seconds = retry_after(wait)
            body, content_type = refusal_body(seconds, _header(scope, b"accept").decode("latin-1"))
            await send({"type": "http.response.start", "status": 429,
                        "headers": [(b"content-type", content_type), (b"content-length", str(len(body)).encode()),
                                    (b"retry-after", str(seconds).encode()), (b"cache-control", b"no-store")]})
            await send({"type": "http.response.body", "body": body})
            return
        status: list[int] = []

        async def watch(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status.append(int(message["status"]))
            await send(message)

        try:
            await self.app(scope, receive, watch)
        finally:
            if status and status[0] != 200:
                self.failures.failed(address)
            else:
                self.failures.passed(address)


class _LoginPageSender:
    """Passes a GET's answer on, adding the wait script to an HTML page that shows Gradio's
    login form (held until complete: such a page is one small body)."""

    def __init__(self, send: Any) -> None:
        self.send = send
        self.start: dict[str, Any] | None = None
        self.body = b""

    async def __call__(self, message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            given = dict(message.get("headers", []))
            if given.get(b"content-type", b"").startswith(b"text/html") and b"content-encoding" not in given:
                self.start = message
                return
        elif message["type"] == "http.response.body" and self.start is not None:
            self.body += message.get("body", b"")
            done = not message.get("more_body", False)
            if not done and len(self.body) <= MAX_PAGE_SCANNED:
                return
            start, self.start = self.start, None
            page = with_wait_script(self.body) if done else None
            if page is not None:
                headers = [(k, v) for k, v in start.get("headers", []) if k != b"content-length"]
                start = {**start, "headers": [*headers, (b"content-length", str(len(page)).encode())]}
            await self.send(start)
            await self.send({**message, "body": self.body if page is None else page})
            return
        await self.send(message)


class AttendeeGuard:
    """The attendee app's door: no uploads, no oversized bodies. Paths under
    `exempt` (the presenter's mount, behind its own login) pass untouched."""

    def __init__(self, app: Any, exempt: str = "/presenter", max_body: int = MAX_ATTENDEE_BODY,
                 cookie: str = "workbench_attendee") -> None:
        self.app = app
        self.exempt = exempt
        self.max_body = max_body
        self.cookie = cookie
        self.per_session = RateLimit(JOINS_PER_SESSION, JOINS_PER_SESSION_S)
        self.per_address = RateLimit(JOINS_PER_ADDRESS, JOINS_PER_ADDRESS_S)

    def _session(self, headers: list[tuple[bytes, bytes]]) -> str:
        for key, value in headers:
            if key == b"cookie":
                for part in value.decode("latin-1").split(";"):
                    name, _, cookie = part.strip().partition("=")
                    if name == self.cookie:
                        return cookie
        return ""

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or path == self.exempt or path.startswith(self.exempt + "/"):
            await self.app(scope, receive, send)
            return
        if any(path == p or path.startswith(p + "/") or path.startswith(p + "-") for p in UPLOAD_PATHS):
            await _plain(send, 403, "Attendees cannot upload files.")
            return
        if path == QUEUE_JOIN and scope.get("method") == "POST":
            address = (scope.get("client") or ("", 0))[0]
            wait = self.per_session.take("s:" + self._session(scope.get("headers", []))) or self.per_address.take(address)
            if wait:
                await _plain(send, 429, json.dumps({"detail": f"Too many messages at once: send again in "
                                                              f"{retry_after(wait)} s."}),
                             [(b"retry-after", str(retry_after(wait)).encode())])
                return
        length = next((v for k, v in scope.get("headers", []) if k == b"content-length"), None)
        if length is not None and (not length.isdigit() or int(length) > self.max_body):
            await _plain(send, 413, f"A request to the room may hold at most {self.max_body // 1024} KiB.")
            return
        received = 0

        async def counted() -> dict[str, Any]:
            nonlocal received
            message: dict[str, Any] = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_body:  # a chunked body without a length: hang up on it
                    return {"type": "http.disconnect"}
            return message

        await self.app(scope, counted, send)

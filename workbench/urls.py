"""Server URLs: the one normaliser every client of a vLLM server uses.

`normalize_base_url` turns what a user types ("host:port", "http://host:port/",
".../v1", ".../metrics") into the server root "http://host:port", or raises an
InputError saying what is wrong, before anything is sent.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit, urlunsplit

import httpx

from workbench.errors import InputError

__all__ = ["metrics_url", "normalize_base_url"]

_EXAMPLE = "Give the server's address like http://127.0.0.1:8000"


def normalize_base_url(url: str) -> str:
    """'http://host:port' from 'host:port', 'http://host:port/', '.../v1' or '.../metrics'."""
    text = (url or "").strip().rstrip("/")
    if not text:
        raise InputError("The server URL is empty.", hint=_EXAMPLE)
    if "://" not in text:
        text = "http://" + text
    try:
        parts = urlsplit(text)
        port = parts.port  # raises ValueError for a port that is not a number in 0-65535
        host = parts.hostname
    except ValueError as exc:
        raise InputError(f"{url!r} is not a valid server URL ({exc}).", hint=_EXAMPLE) from exc
    if parts.scheme not in ("http", "https"):
        raise InputError(f"{url!r} is not an http(s) URL.", hint=_EXAMPLE)
    if not host:
        raise InputError(f"{url!r} names no host.", hint=_EXAMPLE)
    if port == 0:
        raise InputError(f"{url!r} has port 0, which no server listens on.", hint=_EXAMPLE)
    _check_host(url, host)
    path = parts.path.rstrip("/")
    for suffix in ("/metrics", "/v1"):
        path = path.removesuffix(suffix)
    root = urlunsplit((parts.scheme, parts.netloc, path, "", ""))
    try:
        httpx.URL(root)  # what every client here sends with: control characters, bad IDNA names
    except httpx.InvalidURL as exc:
        raise InputError(f"{url!r} is not a valid server URL ({exc}).", hint=_EXAMPLE) from exc
    return root


def _check_host(url: str, host: str) -> None:
    """A dotted-quad host must be a real IPv4 address (999.1.1.1 is not)."""
    looks_ipv4 = all(part.isdigit() for part in host.split(".")) and host.count(".") == 3
    if looks_ipv4 or ":" in host:
        try:
            ipaddress.ip_address(host)
        except ValueError as exc:
            raise InputError(f"{url!r}: {host} is not a valid IP address.", hint=_EXAMPLE) from exc


def metrics_url(base_url: str) -> str:
    """http://host:port[/v1][/metrics] -> http://host:port/metrics."""
    return normalize_base_url(base_url) + "/metrics"

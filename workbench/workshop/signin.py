"""Signing in to the room: a name and the room code, then a signed token.

The token is `<name, base64url>.<HMAC-SHA256 of the name>` under a key made
fresh for each run of the app, so it cannot be forged without the key, holds no
secret (not the room code), and stops working when the app restarts (attendees
sign in again). Wrong codes are throttled per client address.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable

from workbench.errors import RoomError

__all__ = ["COOKIE_NAME", "MAX_NAME_LENGTH", "SignIn", "normalize_name"]

COOKIE_NAME = "workbench_attendee"
MAX_NAME_LENGTH = 40
# Letters and digits of any script, spaces and . ' - _ : nothing a page could read as markup.
_NAME_RE = re.compile(r"^[^\W][\w .'-]*$")
FAILURES_ALLOWED = 8  # wrong codes per client address ...
FAILURE_WINDOW_S = 60.0  # ... within this many seconds, then refused until the window passes


def normalize_name(name: str | None) -> str:
    """The name as the room keeps it (spaces collapsed), or a RoomError saying what to change."""
    cleaned = " ".join((name or "").split())
    if not cleaned:
        raise RoomError("Type your name to sign in.", hint="Any name the presenter will recognise, e.g. Ada L.")
    if len(cleaned) > MAX_NAME_LENGTH:
        raise RoomError(f"That name is {len(cleaned)} characters long; the limit is {MAX_NAME_LENGTH}.",
                        hint="Use a shorter name.")
    if not _NAME_RE.match(cleaned):
        raise RoomError("A name may hold letters, digits, spaces and . ' - _ only, starting with a letter or digit.",
                        hint="Remove the other characters.")
    return cleaned


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class SignIn:
    """Checks names and the room code, and issues and reads sign-in tokens.

    room_code None: no code is asked (only on loopback; the CLI refuses otherwise)."""

    def __init__(self, room_code: str | None, *, key: bytes | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._code = room_code.encode() if room_code else None
        self._key = key or secrets.token_bytes(32)
        self._clock = clock
        self._failures: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    @property
    def code_required(self) -> bool:
        return self._code is not None

    def check(self, name: str | None, code: str | None, client: str = "") -> str:
        """The normalised name if the code is right; else a RoomError (throttled per `client`)."""
        cleaned = normalize_name(name)
        if self._code is None:
            return cleaned
        now = self._clock()
        with self._lock:
            recent = self._failures.setdefault(client, deque())
            while recent and now - recent[0] > FAILURE_WINDOW_S:
                recent.popleft()
            if len(recent) >= FAILURES_ALLOWED:
                raise RoomError("Too many wrong room codes from this computer.",
                                hint="Wait a minute, then type the code exactly as the presenter shows it.")
        if hmac.compare_digest((code or "").strip().encode(), self._code):
            return cleaned
        with self._lock:
            self._failures.setdefault(client, deque()).append(now)
        raise RoomError("That room code is not right.", hint="Type the code exactly as the presenter shows it.")

    def token_for(self, name: str) -> str:
        encoded = _b64(name.encode())
        return f"{encoded}.{self._signature(encoded)}"

    def name_from(self, token: str | None) -> str | None:
        """The name a token was issued for, or None (missing, malformed, forged, or from an earlier run)."""
        if not token or token.count(".") != 1:
            return None
        encoded, signature = token.split(".")
        if not hmac.compare_digest(signature, self._signature(encoded)):
            return None
        try:
            return _unb64(encoded).decode()
        except (ValueError, UnicodeDecodeError):
            return None

    def _signature(self, encoded: str) -> str:
        return _b64(hmac.new(self._key, encoded.encode(), hashlib.sha256).digest())

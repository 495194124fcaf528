"""Per-address throttles for sign-ins, room codes and logins.

A room behind one NAT is one address, so nothing here locks an address out for
good: `RateLimit` lets a room's worth of sign-ins through at once and then a
steady trickle; `FailureBackoff` leaves the first failures free, then checks an
address's attempts no faster than a back-off that doubles with each failure (so a
guesser gets a few tries a minute). Both answer at once with how long to wait:
nothing here holds a request, so a flood costs no sockets, and the right answer is
refused at most for the back-off in force.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable

__all__ = ["FailureBackoff", "RateLimit", "retry_after"]

# Addresses remembered at most; the oldest are forgotten first (a flood of spoofed
# addresses cannot grow memory without bound).
MAX_ADDRESSES = 10_000


def retry_after(wait_s: float) -> int:
    """A wait as HTTP's Retry-After says it: whole seconds, rounded up, at least 1."""
    return max(1, math.ceil(wait_s))


class RateLimit:
    """A token bucket per address: `burst` at once, then one every 1/`per_s` seconds."""

    def __init__(self, burst: int, per_s: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.burst = burst
        self.per_s = per_s
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}  # address -> (tokens, at)
        self._lock = threading.Lock()

    def take(self, address: str) -> float:
        """0.0 if `address` may go ahead now (a token is spent); else the seconds until it may."""
        now = self._clock()
        with self._lock:
            tokens, at = self._buckets.get(address, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - at) * self.per_s)
            if tokens < 1.0:
                self._buckets[address] = (tokens, now)
                return (1.0 - tokens) / self.per_s if self.per_s > 0 else float("inf")
            self._buckets.pop(address, None)
            self._buckets[address] = (tokens - 1.0, now)
            while len(self._buckets) > MAX_ADDRESSES:
                self._buckets.pop(next(iter(self._buckets)))
            return 0.0


class FailureBackoff:
    """Answers an address's attempts at once, and past `free` failures within `window_s`
    checks them no faster than a back-off allows.

    `admit(address)` is 0.0 when this attempt may be checked now (end it with `failed()`
    or `passed()`), else the seconds until the address's next attempt will be checked:
    refuse this one unchecked (no answer leaks) and say how long to wait. Nothing waits
    here, and a refused attempt moves nothing: the wait never grows from being asked.

    After the k-th recent failure (k >= `free`) the next check comes `base_s` * 2**(k - free)
    later, at most `max_s`; the right answer is refused at most that long after the last
    wrong one checked. Attempts being checked count as failures until they end (a burst
    sent at once gets no more free checks than one sent in turn). A right answer does not
    wipe the record (a guesser could otherwise reset it)."""

    def __init__(self, *, free: int, window_s: float, base_s: float, max_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.free, self.window_s, self.base_s, self.max_s = free, window_s, base_s, max_s
        self._clock = clock
        self._failures: dict[str, deque[float]] = {}
        self._next_check: dict[str, float] = {}  # address -> when its next attempt may be checked
        self._checking: dict[str, int] = {}  # attempts admitted and not yet failed or passed
        self._lock = threading.Lock()

    def _recent(self, address: str, now: float, *, keep: bool = False) -> deque[float]:
        recent = self._failures.setdefault(address, deque()) if keep else self._failures.get(address, deque())
        while recent and now - recent[0] > self.window_s:
            recent.popleft()
        return recent

    def backoff_after(self, failures: int) -> float:
        """Seconds from the `failures`-th recent failure to the next check (0.0 within the free ones)."""
        over = failures - self.free
        return 0.0 if over < 0 else min(self.max_s, self.base_s * 2.0 ** over)

    def admit(self, address: str) -> float:
        """0.0: check this attempt now; else the seconds until this address's next check."""
        now = self._clock()
        with self._lock:
            next_check = self._next_check.get(address, now)
            if next_check > now:
                return next_check - now
            self._next_check.pop(address, None)  # passed: nothing to remember
            checking = self._checking.get(address, 0)
            # This attempt would be failure number `would_be`: while it is checked, the
            # next one waits as if it had failed (a burst gets no more checks than a sequence).
            would_be = len(self._recent(address, now)) + checking + 1
            backoff = self.backoff_after(would_be)
            if backoff:
                self._next_check[address] = now + backoff
                while len(self._next_check) > MAX_ADDRESSES:
                    self._next_check.pop(next(iter(self._next_check)))
            self._checking[address] = checking + 1
            return 0.0

    def failed(self, address: str) -> None:
        """The admitted attempt was wrong."""
        now = self._clock()
        with self._lock:
            self._release(address)
            recent = self._recent(address, now, keep=True)
            recent.append(now)
            backoff = self.backoff_after(len(recent))
            if backoff:
                self._next_check[address] = max(self._next_check.get(address, now), now + backoff)
            while len(self._failures) > MAX_ADDRESSES:
                old = next(iter(self._failures))
                self._failures.pop(old)
                self._next_check.pop(old, None)

    def passed(self, address: str) -> None:
        """The admitted attempt was right, or never checked (the client left)."""
        with self._lock:
            self._release(address)

    def _release(self, address: str) -> None:
        left = self._checking.get(address, 0) - 1
        if left > 0:
            self._checking[address] = left
        else:
            self._checking.pop(address, None)

    def failures(self, address: str) -> int:
        with self._lock:
            return len(self._recent(address, self._clock()))

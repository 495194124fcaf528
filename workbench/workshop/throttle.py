"""Per-address throttles for sign-ins, room codes and logins.

A room behind one NAT is one address, so nothing here locks an address out for
good: `RateLimit` lets a room's worth of sign-ins through at once and then a
steady trickle; `FailureDelay` leaves the first failures free, then checks an
address's attempts one at a time, spaced further apart after each failure (so a
guesser gets a few tries a minute), while the right answer is only ever made to
wait its turn, never refused because others failed.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable

__all__ = ["FailureDelay", "RateLimit"]

# Addresses remembered at most; the oldest are forgotten first (a flood of spoofed
# addresses cannot grow memory without bound).
MAX_ADDRESSES = 10_000


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


class FailureDelay:
    """Slows an address's attempts after `free` failures within `window_s`.

    `reserve(address)` says how long this attempt must wait before it is checked
    (0.0: at once), or None when the address already has `max_wait_s` of attempts
    queued (refuse it as busy without checking: no answer leaks). Past the free
    failures, attempts are spaced `base_s`, doubling with each further failure, up
    to `max_s`; attempts made while others wait, `max_s`. Each reserved attempt ends
    with `failed()` (counted) or `passed()`; a right one does not wipe the record (a
    guesser could otherwise reset it)."""

    def __init__(self, *, free: int, window_s: float, base_s: float, max_s: float, max_wait_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.free, self.window_s, self.base_s, self.max_s, self.max_wait_s = free, window_s, base_s, max_s, max_wait_s
        self._clock = clock
        self._failures: dict[str, deque[float]] = {}
        self._next_slot: dict[str, float] = {}
        self._pending: dict[str, int] = {}  # attempts reserved and not yet failed or passed
        self._lock = threading.Lock()

    def _recent(self, address: str, now: float, *, keep: bool = False) -> deque[float]:
        recent = self._failures.setdefault(address, deque()) if keep else self._failures.get(address, deque())
        while recent and now - recent[0] > self.window_s:
            recent.popleft()
        return recent

    def spacing(self, address: str) -> float:
        """Seconds between this address's checks now (0.0 while its failures are within the free ones)."""
        with self._lock:
            over = len(self._recent(address, self._clock())) - self.free
        return 0.0 if over < 0 else min(self.max_s, self.base_s * 2.0 ** over)

    def reserve(self, address: str) -> float | None:
        now = self._clock()
        spacing = self.spacing(address)
        with self._lock:
            pending = self._pending.get(address, 0)
            if spacing == 0.0:
                self._pending[address] = pending + 1
                return 0.0
            slot = max(now, self._next_slot.get(address, now))
            if slot - now > self.max_wait_s:
                return None
            # Attempts made while others from the address are still waiting are spaced the
            # most: a guesser sends many at once, before the failures ahead of them count.
            self._next_slot[address] = slot + (self.max_s if pending else spacing)
            self._pending[address] = pending + 1
            return slot - now

    def failed(self, address: str) -> None:
        """The reserved attempt was wrong."""
        now = self._clock()
        with self._lock:
            self._release(address)
            self._recent(address, now, keep=True).append(now)
            while len(self._failures) > MAX_ADDRESSES:
                old = next(iter(self._failures))
                self._failures.pop(old)
                self._next_slot.pop(old, None)

    def passed(self, address: str) -> None:
        """The reserved attempt was right, or never checked (the client left)."""
        with self._lock:
            self._release(address)

    def _release(self, address: str) -> None:
        left = self._pending.get(address, 0) - 1
        if left > 0:
            self._pending[address] = left
        else:
            self._pending.pop(address, None)

    def failures(self, address: str) -> int:
        with self._lock:
            return len(self._recent(address, self._clock()))

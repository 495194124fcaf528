"""The room: who is signed in, who has a turn running, each attendee's last
figures, the presenter's limits and broadcasts. Pure state, no I/O, no UI.

Every method takes the room's lock, so the presenter's (threaded) handlers and
the attendees' (async) handlers can call it at once. Times are `clock()`
seconds (time.time by default; tests pass their own clock).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from workbench.errors import RoomError

__all__ = ["DEFAULT_MAX_TOKENS", "Attendee", "Broadcast", "Room", "RoomLimits", "RoomSnapshot", "TurnTicket"]

DEFAULT_MAX_TOKENS = 1024
# A page that has not ticked for this long is shown as away (its tab is closed or hidden).
AWAY_AFTER_S = 20.0
# Broadcasts older than this are not picked up by a page that opens later.
BROADCAST_FRESH_S = 120.0
# Streamed redraws per second the whole room may cost the app: each attendee's
# redraw interval grows with the number of turns running so the total stays
# about this (one SSE message per redraw; see benchmarks/workshop_load.py).
ROOM_REDRAWS_PER_S = 250.0
MIN_REDRAW_S = 0.1
MAX_REDRAW_S = 0.5


@dataclass(frozen=True)
class RoomLimits:
    """What the presenter allows each attendee."""

    one_turn_at_a_time: bool = True
    max_tokens: int | None = DEFAULT_MAX_TOKENS  # cap on each request's max_tokens; None: no cap

    def __post_init__(self) -> None:
        if self.max_tokens is not None and self.max_tokens < 1:
            raise RoomError(f"The max_tokens cap must be at least 1, not {self.max_tokens}.",
                            hint="Set a positive cap, or leave it empty for no cap.")

    def cap(self, requested: int | None) -> int | None:
        """The max_tokens a request may use: the attendee's, never above the cap."""
        if self.max_tokens is None:
            return requested
        return self.max_tokens if requested is None else min(requested, self.max_tokens)


@dataclass
class Attendee:
    """One signed-in attendee, by name, and what their turns measured."""

    name: str
    signed_in_at: float
    last_seen_at: float
    turns_running: int = 0
    turn_started_at: float | None = None
    turns: int = 0
    last_ttft_s: float | None = None
    last_decode_tok_s: float | None = None
    last_tokens: int | None = None
    last_error: str | None = None
    saved_conversation: dict[str, Any] | None = field(default=None, repr=False)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("saved_conversation")
        return out


@dataclass(frozen=True)
class TurnTicket:
    """A turn the room let start; hand it back to `finish_turn`."""

    id: int
    name: str
    started_at: float
    max_tokens: int | None


@dataclass(frozen=True)
class Broadcast:
    """A prompt the presenter sent to every attendee's page."""

    id: int
    text: str
    sent_at: float


@dataclass(frozen=True)
class RoomSnapshot:
    """The room at one moment, for the presenter's view."""

    taken_at: float
    attendees: tuple[Attendee, ...]
    limits: RoomLimits
    turns_running: int
    turns_finished: int
    last_broadcast: Broadcast | None

    def present(self) -> list[Attendee]:
        return [a for a in self.attendees if self.taken_at - a.last_seen_at <= AWAY_AFTER_S or a.turns_running]


class Room:
    """The workshop room. Names are identities: the sign-in (workbench.workshop.signin)
    decides who may use a name; the room only keeps what each name did."""

    def __init__(self, limits: RoomLimits | None = None, *, clock: Callable[[], float] = time.time,
                 max_attendees: int = 500) -> None:
        self._limits = limits or RoomLimits()
        self._clock = clock
        self._max_attendees = max_attendees
        self._attendees: dict[str, Attendee] = {}
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._running: dict[int, TurnTicket] = {}
        self._turns_finished = 0
        self._broadcasts: list[Broadcast] = []

    # -- who is here
    def sign_in(self, name: str) -> Attendee:
        """Record `name` as signed in (again: a reload or a second device keeps its figures)."""
        now = self._clock()
        with self._lock:
            attendee = self._attendees.get(name)
            if attendee is None:
                if len(self._attendees) >= self._max_attendees:
                    raise RoomError(f"The room is full ({self._max_attendees} attendees).",
                                    hint="Ask the presenter to raise the limit.")
                attendee = self._attendees[name] = Attendee(name, now, now)
            attendee.last_seen_at = now
            return replace(attendee)

    def is_signed_in(self, name: str | None) -> bool:
        with self._lock:
            return name is not None and name in self._attendees

    def seen(self, name: str) -> None:
        """The attendee's page is open (its timer ticked)."""
        with self._lock:
            attendee = self._attendees.get(name)
            if attendee is not None:
                attendee.last_seen_at = self._clock()

    def remove(self, name: str) -> bool:
        """Forget an attendee; their sign-in no longer works (the sign-in checks is_signed_in)."""
        with self._lock:
            return self._attendees.pop(name, None) is not None

    # -- limits
    @property
    def limits(self) -> RoomLimits:
        with self._lock:
            return self._limits

    def set_limits(self, limits: RoomLimits) -> None:
        with self._lock:
            self._limits = limits

    # -- turns
    def begin_turn(self, name: str, requested_max_tokens: int | None = None) -> TurnTicket:
        """Let a turn start, or refuse with why (not signed in; a turn already running)."""
        now = self._clock()
        with self._lock:
            attendee = self._attendees.get(name)
            if attendee is None:
                raise RoomError("You are not signed in to this room.", hint="Open the page again and sign in.")
            if self._limits.one_turn_at_a_time and attendee.turns_running:
                raise RoomError("Your previous message is still being answered.",
                                hint="Wait for it to finish, or press Stop; the presenter allows one turn at a time.")
            ticket = TurnTicket(next(self._ids), name, now, self._limits.cap(requested_max_tokens))
            self._running[ticket.id] = ticket
            attendee.turns_running += 1
            attendee.turn_started_at = now
            attendee.last_seen_at = now
            return ticket

    def finish_turn(self, ticket: TurnTicket, *, ttft_s: float | None = None, decode_tok_s: float | None = None,
                    tokens: int | None = None, error: str | None = None) -> None:
        """The turn ended (answered, stopped or failed); keep its figures. Safe to call twice."""
        with self._lock:
            if self._running.pop(ticket.id, None) is None:
                return
            self._turns_finished += 1
            attendee = self._attendees.get(ticket.name)
            if attendee is None:
                return
            attendee.turns_running = max(0, attendee.turns_running - 1)
            if not attendee.turns_running:
                attendee.turn_started_at = None
            attendee.turns += 1
            attendee.last_error = error
            if error is None:
                attendee.last_ttft_s = ttft_s
                attendee.last_decode_tok_s = decode_tok_s
                attendee.last_tokens = tokens

    def turns_running(self) -> int:
        with self._lock:
            return len(self._running)

    def redraw_interval(self) -> float:
        """How often a streaming turn should redraw now: the room's redraw budget
        shared by the turns running, between MIN_REDRAW_S and MAX_REDRAW_S."""
        running = self.turns_running()
        return min(MAX_REDRAW_S, max(MIN_REDRAW_S, running / ROOM_REDRAWS_PER_S))

    # -- each attendee's conversation, kept so a reload shows it again
    def save_conversation(self, name: str, conversation: dict[str, Any]) -> None:
        with self._lock:
            attendee = self._attendees.get(name)
            if attendee is not None:
                attendee.saved_conversation = conversation

    def saved_conversation(self, name: str) -> dict[str, Any] | None:
        with self._lock:
            attendee = self._attendees.get(name)
            return None if attendee is None else attendee.saved_conversation

    # -- broadcasts
    def broadcast(self, text: str) -> Broadcast:
        text = (text or "").strip()
        if not text:
            raise RoomError("The prompt to send is empty.", hint="Type the prompt, then press Send to everyone.")
        with self._lock:
            sent = Broadcast(next(self._ids), text, self._clock())
            self._broadcasts = [*self._broadcasts[-9:], sent]
            return sent

    def pending_broadcast(self, after_id: int) -> Broadcast | None:
        """The newest fresh broadcast a page that has seen `after_id` has not run yet."""
        now = self._clock()
        with self._lock:
            latest = self._broadcasts[-1] if self._broadcasts else None
        if latest is None or latest.id <= after_id or now - latest.sent_at > BROADCAST_FRESH_S:
            return None
        return latest

    def latest_broadcast_id(self) -> int:
        with self._lock:
            return self._broadcasts[-1].id if self._broadcasts else 0

    # -- the presenter's view
    def snapshot(self) -> RoomSnapshot:
        with self._lock:
            return RoomSnapshot(
                taken_at=self._clock(),
                attendees=tuple(replace(a) for a in sorted(self._attendees.values(), key=lambda a: a.signed_in_at)),
                limits=self._limits,
                turns_running=len(self._running),
                turns_finished=self._turns_finished,
                last_broadcast=self._broadcasts[-1] if self._broadcasts else None,
            )

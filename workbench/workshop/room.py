"""The room: who is signed in, who has a turn running, each attendee's last
figures, the presenter's limits and broadcasts. Pure state, no I/O, no UI.

A sign-in is a random session id (the cookie carries it, not the name): the first
sign-in claims a name and others are refused it while it is held. A name is held
until its attendee leaves, is removed by the presenter, or has been idle
`RoomLimits.idle_expire_s`; then their stored conversation is released too.

Every method takes the room's lock, so the presenter's (threaded) handlers and
the attendees' (async) handlers can call it at once. Times are `clock()`
seconds (time.time by default; tests pass their own clock).
"""

from __future__ import annotations

import itertools
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from workbench.errors import RoomError
from workbench.workshop.signin import name_key
from workbench.workshop.throttle import RateLimit, retry_after

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
# New names per client address: a room's worth at once (a room behind one NAT is one
# address), then one every SIGNIN_EVERY_S. A flood of made-up names stops there.
SIGNIN_BURST = 64
SIGNIN_EVERY_S = 5.0


@dataclass(frozen=True)
class RoomLimits:
    """What the presenter allows each attendee (the Room tab changes them live)."""

    one_turn_at_a_time: bool = True
    max_tokens: int | None = DEFAULT_MAX_TOKENS  # cap on each request's max_tokens; None: no cap
    max_attendees: int = 200  # the room's size: names held at once
    # Turns running at once from one client address. A room behind one NAT is one
    # address, so the default lets 32 attendees send together (the room's capacity
    # target); lower it when attendees have their own addresses.
    turns_per_address: int = 32
    max_message_chars: int = 8_000  # one message
    max_history_chars: int = 48_000  # the conversation re-sent with each message (and kept per attendee)
    tools_allowed: bool = True  # attendees may turn on the workbench's tools
    idle_expire_s: float = 1800.0  # an attendee gone this long (no page open, no turn) is signed out

    def __post_init__(self) -> None:
        if self.max_tokens is not None and self.max_tokens < 1:
            raise RoomError(f"The max_tokens cap must be at least 1, not {self.max_tokens}.",
                            hint="Set a positive cap, or leave it empty for no cap.")
        for what, value, least in (("room size", self.max_attendees, 1), ("turns per address", self.turns_per_address, 1),
                                   ("message limit", self.max_message_chars, 1),
                                   ("history limit", self.max_history_chars, 1), ("idle time", self.idle_expire_s, 60)):
            if not value >= least:
                raise RoomError(f"The {what} must be at least {least}, not {value}.", hint=f"Set the {what} to {least} or more.")
        if self.max_history_chars < self.max_message_chars:
            raise RoomError("The history limit is below the message limit: no message would fit.",
                            hint="Set the history limit at least as high as the message limit.")

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
    address: str = ""
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
    address: str = ""


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
    banned: tuple[str, ...] = ()

    def present(self) -> list[Attendee]:
        return [a for a in self.attendees if self.taken_at - a.last_seen_at <= AWAY_AFTER_S or a.turns_running]


class Room:
    """The workshop room. Attendees are kept by name (compared by `name_key`); a
    session id (from `sign_in`) says which attendee a request is from."""

    def __init__(self, limits: RoomLimits | None = None, *, clock: Callable[[], float] = time.time,
                 signins: RateLimit | None = None) -> None:
        self._limits = limits or RoomLimits()
        self._clock = clock
        self._signins = signins or RateLimit(SIGNIN_BURST, 1.0 / SIGNIN_EVERY_S, clock=clock)
        self._attendees: dict[str, Attendee] = {}  # name_key -> attendee
        self._sessions: dict[str, str] = {}  # session id -> name_key
        self._banned: dict[str, str] = {}  # name_key -> the name as the presenter banned it
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._running: dict[int, TurnTicket] = {}
        self._turns_finished = 0
        self._broadcasts: list[Broadcast] = []

    # -- who is here
    def sign_in(self, name: str, address: str = "") -> str:
        """Claim `name` (already normalised by SignIn) for a new session; its id, or a
        RoomError (the name is held or banned, the room is full, too many new names
        from this address)."""
        key = name_key(name)
        now = self._clock()
        with self._lock:
            self._expire_idle(now)
            if key in self._banned:
                raise RoomError(f"The presenter has removed {name!r} from this room.",
                                hint="Ask the presenter if this is a mistake.")
            if key in self._attendees:
                raise RoomError(f"Someone in the room is already signed in as {self._attendees[key].name!r}.",
                                hint="Choose another name (add an initial). If it is you on another device or "
                                "after clearing cookies, ask the presenter to release the name.")
            if len(self._attendees) >= self._limits.max_attendees:
                raise RoomError(f"The room is full ({self._limits.max_attendees} attendees).",
                                hint="Ask the presenter to raise the room size.")
            wait = self._signins.take(address)
            if wait:
                raise RoomError("Too many new names signed in from your network just now.",
                                hint=f"Try again in {retry_after(wait)} s.", retry_after_s=wait)
            session = secrets.token_urlsafe(32)
            self._attendees[key] = Attendee(name, now, now, address=address)
            self._sessions[session] = key
            return session

    def name_for(self, session: str | None) -> str | None:
        """The name a session holds, or None (unknown, ended, removed, expired)."""
        if not session:
            return None
        with self._lock:
            key = self._sessions.get(session)
            attendee = self._attendees.get(key) if key is not None else None
            return None if attendee is None else attendee.name

    def is_signed_in(self, name: str | None) -> bool:
        with self._lock:
            return name is not None and name_key(name) in self._attendees

    def seen(self, name: str) -> None:
        """The attendee's page is open (its timer ticked)."""
        with self._lock:
            attendee = self._attendees.get(name_key(name))
            if attendee is not None:
                attendee.last_seen_at = self._clock()

    def leave(self, session: str | None) -> None:
        """The attendee signed out: the name is free again and their conversation released."""
        with self._lock:
            key = self._sessions.get(session or "")
            if key is not None:
                self._drop(key)

    def remove(self, name: str) -> str | None:
        """Sign an attendee out (the presenter's Remove, or Release a name someone lost):
        their session ends, the name is free, their conversation is released. The name
        as they held it, or None if nobody did."""
        with self._lock:
            return self._drop(name_key(name))

    def ban(self, name: str) -> None:
        """Remove an attendee and refuse their name (in any case or look-alike spelling)."""
        with self._lock:
            key = name_key(name)
            held = self._attendees.get(key)
            self._banned[key] = held.name if held else name
            self._drop(key)

    def unban(self, name: str) -> bool:
        with self._lock:
            return self._banned.pop(name_key(name), None) is not None

    def _drop(self, key: str) -> str | None:
        attendee = self._attendees.pop(key, None)
        if attendee is None:
            return None
        for session in [s for s, k in self._sessions.items() if k == key]:
            del self._sessions[session]
        return attendee.name

    def _expire_idle(self, now: float) -> None:
        idle = self._limits.idle_expire_s
        for key in [k for k, a in self._attendees.items() if not a.turns_running and now - a.last_seen_at > idle]:
            self._drop(key)

    def expire_idle(self) -> None:
        with self._lock:
            self._expire_idle(self._clock())

    # -- limits
    @property
    def limits(self) -> RoomLimits:
        with self._lock:
            return self._limits

    def set_limits(self, limits: RoomLimits) -> None:
        with self._lock:
            self._limits = limits

    # -- turns
    def begin_turn(self, name: str, requested_max_tokens: int | None = None, address: str = "") -> TurnTicket:
        """Let a turn start, or refuse with why (not signed in; a turn already running;
        too many turns from this address)."""
        now = self._clock()
        with self._lock:
            attendee = self._attendees.get(name_key(name))
            if attendee is None:
                raise RoomError("You are not signed in to this room.", hint="Open the page again and sign in.")
            if self._limits.one_turn_at_a_time and attendee.turns_running:
                raise RoomError("Your previous message is still being answered.",
                                hint="Wait for it to finish, or press Stop; the presenter allows one turn at a time.")
            from_here = sum(1 for t in self._running.values() if t.address == address)
            if from_here >= self._limits.turns_per_address:
                raise RoomError(f"{from_here} messages from your network are being answered already, the most the "
                                "presenter allows at once.", hint="Send again in a few seconds.")
            ticket = TurnTicket(next(self._ids), attendee.name, now, self._limits.cap(requested_max_tokens), address)
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
            attendee = self._attendees.get(name_key(ticket.name))
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
            attendee = self._attendees.get(name_key(name))
            if attendee is not None:
                attendee.saved_conversation = conversation

    def saved_conversation(self, name: str) -> dict[str, Any] | None:
        with self._lock:
            attendee = self._attendees.get(name_key(name))
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
            self._expire_idle(self._clock())
            return RoomSnapshot(
                taken_at=self._clock(),
                attendees=tuple(replace(a) for a in sorted(self._attendees.values(), key=lambda a: a.signed_in_at)),
                limits=self._limits,
                turns_running=len(self._running),
                turns_finished=self._turns_finished,
                last_broadcast=self._broadcasts[-1] if self._broadcasts else None,
                banned=tuple(sorted(self._banned.values())),
            )

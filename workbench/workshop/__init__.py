"""Workshop mode: a room of attendees chatting with one server, and a presenter in control.

    room.py      who is signed in, turns running, each attendee's last figures, limits, broadcasts
    signin.py    names, the room code, signed sign-in tokens
    turns.py     each attendee's conversation, run within the room's limits (async, paced)
    settings.py  where the workshop listens, its secrets, what it refuses to expose

The views are workbench/ui/attendee_app.py, room_tab.py and workshop_server.py;
`python -m workbench workshop` serves them. No UI import here.
"""

from workbench.workshop.room import DEFAULT_MAX_TOKENS, Attendee, Broadcast, Room, RoomLimits, RoomSnapshot, TurnTicket
from workbench.workshop.settings import WorkshopSettings, settings_from
from workbench.workshop.signin import COOKIE_NAME, SignIn, normalize_name
from workbench.workshop.turns import AttendeeChat, AttendeeOptions, RoomChat

__all__ = [
    "COOKIE_NAME",
    "DEFAULT_MAX_TOKENS",
    "Attendee",
    "AttendeeChat",
    "AttendeeOptions",
    "Broadcast",
    "Room",
    "RoomChat",
    "RoomLimits",
    "RoomSnapshot",
    "SignIn",
    "TurnTicket",
    "WorkshopSettings",
    "normalize_name",
    "settings_from",
]

"""The Room tab's controls over who is in the room and what each attendee may send:
remove, ban or release a name; the room's size and per-attendee limits, live.
(Its own module, called from room_tab.create_ui, so other panels merge apart.)"""

from __future__ import annotations

import html
from dataclasses import dataclass, replace
from typing import Any

import gradio as gr

from workbench.errors import RoomError, WorkbenchError
from workbench.workshop import Room, RoomLimits, normalize_name

__all__ = ["RoomAdmin", "apply_room_limits", "create_admin_ui", "manage_attendee"]


@dataclass
class RoomAdmin:
    name: gr.Textbox
    remove: gr.Button
    ban: gr.Button
    release: gr.Button
    said: gr.Markdown
    room_size: gr.Number
    turns_per_address: gr.Number
    message_chars: gr.Number
    history_chars: gr.Number
    idle_minutes: gr.Number
    tools: gr.Checkbox
    apply: gr.Button


def _error(exc: WorkbenchError) -> gr.Error:
    return gr.Error(html.escape(f"{exc.message} {exc.hint or ''}"), print_exception=False)


def manage_attendee(room: Room, action: str, name: str | None) -> str:
    """remove / ban / release one name; what happened, in words."""
    cleaned = normalize_name(name)
    if action == "remove":
        held = room.remove(cleaned)
        return f"Signed {held} out; the name is free." if held else f"Nobody is signed in as {cleaned}."
    if action == "ban":
        room.ban(cleaned)
        return f"Removed {cleaned}; the name is refused until you release it."
    if action == "release":
        unbanned, removed = room.unban(cleaned), room.remove(cleaned)
        if not (unbanned or removed):
            return f"{cleaned} was neither banned nor held."
        return f"Released {cleaned}: whoever signs in with it next gets it."
    raise RoomError(f"Unknown action {action!r}.", hint="Use Remove, Ban or Release.")


def _whole(value: Any, what: str) -> int:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise RoomError(f"The {what} must be a number.", hint=f"Type the {what}.") from None
    if number != number or number in (float("inf"), float("-inf")):
        raise RoomError(f"The {what} must be a number.", hint=f"Type the {what}.")
    return int(number)


def apply_room_limits(room: Room, room_size: Any, turns_per_address: Any, message_chars: Any,
                      history_chars: Any, idle_minutes: Any, tools: Any) -> RoomLimits:
    """The room's limits with these values (the others kept); a RoomError says which value to change."""
    limits = replace(room.limits, max_attendees=_whole(room_size, "room size"),
                     turns_per_address=_whole(turns_per_address, "turns per address"),
                     max_message_chars=_whole(message_chars, "message limit"),
                     max_history_chars=_whole(history_chars, "history limit"),
                     idle_expire_s=60.0 * _whole(idle_minutes, "idle time"), tools_allowed=bool(tools))
    room.set_limits(limits)
    return limits


def create_admin_ui(room: Room) -> RoomAdmin:
    limits = room.limits
    with gr.Accordion("Attendees and room limits", open=False):
        with gr.Row():
            with gr.Column():
                gr.Markdown("**An attendee** (by name): *Remove* signs them out and frees the name; *Ban* also "
                            "refuses the name; *Release* frees a name (held or banned) for whoever signs in next.")
                name = gr.Textbox(label="Name", elem_id="room-admin-name", max_lines=1)
                with gr.Row():
                    remove = gr.Button("Remove", elem_id="room-admin-remove")
                    ban = gr.Button("Ban", variant="stop", elem_id="room-admin-ban")
                    release = gr.Button("Release", elem_id="room-admin-release")
                said = gr.Markdown(elem_id="room-admin-said")
            with gr.Column():
                room_size = gr.Number(limits.max_attendees, precision=0, label="Room size (names held at once)")
                turns = gr.Number(limits.turns_per_address, precision=0,
                                  label="Turns at once per address (behind one NAT the room is one address)")
                message_chars = gr.Number(limits.max_message_chars, precision=0, label="Message limit (characters)")
                history_chars = gr.Number(limits.max_history_chars, precision=0,
                                          label="Conversation limit (characters)")
                idle = gr.Number(limits.idle_expire_s / 60, precision=0, label="Sign out after idle (minutes)")
                tools = gr.Checkbox(limits.tools_allowed, label="Attendees may use tools")
                apply = gr.Button("Apply room limits", elem_id="room-admin-apply")
    admin = RoomAdmin(name, remove, ban, release, said, room_size, turns, message_chars, history_chars, idle,
                      tools, apply)

    def act(action: str):
        def handler(who: str | None) -> str:
            try:
                return html.escape(manage_attendee(room, action, who))
            except WorkbenchError as exc:
                raise _error(exc) from exc
        return handler

    def apply_limits(*values: Any) -> str:
        try:
            applied = apply_room_limits(room, *values)
        except WorkbenchError as exc:
            raise _error(exc) from exc
        return (f"Applied: room of {applied.max_attendees}, {applied.turns_per_address} turns per address, "
                f"messages ≤ {applied.max_message_chars:,} chars, conversations ≤ {applied.max_history_chars:,}, "
                f"tools {'on' if applied.tools_allowed else 'off'}.")

    for button, action in ((remove, "remove"), (ban, "ban"), (release, "release")):
        button.click(act(action), name, said)
    apply.click(apply_limits, [room_size, turns, message_chars, history_chars, idle, tools], said)
    return admin

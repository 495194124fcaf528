"""The presenter's Room tab: who is signed in and what their turns measure, the
server's aggregate figures, the room's limits, "send this prompt to everyone",
and the day-of checks. It lives only in the presenter app, behind its login."""

from __future__ import annotations

import html
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import gradio as gr

from workbench.errors import WorkbenchError
from workbench.metrics import ThroughputFigures
from workbench.metrics.display import NO_DATA, PER_ENGINE_LABEL, format_per_engine, format_seconds
from workbench.server.checks import EnvironmentCheck
from workbench.workshop.day_of import day_of_checks, warm_up_check
from workbench.telemetry import format_gpu_strip, shared_gpu_poller
from workbench.ui import room_admin
from workbench.workshop import Room, RoomSnapshot
from workbench.workshop.room import AWAY_AFTER_S

__all__ = ["ATTENDEE_HEADERS", "RoomTab", "attendee_rows", "create_ui", "server_figure_rows", "summary_markdown"]

TICK_S = 1.0
ATTENDEE_HEADERS = ["name", "now", "turns", "last TTFT", "last decode tok/s", "last tokens", "signed in"]
# Aggregate figures from the server's /metrics, summed over its engines, in this order.
SERVER_FIGURES = {"decode_tps": "decode", "prefill_tps": "prefill", "running": "running",
                  "waiting": "waiting", "kv_cache_pct": "KV cache"}


@dataclass
class RoomTab:
    summary: gr.Markdown
    server: gr.Markdown
    attendees: gr.Dataframe
    one_turn: gr.Checkbox
    max_tokens: gr.Number
    apply_limits: gr.Button
    prompt: gr.Textbox
    send_all: gr.Button
    sent: gr.Markdown
    run_checks: gr.Button
    warm_up: gr.Button
    checks: gr.Dataframe
    timer: gr.Timer
    admin: room_admin.RoomAdmin | None = None


def server_figure_rows(figures: ThroughputFigures | None) -> list[tuple[str, str]]:
    """(label, value) of the server's figures, with decode tok/s per engine when it serves several."""
    if figures is None:
        return []
    rows = [(label, figures.display(name)) for name, label in SERVER_FIGURES.items()]
    per_engine = format_per_engine(figures.decode_tps_by_engine)
    if per_engine:
        rows.append((PER_ENGINE_LABEL, per_engine))
    return rows


def summary_markdown(snapshot: RoomSnapshot) -> str:
    here = snapshot.present()
    limits = snapshot.limits
    rules = ["one turn at a time" if limits.one_turn_at_a_time else "several turns at once",
             f"max_tokens ≤ {limits.max_tokens}" if limits.max_tokens else "no max_tokens cap"]
    rules.append(f"room of {limits.max_attendees}")
    if not limits.tools_allowed:
        rules.append("tools off")
    banned = f" · banned: {', '.join(html.escape(n) for n in snapshot.banned)}" if snapshot.banned else ""
    return (f"**Room** · **{len(snapshot.attendees)}** signed in · {len(here)} here · "
            f"**{snapshot.turns_running}** turns running · {snapshot.turns_finished} finished · "
            f"limits: {', '.join(rules)}{banned}")


def server_markdown(figures: ThroughputFigures | None, error: str | None) -> str:
    rows = server_figure_rows(figures)
    if not rows:
        return f"*Server: {html.escape(error or 'no figures yet')}.*"
    return "**Server now** (its /metrics) · " + " · ".join(f"{label} **{value}**" for label, value in rows)


def attendee_rows(snapshot: RoomSnapshot) -> list[list[Any]]:
    rows = []
    for a in snapshot.attendees:
        if a.turns_running:
            since = snapshot.taken_at - (a.turn_started_at or snapshot.taken_at)
            now = f"answering ({since:.0f} s)"
        elif snapshot.taken_at - a.last_seen_at > AWAY_AFTER_S:
            now = "away"
        else:
            now = "here"
        if a.last_error:
            now += f" · last turn: {a.last_error[:60]}"
        rate = NO_DATA if a.last_decode_tok_s is None else f"{a.last_decode_tok_s:.1f}"
        rows.append([a.name, now, a.turns, format_seconds(a.last_ttft_s), rate,
                     NO_DATA if a.last_tokens is None else a.last_tokens,
                     f"{(snapshot.taken_at - a.signed_in_at) / 60:.0f} min ago"])
    return rows


def check_rows(checks: list[EnvironmentCheck]) -> list[list[str]]:
    said = {"ok": "ok", "warning": "⚠ check", "missing": "MISSING"}
    return [[f"{c.name}: {said[c.status]}", c.found, c.fix] for c in checks]


def create_ui(room: Room, figures: Callable[[], ThroughputFigures | None], figures_error: Callable[[], str | None],
              plan: gr.State, ready_server: Callable[[], tuple[str | None, str]]) -> RoomTab:
    """`figures()` the server's latest figures (the shared poller), `ready_server()` (URL, model) or (None, why)."""
    limits = room.limits
    summary = gr.Markdown(summary_markdown(room.snapshot()), elem_id="room-summary")
    server = gr.Markdown(server_markdown(None, None), elem_id="room-server")
    attendees = gr.Dataframe(headers=ATTENDEE_HEADERS, label="Attendees", interactive=False, wrap=True,
                             elem_id="room-attendees")
    with gr.Row():
        with gr.Column():
            gr.Markdown("**Limits for every attendee**")
            one_turn = gr.Checkbox(limits.one_turn_at_a_time, label="One turn at a time")
            max_tokens = gr.Number(limits.max_tokens, precision=0, label="max_tokens cap (empty: none)")
            apply_limits = gr.Button("Apply limits", elem_id="room-apply-limits")
        with gr.Column():
            gr.Markdown("**Send this prompt to everyone** (each open attendee page runs it in its own chat)")
            prompt = gr.Textbox(show_label=False, lines=2, elem_id="room-prompt",
                                placeholder="e.g. Explain speculative decoding in three sentences.")
            send_all = gr.Button("Send to everyone", variant="primary", elem_id="room-send-all")
            sent = gr.Markdown(elem_id="room-sent")
    with gr.Accordion("Day-of checks (run them before the room arrives)", open=False):
        with gr.Row():
            run_checks = gr.Button("Run the checks for the Recipe tab's plan", elem_id="room-run-checks")
            warm_up = gr.Button("Send a warm-up request", elem_id="room-warm-up")
        checks = gr.Dataframe(headers=["check", "found", "what to do"], interactive=False, wrap=True,
                              elem_id="room-checks")
    admin = room_admin.create_admin_ui(room)
    timer = gr.Timer(TICK_S, active=False)
    tab = RoomTab(summary, server, attendees, one_turn, max_tokens, apply_limits, prompt, send_all, sent,
                  run_checks, warm_up, checks, timer, admin)

    def refresh():
        snapshot = room.snapshot()
        gpus = html.escape(format_gpu_strip(shared_gpu_poller().tick()))  # the GPU beside the server
        return (summary_markdown(snapshot), server_markdown(figures(), figures_error()) + "\n\n" + gpus,
                attendee_rows(snapshot))

    def apply(one: bool, cap: float | None):
        try:
            room.set_limits(replace(room.limits, one_turn_at_a_time=bool(one), max_tokens=int(cap) if cap else None))
        except WorkbenchError as exc:
            raise gr.Error(html.escape(f"{exc.message} {exc.hint or ''}"), print_exception=False) from exc
        return refresh()[0]

    def send_to_everyone(text: str):
        try:
            room.broadcast(text)
        except WorkbenchError as exc:
            raise gr.Error(html.escape(f"{exc.message} {exc.hint or ''}"), print_exception=False) from exc
        here = len(room.snapshot().present())
        return f"Sent to the {here} open attendee page(s); each picks it up within a few seconds.", ""

    def checks_for_plan(plan_dict: dict | None):
        if not plan_dict:
            raise gr.Error("Render a plan in the Recipe tab first.", print_exception=False)
        return check_rows(day_of_checks(plan_dict))

    def warm():
        url, model = ready_server()
        if url is None:
            raise gr.Error(html.escape(model), print_exception=False)
        return check_rows([warm_up_check(url, model)])

    timer.tick(refresh, None, [summary, server, attendees], show_progress="hidden")
    apply_limits.click(apply, [one_turn, max_tokens], summary)
    send_all.click(send_to_everyone, prompt, [sent, prompt])
    run_checks.click(checks_for_plan, plan, checks)
    warm_up.click(warm, None, checks)
    return tab

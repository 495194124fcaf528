"""One port, two apps: `/presenter` (the whole workbench plus the Room tab, behind
the presenter's login) and `/` (the attendee app, behind the room's sign-in).

    /join, /leave, /healthz     plain FastAPI routes (registered before the mounts)
    /presenter                  the presenter's Blocks, Gradio's own login (auth=), throttled
    /                           the attendees' Blocks, auth_dependency = the session cookie

Around them (workbench.ui.guards): the Host check (loopback binds answer only their
own names), the login throttle, and the attendee guard (no uploads, bounded bodies).

Starlette matches in order and a mount at "/" matches everything, so the routes
and /presenter come first. The queue is tuned here (see `tune_queue`); what each
setting costs or saves was measured with benchmarks/workshop_load.py.
"""

from __future__ import annotations

import os

# Before Gradio is imported: no telemetry threads, and the queue's per-event
# analytics summary (a pandas groupby over up to 10,000 events) run rarely.
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("GRADIO_ANALYTICS_CACHE_FREQUENCY", "1000")
os.environ.setdefault("GRADIO_ANALYTICS_MAX_EVENTS", "500")

import html  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import gradio as gr  # noqa: E402
import uvicorn  # noqa: E402
from fastapi import FastAPI, Form, Request  # noqa: E402
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response  # noqa: E402

from workbench.chat.tools import builtin_tools  # noqa: E402
from workbench.errors import RoomError  # noqa: E402
from workbench.recipes import load_catalog, recipe_for_hardware  # noqa: E402
from workbench.server.hardware import detect  # noqa: E402
from workbench.ui import attendee_app, room_mcp, room_tab  # noqa: E402
from workbench.ui.guards import AttendeeGuard, HostCheck, LoginThrottle, allowed_hosts  # noqa: E402
from workbench.ui.app import VISIBILITY_JS, AppParts, WorkbenchApp, build_app  # noqa: E402
from workbench.workshop import COOKIE_NAME, Room, RoomChat, RoomLimits, SignIn, WorkshopSettings  # noqa: E402
from workbench.workshop.room_tools import RoomTools  # noqa: E402
from workbench.workshop.throttle import retry_after  # noqa: E402

__all__ = ["WorkshopApp", "build_workshop", "serve_workshop", "server_config", "tune_queue"]

# Most events that may run at once in the attendee app (Gradio's default is 40
# per Blocks, a hidden cap: a 41st chat waits in the queue for a free slot).
MAX_RUNNING_EVENTS = 512
MAX_QUEUED = 1024
# Files the presenter's views may take (none takes more than a saved chat or plan).
PRESENTER_MAX_FILE = "20mb"
# Gradio's queue polls every 1 ms when idle (~4 % of a core per app); 20 ms costs
# at most 20 ms before a new event starts and brings idle CPU to ~0.4 %.
QUEUE_IDLE_POLL_S = 0.02
PROGRESS_IDLE_POLL_S = 0.1


def tune_queue(blocks: gr.Blocks, *, max_running: int, max_size: int | None = None) -> None:
    """queue() with the settings a room needs (call before mounting)."""
    blocks.max_threads = max_running  # read by queue(): the running-events cap and the thread limiter
    # A number, not "auto": "auto" sends every waiting client new estimates each time an event
    # starts or ends (N² messages when a room sends at once).
    blocks.queue(default_concurrency_limit=None, max_size=max_size, api_open=False, status_update_rate=10)
    queue = blocks._queue
    # Private attributes of Gradio 6's Queue (pinned <7 in pyproject); skipped if they move.
    if hasattr(queue, "sleep_when_free"):
        queue.sleep_when_free = QUEUE_IDLE_POLL_S
    if hasattr(queue, "progress_update_sleep_when_free"):
        queue.progress_update_sleep_when_free = PROGRESS_IDLE_POLL_S


@dataclass
class WorkshopApp:
    """The FastAPI app to serve, and what it is made of (for tests and the CLI)."""

    app: FastAPI
    room: Room
    signin: SignIn
    presenter: WorkbenchApp
    attendee: gr.Blocks
    room_chat: RoomChat


_JOIN_PAGE = """<!doctype html><html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1"><title>Join the workshop</title>
<style>body{{font-family:system-ui,sans-serif;max-width:26rem;margin:4rem auto;padding:0 1rem}}
label{{display:block;margin-top:1rem}}input{{width:100%;padding:.5rem;font-size:1rem;box-sizing:border-box}}
button{{margin-top:1.5rem;padding:.6rem 1.2rem;font-size:1rem}}.error{{color:#b00020}}</style></head>
<body><h1>Nemotron workshop</h1><p>Sign in to chat with the model the presenter is serving.</p>
{error}<form method="post" action="/join">
<label>Your name <input name="name" id="join-name" maxlength="40" autocomplete="name" required autofocus
 value="{name}"></label>{code_field}
<button type="submit" id="join-submit">Join</button></form></body></html>"""
_CODE_FIELD = ('<label>Room code <input name="code" id="join-code" type="password" autocomplete="off" '
               'required></label>')


def join_page(signin: SignIn, error: str = "", name: str = "") -> str:
    return _JOIN_PAGE.format(
        error=f'<p class="error" id="join-error">{html.escape(error)}</p>' if error else "",
        name=html.escape(name, quote=True), code_field=_CODE_FIELD if signin.code_required else "")


class JoinRedirect:
    """ASGI middleware: a browser opening `/` without a valid sign-in goes to /join.
    (Pure ASGI, not BaseHTTPMiddleware, so the SSE streams pass through untouched.)"""

    def __init__(self, app: Any, signed_in: Any) -> None:
        self.app = app
        self.signed_in = signed_in

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "GET" and scope["path"] == "/":
            if self.signed_in(Request(scope)) is None:
                await RedirectResponse("/join", status_code=303)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _warm_imports() -> None:
    """Import now what the first attendee's turn would import (openai's client and its
    lazily loaded chat resources, the tool schemas): about 0.4 s measured, paid by the
    whole room at once when everyone sends their first message together."""
    import openai  # the point: loaded now, not by the room's first turn

    openai.AsyncOpenAI(api_key="warm-up", base_url="http://127.0.0.1:9/v1").chat.completions  # noqa: B018
    builtin_tools().schemas()


def build_workshop(settings: WorkshopSettings, *, state_dir: str | Path | None = None,
                   limits: RoomLimits | None = None, default_hardware: str | None = None,
                   chat_request_hook: Any = None) -> WorkshopApp:
    room = Room(limits)
    signin = SignIn(settings.room_code)
    room_tools = RoomTools()  # the MCP servers the presenter shares; attendees add none

    def room_builder(parts: AppParts) -> gr.Timer:
        poller = parts.poller
        tab = room_tab.create_ui(room, poller.tick, lambda: poller.error, parts.plan, parts.slot.ready_server)
        room_mcp.create_ui(room_tools)
        return tab.timer

    presenter = build_app(state_dir=state_dir, default_hardware=default_hardware,
                          chat_request_hook=chat_request_hook, extra_tab=("Room", room_builder))
    catalog = load_catalog()
    recipe = recipe_for_hardware(catalog, default_hardware or detect())[0]
    room_chat = RoomChat(room, presenter.slot.ready_server, sampling=recipe.workbench.get("chat_defaults"),
                         request_hook=chat_request_hook, room_tools=room_tools)
    attendee = attendee_app.build_attendee_blocks(room, room_chat, presenter.poller.tick)
    _warm_imports()
    tune_queue(attendee, max_running=MAX_RUNNING_EVENTS, max_size=MAX_QUEUED)
    tune_queue(presenter.blocks, max_running=64)

    def attendee_name(request: Request) -> str | None:
        return room.name_for(request.cookies.get(COOKIE_NAME))

    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)

    @app.get("/healthz")
    def healthz() -> JSONResponse:
        return JSONResponse({"ok": True, "attendees": len(room.snapshot().attendees)})

    @app.get("/join")
    def join_form(request: Request) -> Response:
        if attendee_name(request) is not None:
            return RedirectResponse("/", status_code=303)
        return HTMLResponse(join_page(signin))

    @app.post("/join")
    async def join(request: Request, name: str = Form(""), code: str = Form("")) -> Response:
        address = request.client.host if request.client else ""
        try:
            # Answered at once: a code that comes too soon after wrong ones is refused unchecked.
            session = room.sign_in(signin.check(name, code, address), address)
        except RoomError as exc:
            page = join_page(signin, f"{exc.message} {exc.hint or ''}", name)
            if exc.retry_after_s is None:
                return HTMLResponse(page, status_code=400)
            return HTMLResponse(page, status_code=429, headers={"Retry-After": str(retry_after(exc.retry_after_s))})
        response = RedirectResponse("/", status_code=303)
        response.set_cookie(COOKIE_NAME, session, httponly=True, samesite="lax", path="/")
        return response

    @app.get("/leave")
    def leave(request: Request) -> Response:
        room.leave(request.cookies.get(COOKIE_NAME))  # the name is free again, the conversation released
        response = RedirectResponse("/join", status_code=303)
        response.delete_cookie(COOKIE_NAME, path="/")
        return response

    app = gr.mount_gradio_app(app, presenter.blocks, path="/presenter", auth=settings.presenter_auth,
                              auth_message="The presenter's login (--presenter-auth).", show_error=False,
                              js=VISIBILITY_JS, max_file_size=PRESENTER_MAX_FILE,
                              allowed_paths=list(presenter.allowed_paths))
    app = gr.mount_gradio_app(app, attendee, path="/", auth_dependency=attendee_name, show_error=False,
                              max_file_size=0)
    app.add_middleware(JoinRedirect, signed_in=attendee_name)
    app.add_middleware(AttendeeGuard, exempt="/presenter")
    app.add_middleware(LoginThrottle)
    app.add_middleware(HostCheck, hosts=allowed_hosts(settings.host))  # outermost: checked first
    return WorkshopApp(app, room, signin, presenter, attendee, room_chat)


def server_config(workshop: WorkshopApp, settings: WorkshopSettings, **overrides: Any) -> Any:
    """uvicorn's Config: X-Forwarded-For is read only from the presenter's --trusted-proxy
    (uvicorn would otherwise trust it from 127.0.0.1, and a same-host user could rotate it)."""
    proxy = settings.trusted_proxy
    options: dict[str, Any] = {"host": settings.host, "port": settings.port, "log_level": "warning",
                               "timeout_graceful_shutdown": 3, "proxy_headers": proxy is not None,
                               "forwarded_allow_ips": proxy or "", **overrides}
    return uvicorn.Config(workshop.app, **options)


def serve_workshop(workshop: WorkshopApp, settings: WorkshopSettings) -> None:
    """Serve until Ctrl-C or SIGTERM (uvicorn stops the queues; atexit stops a launched server)."""
    # One process: the queue, the room and the sessions live in memory.
    uvicorn.Server(server_config(workshop, settings)).run()

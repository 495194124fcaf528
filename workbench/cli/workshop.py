"""`python -m workbench workshop`: a room of attendees on one server, a presenter in control.

Attendees open http://HOST:PORT/ (name + room code); the presenter opens
/presenter (the whole workbench plus the Room tab). `--check` runs the day-of
checks and exits; `--download` fetches the plan's weights into the HF cache.
"""

from __future__ import annotations

import argparse
import sys
import threading
from typing import Any

from workbench import server
from workbench.cli.checks import DeprecatedSpelling, at_least, port_number, refuse_with_attach
from workbench.cli.hints import flag_for
from workbench.cli.render import add_selection_arguments, selection_from_args
from workbench.recipes import load_catalog, render
from workbench.server.readiness import NotReady, ReadyOutcome
from workbench.server.signals import exit_on_signals
from workbench.workshop import RoomLimits, settings_from
from workbench.workshop.settings import PRESENTER_AUTH_ENV, ROOM_CODE_ENV

__all__ = ["print_checks", "register", "workshop_command"]

_SELECTION = ("recipe", "hardware", "variant", "strategy", "preset", "spec", "features")


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "workshop", help="serve a room: attendees chat at /, the presenter drives /presenter",
        description="Serve the attendee app on / and the presenter app on /presenter, on one port. "
        "Give --attach URL, or selection flags (--hardware ...) to launch vLLM at start.")
    p.add_argument("--room-code", help=f"the code attendees type to sign in (or env {ROOM_CODE_ENV}; "
                   "prefer the variable: a flag shows in `ps`)")
    p.add_argument("--presenter-auth", metavar="USER:PASSWORD",
                   help=f"the presenter's login for /presenter (or env {PRESENTER_AUTH_ENV})")
    p.add_argument("--host", default="127.0.0.1",
                   help="interface to bind (default 127.0.0.1; another needs the room code and the presenter login)")
    p.add_argument("--port", type=port_number, default=7860, help="the workshop's own port (default 7860); "
                   "the vLLM server's is --server-port")
    p.add_argument("--app-port", type=port_number, dest="port", action=DeprecatedSpelling, new="--port",
                   help=argparse.SUPPRESS)
    p.add_argument("--attach", metavar="URL", help="chat with a server started elsewhere")
    p.add_argument("--api-key", help="API key of the attached server")
    p.add_argument("--max-tokens", type=at_least(1), default=1024, help="each attendee request's max_tokens cap")
    p.add_argument("--room-size", type=at_least(1), default=200, help="names held at once (default 200; the Room tab "
                   "changes it live)")
    p.add_argument("--turns-per-address", type=at_least(1), default=32,
                   help="turns running at once from one client address (default 32: a room behind one NAT is one "
                   "address; lower it when attendees have their own)")
    p.add_argument("--trusted-proxy", metavar="ADDRESS",
                   help="a reverse proxy in front of the app: its X-Forwarded-For is believed (otherwise ignored)")
    p.add_argument("--state-dir", help="where server state and logs are kept")
    p.add_argument("--check", action="store_true", help="run the day-of checks for the plan and exit")
    p.add_argument("--download", action="store_true", help="download the plan's weights into the HF cache and exit")
    add_selection_arguments(p, port=None)
    p.set_defaults(func=workshop_command)


def _plan(args: argparse.Namespace) -> Any:
    return render(selection_from_args(args), load_catalog())


def print_checks(checks: list[Any]) -> int:
    icon = {"ok": "ok     ", "warning": "warning", "missing": "MISSING"}
    for check in checks:
        print(f"[{icon[check.status]}] {check.name}: {check.found}")
        if check.fix:
            print(f"          what to do: {check.fix}")
        flags = [flag for flag in (flag_for(s, "workshop") for s in check.settings) if flag]
        if flags:
            print(f"          on the command line: {' '.join(flags)} (with the same recipe flags)")
    return 1 if any(c.status == "missing" for c in checks) else 0


def workshop_command(args: argparse.Namespace) -> int:
    refuse_with_attach(args, {"server_port": "--server-port"})
    settings = settings_from(args.host, args.port, args.room_code, args.presenter_auth,
                             trusted_proxy=args.trusted_proxy)
    if args.check or args.download:
        # Loaded by these checks only: huggingface_hub (0.25 s) and the agents' verifier.
        from workbench.agents.checks import agent_endpoint_checks
        from workbench.server.hub import download_weights
        from workbench.workshop.day_of import day_of_checks, warm_up_check

        plan = _plan(args)
        if args.download:
            download_weights(plan.model_id, progress=print)
            return 0
        checks = day_of_checks(plan)
        running = server.find_running(args.state_dir)
        url, model = (args.attach, None) if args.attach else (running.base_url, running.model) if running else (None, None)
        if url:
            handle = server.attach(url, api_key=args.api_key, state_dir=args.state_dir)
            checks.append(warm_up_check(handle.base_url, model or handle.model, api_key=args.api_key))
            checks += agent_endpoint_checks(handle.base_url, model or handle.model, plan_argv=plan.argv,
                                            api_key=args.api_key)
        return print_checks(checks)

    # Gradio (5 s to load) and huggingface_hub with the Room tab's checks: for the room only.
    from workbench.ui.workshop_server import build_workshop, serve_workshop
    from workbench.workshop.day_of import warm_up_check

    exit_on_signals()  # SIGTERM/SIGHUP end as Ctrl-C does: the server launched below is stopped

    hardware = args.hardware or (None if args.recipe or args.preset else None)
    limits = RoomLimits(True, args.max_tokens, max_attendees=args.room_size, turns_per_address=args.turns_per_address)
    workshop = build_workshop(settings, state_dir=args.state_dir, limits=limits, default_hardware=hardware)
    slot = workshop.presenter.slot
    if args.attach:
        slot.handle = server.attach(args.attach, api_key=args.api_key, state_dir=args.state_dir)
        print(f"Attached to {slot.handle.base_url} (model {slot.handle.model}).", flush=True)
    elif any(getattr(args, name) for name in _SELECTION):
        plan = _plan(args)
        slot.handle = server.launch(plan, host=server.DEFAULT_HOST, state_dir=args.state_dir,
                                    progress=slot.build_messages.append)
        print(f"Launching {plan.model_id} (log {slot.handle.log_path}); the presenter's Server tab shows its phases.",
              flush=True)

        def warm_when_ready() -> None:
            handle = slot.handle
            if handle is None:  # stopped from the Room tab before it was ready
                return
            try:  # until ready, or the presenter stops it (or launches another) from the Server tab
                handle.wait_ready(stop=lambda: slot.handle is not handle)
            except NotReady as exc:  # the Server tab shows the diagnosis
                if exc.outcome is not ReadyOutcome.STOPPED:
                    print(f"The server did not come up: {exc}", file=sys.stderr, flush=True)
                return
            check = warm_up_check(handle.base_url, handle.model)
            print(f"Ready in {handle.time_to_ready_s:.1f} s. Warm-up: {check.found or check.fix}", flush=True)

        threading.Thread(target=warm_when_ready, name="warm-up", daemon=True).start()
    print(f"Attendees open {settings.attendee_url()}  ·  presenter: {settings.presenter_url()}", flush=True)
    serve_workshop(workshop, settings)
    return 0

"""`python -m workbench [ui] [--host H] [--port P] [--auth user:pass]`: the web UI."""

from __future__ import annotations

import argparse

from workbench.cli.checks import port_number
from workbench.errors import WorkbenchError
from workbench.server.ports import check_listen_address
from workbench.server.signals import exit_on_signals


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("ui", help="open the web UI (the default command)")
    p.add_argument("--host", default="127.0.0.1",
                   help="interface to bind (default 127.0.0.1; another needs --auth)")
    p.add_argument("--port", type=port_number, default=7860)
    p.add_argument("--auth", help="user:password required to open the UI (or env WORKBENCH_AUTH)")
    p.add_argument("--share", action="store_true", help="a public Gradio share link (needs --auth)")
    p.add_argument("--state-dir", help="where server state and logs are kept")
    p.add_argument("--open", action="store_true", help="open a browser tab")
    p.set_defaults(func=ui_command)


def ui_command(args: argparse.Namespace) -> int:
    from workbench.ui.app import auth_from, serve_app  # Gradio: 5 s to load, for this command only

    auth = auth_from(args.auth)
    check_listen_address(args.host, args.port, "The app's port", setting="app_port")
    exposed = args.share or args.host not in ("127.0.0.1", "localhost", "::1")
    if exposed and auth is None:
        raise WorkbenchError(
            f"Refusing to serve the UI on {'a share link' if args.share else args.host} without a password: "
            "anyone who can reach it could start servers on this machine.",
            hint="Add --auth user:password (or set WORKBENCH_AUTH), or bind 127.0.0.1.",
        )
    print(f"Nemotron vLLM Workbench: http://{'127.0.0.1' if args.host in ('0.0.0.0', '::') else args.host}:{args.port}",
          flush=True)
    exit_on_signals()  # SIGTERM/SIGHUP end as Ctrl-C does: the servers this UI launched are stopped
    serve_app(args.host, args.port, auth, args.share, args.state_dir, args.open)
    return 0

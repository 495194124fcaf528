"""`python -m workbench notebooks`: open JupyterLab on the companion notebooks.

JupyterLab listens on 127.0.0.1 only, with a fresh token, and the URL to open
(token included) is printed before it starts. It runs in the foreground until Ctrl-C.
"""

from __future__ import annotations

import argparse
import os
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

from workbench.errors import WorkbenchError
from workbench.server.ports import port_free

__all__ = ["register", "jupyter_lab_argv", "notebooks_dir"]

DEFAULT_PORT = 8888


def notebooks_dir() -> Path:
    return Path(__file__).resolve().parent.parent.parent / "notebooks"


def jupyter_lab_argv(directory: Path, port: int, token: str, *, open_browser: bool = False) -> list[str]:
    """The JupyterLab command: this environment's Python, loopback only, the given token."""
    argv = [
        sys.executable, "-m", "jupyterlab",
        f"--ServerApp.root_dir={directory}",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}",
    ]
    if not open_browser:
        argv.append("--no-browser")
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        argv.append("--ServerApp.allow_root=True")  # containers often run as root
    return argv


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "notebooks",
        help="open JupyterLab on the companion notebooks (127.0.0.1 only)",
        description="Start JupyterLab on notebooks/ bound to 127.0.0.1, print the URL to open, "
        "and run until Ctrl-C.",
    )
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help="JupyterLab's port (default %(default)s)")
    p.add_argument("--dir", type=Path, default=None, help="folder to open (default: the repository's notebooks/)")
    p.add_argument("--open", action="store_true", help="also open a browser tab")
    p.add_argument("--keep-server", action="store_true",
                   help="let each notebook leave its vLLM server running for the next one "
                   "(sets WORKBENCH_KEEP_SERVER=1)")
    p.set_defaults(func=notebooks_command)


def notebooks_command(args: argparse.Namespace) -> int:
    directory = (args.dir or notebooks_dir()).resolve()
    if not directory.is_dir():
        raise WorkbenchError(f"No notebooks folder at {directory}.",
                             hint="Run from a checkout of the workbench, or pass --dir PATH.")
    try:
        import jupyterlab  # noqa: F401
    except ImportError as exc:
        raise WorkbenchError("JupyterLab is not installed in this environment.",
                             hint="pip install jupyterlab ipykernel ipywidgets (or pip install -e .).") from exc
    if not 1 <= args.port <= 65535:
        raise WorkbenchError(f"--port {args.port} is not a TCP port.", hint="Pick one between 1024 and 65535.")
    if not port_free("127.0.0.1", args.port):
        raise WorkbenchError(f"Port {args.port} on 127.0.0.1 is already in use.",
                             hint="Pass another one with --port, e.g. --port 8899.")
    token = secrets.token_hex(16)
    env = dict(os.environ)
    if args.keep_server:
        env["WORKBENCH_KEEP_SERVER"] = "1"
    url = f"http://127.0.0.1:{args.port}/lab?token={token}"
    print(f"JupyterLab on {directory}\nOpen: {url}\nStop with Ctrl-C.", flush=True)
    process = subprocess.Popen(jupyter_lab_argv(directory, args.port, token, open_browser=args.open), env=env)
    try:
        return process.wait()
    except KeyboardInterrupt:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
        return 130

"""`python -m workbench notebooks`: open JupyterLab on the companion notebooks.

JupyterLab listens on 127.0.0.1 only, with a fresh token (passed as JUPYTER_TOKEN,
so it is not on any process's argv for `ps` to show), and the URL to open (token
included) is printed before it starts. It asks the internet nothing (no news feed,
no update check). It runs in the foreground until Ctrl-C, SIGTERM or SIGHUP, which
all stop JupyterLab, and with it its kernels and the servers they launched.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from workbench.cli.checks import port_number
from workbench.errors import WorkbenchError
from workbench.server.ports import port_free
from workbench.server.signals import exit_on_signals

__all__ = ["LAB_SETTING_DEFAULTS", "register", "jupyter_lab_argv", "jupyter_lab_env", "notebooks_dir", "stop_jupyter"]

DEFAULT_PORT = 8888


def notebooks_dir() -> Path:
    return Path(__file__).resolve().parent.parent.parent / "notebooks"


def jupyter_lab_argv(directory: Path, port: int, *, open_browser: bool = False) -> list[str]:
    """The JupyterLab command: this environment's Python, loopback only, offline. The
    token goes in the environment (JUPYTER_TOKEN), never on argv."""
    argv = [
        sys.executable, "-m", "jupyterlab",
        f"--ServerApp.root_dir={directory}",
        "--ServerApp.ip=127.0.0.1",
        # Answer only loopback names (127.0.0.1, [::1], localhost): a page whose name
        # rebinds to 127.0.0.1 gets 403 (DNS rebinding). Its default for a loopback ip; said here.
        "--ServerApp.allow_remote_access=False",
        "--ServerApp.local_hostnames=localhost",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        # No news feed and no "get notified about Jupyter news?" prompt; no update check.
        "--LabApp.news_url=None",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
    ]
    if not open_browser:
        argv.append("--no-browser")
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        argv.append("--ServerApp.allow_root=True")  # containers often run as root
    return argv


# JupyterLab's defaults, under the user's own settings: no "get notified about Jupyter
# news?" prompt (shown while fetchNews is "none", whatever news_url says) and no update check.
LAB_SETTING_DEFAULTS = {"@jupyterlab/apputils-extension:notification": {"fetchNews": "false",
                                                                        "checkForUpdates": False}}


def jupyter_lab_env(token: str, config_dir: Path, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for jupyter_lab_argv: the token (JUPYTER_TOKEN, not argv) and
    `config_dir` first on JUPYTER_CONFIG_PATH, holding LAB_SETTING_DEFAULTS."""
    labconfig = config_dir / "labconfig"
    labconfig.mkdir(parents=True, exist_ok=True)
    (labconfig / "default_setting_overrides.json").write_text(json.dumps(LAB_SETTING_DEFAULTS, indent=2))
    env = dict(os.environ if base is None else base)
    paths = [str(config_dir), *filter(None, env.get("JUPYTER_CONFIG_PATH", "").split(os.pathsep))]
    return {**env, "JUPYTER_TOKEN": token, "JUPYTER_CONFIG_PATH": os.pathsep.join(paths)}


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "notebooks",
        help="open JupyterLab on the companion notebooks (127.0.0.1 only)",
        description="Start JupyterLab on notebooks/ bound to 127.0.0.1, print the URL to open, "
        "and run until Ctrl-C.",
    )
    p.add_argument("--port", type=port_number, default=DEFAULT_PORT, help="JupyterLab's port (default %(default)s)")
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
        import jupyterlab  # noqa: F401  # optional, and 3 s to load: looked for when this command runs
    except ImportError as exc:
        raise WorkbenchError("JupyterLab is not installed in this environment.",
                             hint="pip install jupyterlab ipykernel ipywidgets (or pip install -e .).") from exc
    if not 1 <= args.port <= 65535:
        raise WorkbenchError(f"--port {args.port} is not a TCP port.", hint="Pick one between 1024 and 65535.")
    if not port_free("127.0.0.1", args.port):
        raise WorkbenchError(f"Port {args.port} on 127.0.0.1 is already in use.",
                             hint="Pass another one with --port, e.g. --port 8899.")
    token = secrets.token_hex(16)
    config_dir = Path(tempfile.mkdtemp(prefix="workbench-jupyter-config-"))
    env = jupyter_lab_env(token, config_dir)
    if args.keep_server:
        env["WORKBENCH_KEEP_SERVER"] = "1"
    url = f"http://127.0.0.1:{args.port}/lab?token={token}"
    print(f"JupyterLab on {directory}\nOpen: {url}\nStop with Ctrl-C.", flush=True)
    # Its own session: the stop below is ours to make, on whichever signal ends us.
    process = subprocess.Popen(jupyter_lab_argv(directory, args.port, open_browser=args.open), env=env,
                               start_new_session=True)
    exit_on_signals()  # SIGTERM/SIGHUP: SystemExit out of wait(), stopped below as Ctrl-C is
    try:
        return process.wait()
    except KeyboardInterrupt:
        stop_jupyter(process)
        return 130
    except SystemExit:
        stop_jupyter(process)  # here, not in the signal handler: wait() there would deadlock
        raise
    finally:
        shutil.rmtree(config_dir, ignore_errors=True)


def stop_jupyter(process: subprocess.Popen[bytes], timeout: float = 20.0) -> None:
    """SIGTERM: JupyterLab shuts its kernels down (their atexit stops their servers);
    SIGKILL to its group if it has not ended by `timeout`."""
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout)
    except ProcessLookupError:
        return
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(5)

"""`serve`, `status`, `stop`, `demo-model`: start and manage vLLM servers from the shell.

All the work is in workbench.server; this module parses options and prints.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from workbench import server
from workbench.cli.checks import DeprecatedSpelling, at_least, port_number, positive_float, refuse_with_attach
from workbench.cli.render import add_selection_arguments, selection_from_args
from workbench.cli.serve_nodes import add_node_arguments, has_live_workers, node_lines, serve_nodes_command
from workbench.demo.models import build_demo_model
from workbench.errors import LaunchError
from workbench.recipes import load_catalog, render
from workbench.server.ports import check_listen_address
from workbench.server.signals import exit_on_signals
from workbench.server.servers import scan_records
from workbench.server.state import state_root

__all__ = ["register", "print_event"]


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "serve",
        help="launch vllm serve for your hardware (or attach to a running server)",
        description="Start the rendered plan as a background vllm serve, print its start-up "
        "phases and the base URL when it is ready. Without --keep the server stops when this "
        "command ends (Ctrl-C).",
    )
    add_selection_arguments(p, port="same")
    how = p.add_argument_group("how to run it")
    how.add_argument("--mode", choices=("auto", "local", "docker"),
                     help="local: vllm from this environment; docker: the plan's docker run "
                     "(default: local when vLLM is installed, else docker)")
    how.add_argument("--python", metavar="PATH",
                     help="run vLLM with another environment's python (-m vllm.entrypoints.cli.main serve)")
    how.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    how.add_argument("--keep", action="store_true",
                     help="return once ready and leave the server running (stop it with `stop`)")
    how.add_argument("--timeout", type=positive_float, default=server.STARTUP_TIMEOUT_S,
                     help="seconds to wait for the server to be ready (default %(default).0f)")
    how.add_argument("--attach", metavar="URL", help="use a server started elsewhere instead of starting one")
    how.add_argument("--api-key", help="API key of the attached server")
    add_node_arguments(p)
    p.set_defaults(func=serve_command)

    s = subparsers.add_parser("status", help="show the servers the workbench started or attached")
    s.add_argument("--json", action="store_true", help="print the records as JSON")
    s.add_argument("--log", type=at_least(0), default=0, metavar="N", help="also print the last N log lines")
    s.set_defaults(func=status_command)

    t = subparsers.add_parser("stop", help="stop the server(s) the workbench started")
    t.add_argument("--server-port", type=port_number, dest="server_port", metavar="PORT",
                   help="only the server on this port")
    t.add_argument("--port", type=port_number, dest="server_port", action=DeprecatedSpelling, new="--server-port",
                   help=argparse.SUPPRESS)
    t.add_argument("--timeout", type=positive_float, default=server.STOP_TIMEOUT_S,
                   help="seconds between SIGTERM and SIGKILL (default %(default).0f)")
    t.set_defaults(func=stop_command)

    d = subparsers.add_parser("demo-model", help="build the SmolLM2 demo model for the CPU engine")
    d.add_argument("--force", action="store_true", help="rebuild even if it is already built")
    d.set_defaults(func=demo_model_command)


def print_event(event: server.ServerEvent) -> None:
    """One line per phase and status change; weight-loading progress on the same phase."""
    if event.kind == "phase" and event.phase:
        print(f"[{event.elapsed_s:6.1f} s] {event.phase.value:<17} {event.detail}", flush=True)
    elif event.kind == "progress" and event.detail:
        print(f"[{event.elapsed_s:6.1f} s]   {event.detail}", flush=True)
    elif event.kind == "status" and event.status is server.Status.FAILED and event.diagnosis:
        print(f"[{event.elapsed_s:6.1f} s] failed: {event.diagnosis.describe()}", file=sys.stderr, flush=True)


def _servers() -> list[server.ServerProcess]:
    """The recorded servers; records that do not check out are named on stderr and skipped."""
    handles, problems = scan_records(state_root())
    for problem in problems:
        print(f"warning: {problem.describe()}", file=sys.stderr)
    return handles


def serve_command(args: argparse.Namespace) -> int:
    refuse_with_attach(args, {"server_port": "--server-port", "mode": "--mode", "python": "--python",
                              "host": "--host", "workers": "--workers"})
    if args.attach:
        handle = server.attach(args.attach, api_key=args.api_key)
        print(f"Attached to {handle.base_url} (model {handle.model}).")
        print(f"OpenAI base URL: {handle.openai_base_url}")
        return 0
    catalog = load_catalog()
    plan = render(selection_from_args(args), catalog)
    hw = catalog.hardware[plan.hardware]
    engine_note = catalog.recipe(plan.recipe_id).engine_note_for(hw.id, hw.generation, hw.brand)
    if engine_note:
        print(f"This is {engine_note}.", flush=True)
    for fallback in plan.fallbacks:
        print(f"note: {fallback.choice} {fallback.asked!r} -> {fallback.used!r}: {fallback.reason}", file=sys.stderr)
    if plan.rehearsal:
        print(f"Rehearsal: {plan.model_id}'s command, served with the local stand-in {plan.local_build} "
              f"({len(plan.rehearsal_swaps)} flag(s) swapped):", flush=True)
        for swap in plan.rehearsal_swaps:
            print(f"  {swap.line()}", flush=True)
    if args.host and args.mode != "docker":
        check_listen_address(args.host, plan.port)  # before building or starting anything
    exit_on_signals()  # SIGTERM/SIGHUP: SystemExit, so the atexit handler stops the server
    if args.workers:
        return serve_nodes_command(args, plan, print_event)
    handle = server.launch(plan, mode=args.mode or "auto", python=args.python, host=args.host,
                           on_event=print_event, progress=print, stop_at_exit=not args.keep)
    print(f"Log: {handle.log_path}", flush=True)
    handle.wait_ready(args.timeout)
    print(f"Ready in {handle.time_to_ready_s:.1f} s: {handle.base_url}  (OpenAI base URL {handle.openai_base_url}, "
          f"model {handle.model})", flush=True)
    if args.keep:
        print(f"Left running (pid {handle.pid}); stop it with: python -m workbench stop --server-port {handle.port}")
        return 0
    print("Serving until Ctrl-C (or run with --keep to leave it running).", flush=True)
    while handle.status is server.Status.READY:
        time.sleep(1)
    if handle.status is server.Status.FAILED:
        why = handle.diagnosis
        raise LaunchError(f"The server on port {handle.port} stopped: {why.summary if why else 'see its log'}",
                          hint=f"{why.fix if why else 'Read the log.'}\nLog: {handle.log_path}")
    return 0


def _describe(h: server.ServerProcess, log_lines: int) -> str:
    lines = [f"{h.base_url}  {h.status.value}  ({h.mode}, model {h.model}"
             + (f", pid {h.pid}" if h.pid else "") + ")"]
    if h.time_to_ready_s:
        lines.append(f"  ready after {h.time_to_ready_s:.1f} s; phases: "
                     + ", ".join(f"{p.phase.value} {p.duration_s or 0:.1f} s" for p in h.phases))
    if h.status is server.Status.FAILED and h.diagnosis:
        lines.append("  " + h.diagnosis.describe().replace("\n", "\n  "))
    if h.log_path:
        lines.append(f"  log: {h.log_path}")
    lines += [f"  | {ln}" for ln in h.log_tail(log_lines)] if log_lines else []
    lines += node_lines(h)
    return "\n".join(lines)


def status_command(args: argparse.Namespace) -> int:
    handles = _servers()
    for h in handles:
        h.refresh()
    if args.json:
        print(json.dumps([h.public_dict() for h in handles], indent=2, default=str))
    elif not handles:
        print("The workbench has not started or attached any server here.")
    else:
        print("\n".join(_describe(h, args.log) for h in handles))
    running = any(h.status in (server.Status.READY, server.Status.STARTING) for h in handles)
    return 0 if running else 1


def stop_command(args: argparse.Namespace) -> int:
    targets = [h for h in _servers()
               if (args.server_port is None or h.port == args.server_port) and h.status is not server.Status.STOPPED]
    targets = [h for h in targets if h.is_alive() or h.mode == "attach" or has_live_workers(h)]
    if not targets:
        where = f" on port {args.server_port}" if args.server_port else ""
        print(f"No server started by the workbench is running{where}.")
        return 1
    for h in targets:
        result = h.stop(timeout=args.timeout)
        verb = {server.StopStage.TERMINATED: "stopped (SIGTERM)", server.StopStage.KILLED: "killed (SIGKILL)",
                server.StopStage.DETACHED: "detached", server.StopStage.ALREADY_GONE: "was not running"}
        print(f"{h.base_url}: {verb[result.stage]} in {result.seconds:.1f} s")
    return 0


def demo_model_command(args: argparse.Namespace) -> int:
    built = build_demo_model(force=args.force)
    print(built.path)
    return 0

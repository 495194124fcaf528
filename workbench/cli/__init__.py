"""Command line: `python -m workbench [COMMAND]`; with no command it opens the UI.

Each module here registers its subcommands (`register(subparsers)`); every
command function is named `<command>_command`. This module only dispatches and
turns WorkbenchError into a clean message (exit 2).
"""

from __future__ import annotations

import argparse
import sys

from workbench.cli import bench, chat, mcp, metrics, notebooks, plan, render, serve, ui, workshop
from workbench.errors import WorkbenchError

COMMAND_MODULES = (ui, render, plan, serve, chat, mcp, metrics, bench, notebooks, workshop)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m workbench",
        description="Serve NVIDIA Nemotron 3.5 Lightning with vLLM: render commands, "
        "launch, chat, watch throughput, benchmark. With no command, opens the web UI.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in COMMAND_MODULES:
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    if not argv or argv[0].startswith("-") and argv[0] not in ("-h", "--help"):
        argv = ["ui", *argv]
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except WorkbenchError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        if exc.hint:
            print(exc.hint, file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130

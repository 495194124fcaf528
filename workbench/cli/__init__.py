"""Command line: `python -m workbench [COMMAND]`; with no command it opens the UI.

Each module here registers its subcommands (`register(subparsers)`); every
command function is named `<command>_command`. This module only dispatches and
turns WorkbenchError into a clean message (exit 2).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

import importlib
from types import ModuleType

from workbench.cli.hints import command_line_hint
from workbench.errors import WorkbenchError

# Imported when a parser is built, not at import time: `gpu` builds a parser of its
# own module alone, so it runs with the core dependencies only (no Gradio, no Jupyter).
COMMAND_MODULE_NAMES = ("ui", "render", "plan", "serve", "chat", "mcp", "metrics", "gpu", "bench", "experiment", "notebooks", "workshop", "agents")
CORE_ONLY_COMMANDS = ("gpu",)


def command_modules(names: tuple[str, ...] = COMMAND_MODULE_NAMES) -> list[ModuleType]:
    return [importlib.import_module(f"workbench.cli.{name}") for name in names]


def build_parser(only: tuple[str, ...] = COMMAND_MODULE_NAMES) -> argparse.ArgumentParser:
    return build_parsers(only)[0]


def build_parsers(only: tuple[str, ...] = COMMAND_MODULE_NAMES
                  ) -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The top parser and each subcommand's own parser, by command name."""
    parser = argparse.ArgumentParser(
        prog="python -m workbench",
        description="Serve NVIDIA Nemotron 3.5 Lightning with vLLM: render commands, "
        "launch, chat, watch throughput, benchmark. With no command, opens the web UI.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in command_modules(only):
        module.register(subparsers)
    return parser, dict(subparsers.choices)


class _CurrentStderr(logging.StreamHandler):
    """Writes to sys.stderr as it is at each record, not as it was at the first command:
    a caller that swaps stderr (a test, a notebook) closes the old stream."""

    @property
    def stream(self):  # noqa: D401
        return sys.stderr

    @stream.setter
    def stream(self, _value) -> None:
        pass


def _show_library_log() -> None:
    """The library logs to the `workbench` loggers; the command line shows warnings (or the level
    in $WORKBENCH_LOG, e.g. INFO for every phase and stop) on stderr, once per process."""
    logger = logging.getLogger("workbench")
    if logger.handlers:
        return
    handler = _CurrentStderr()
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    logger.addHandler(handler)
    level = os.environ.get("WORKBENCH_LOG", "WARNING").upper()
    logger.setLevel(level if level in logging.getLevelNamesMapping() else "WARNING")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser, commands = build_parsers((argv[0],) if argv and argv[0] in CORE_ONLY_COMMANDS else COMMAND_MODULE_NAMES)
    if not argv or argv[0].startswith("-") and argv[0] not in ("-h", "--help"):
        argv = ["ui", *argv]
    args = parser.parse_args(argv)
    _show_library_log()
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except WorkbenchError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        if exc.hint:
            print(exc.hint, file=sys.stderr)
        # The library names settings; the flags that set them here are this command's business.
        where = command_line_hint(exc.settings, commands.get(args.command), argv)
        if where:
            print(where, file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130

"""`python -m workbench gpu`: the machine's NVIDIA GPUs, live (like nvidia-smi beside the server).

Imports only the core (workbench.telemetry and the standard library), so it runs on
a bare GPU box with the core dependencies alone; `--once --json` is for scripts.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from workbench.cli.checks import at_least, positive_float
from workbench.telemetry import GpuSource, format_gpu_table

_REDRAW = "\x1b[H\x1b[2J"


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "gpu",
        help="live GPU table: utilization, memory, power and its limit, SM clock, temperature, throttling",
        description="Read every NVIDIA GPU through NVML (nvidia-smi where NVML cannot load) every "
        "INTERVAL seconds and redraw a table. On a machine with no NVIDIA GPU it says so and why.",
    )
    parser.add_argument("--once", action="store_true", help="one reading, then exit")
    parser.add_argument("--json", action="store_true",
                        help="JSON instead of the table (one object per reading, one per line)")
    parser.add_argument("--interval", type=interval_seconds, default=1.0, metavar="S",
                        help="seconds between readings, 0.05 to 3600 (default 1)")
    parser.add_argument("--count", type=at_least(1), metavar="N", help="stop after N readings (default: until Ctrl-C)")
    parser.set_defaults(func=gpu_command)


def interval_seconds(text: str) -> float:
    value = positive_float(text)
    if not 0.05 <= value <= 3600:
        raise argparse.ArgumentTypeError(f"{value:g} s is out of range: give 0.05 to 3600 seconds")
    return value


def gpu_command(args: argparse.Namespace) -> int:
    source = GpuSource()
    count = 1 if args.once else args.count
    redraw = sys.stdout.isatty() and not args.json and count != 1
    done = 0
    try:
        while count is None or done < count:
            started = time.monotonic()
            reading = source.read()
            done += 1
            if args.json:
                print(json.dumps(reading.to_dict()), flush=True)
            else:
                print((_REDRAW if redraw else "") + format_gpu_table(reading) + ("" if redraw else "\n"), flush=True)
            if not reading.gpus:
                break  # nothing to watch: the one line says there is no NVIDIA GPU, and why
            if count is None or done < count:
                time.sleep(max(0.0, args.interval - (time.monotonic() - started)))
    finally:
        source.close()
    return 0

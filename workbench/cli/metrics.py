"""`python -m workbench metrics`: a live table of a vLLM server's /metrics in the terminal."""

from __future__ import annotations

import argparse
import sys
import time
from datetime import datetime

from workbench.cli.checks import at_least, new_file_path, positive_float
from workbench.metrics import MetricsError, MetricsPoller, ThroughputFigures
from workbench.server import resolve_server_url
from workbench.telemetry import GpuReading, GpuSource, format_gpu_lines

# Clear the screen and go home, so each scrape redraws the table in place.
_REDRAW = "\x1b[H\x1b[2J"


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "metrics",
        help="live throughput, requests, KV cache and spec-decode table from /metrics",
        description="Scrape a vLLM server's /metrics every INTERVAL seconds and redraw a "
        "compact table: prefill/decode tok/s, requests, KV cache, prefix-cache hits, "
        "latency percentiles and speculative-decoding acceptance over the last WINDOW seconds, "
        "and this machine's GPUs (NVML: utilization, power, memory, clocks, throttling).",
    )
    parser.add_argument(
        "--url",
        help="the server, e.g. http://127.0.0.1:8000 (default: the server the workbench launched)",
    )
    parser.add_argument("--interval", type=positive_float, default=1.0, metavar="S", help="seconds between scrapes (default 1)")
    parser.add_argument("--window", type=positive_float, default=10.0, metavar="S", help="seconds the figures span (default 10)")
    parser.add_argument("--count", type=at_least(1), metavar="N", help="stop after N scrapes (default: until Ctrl-C)")
    parser.add_argument("--csv", type=new_file_path, metavar="PATH", help="write the recorded series to this CSV file at the end")
    parser.add_argument("--json", type=new_file_path, metavar="PATH", help="write the recorded figures to this JSON file at the end")
    parser.set_defaults(func=metrics_command)


def metrics_command(args: argparse.Namespace) -> int:
    url = resolve_server_url(args.url)
    poller = MetricsPoller(url, interval=args.interval, window=args.window, history=max(args.count or 0, 3600))
    gpus = GpuSource()
    redraw = sys.stdout.isatty()
    scrapes = 0
    failed_exports = 0
    try:
        while args.count is None or scrapes < args.count:
            started = time.monotonic()
            try:
                figures = poller.scrape_once()
                text = format_table(figures, poller.url, gpus.read())
            except MetricsError as exc:
                if scrapes == 0:
                    raise  # nothing ever worked: a wrong URL, say so and stop
                text = f"scrape failed: {exc.message}"
            scrapes += 1
            print((_REDRAW if redraw else "") + text, flush=True)
            if args.count is None or scrapes < args.count:
                time.sleep(max(0.0, args.interval - (time.monotonic() - started)))
    finally:
        poller.close()
        gpus.close()
        # Each file on its own: one that cannot be written does not cost the other, or hide why the run ended.
        for option, path, export in (("--csv", args.csv, poller.export_csv), ("--json", args.json, poller.export_json)):
            if path is None:
                continue
            try:
                print(f"wrote {export(path)}", file=sys.stderr)
            except OSError as exc:
                failed_exports += 1
                print(f"error: {option} {path}: {exc.strerror or exc}", file=sys.stderr)
    return 1 if failed_exports else 0


def format_table(figures: ThroughputFigures, url: str, gpus: GpuReading | None = None) -> str:
    """A compact table of one scrape's figures, and the GPUs beside the server (the GPUs of
    this machine: a server elsewhere has its own)."""
    show = figures.display
    when = datetime.fromtimestamp(figures.window_end).strftime("%H:%M:%S")
    if figures.basis == "since_start":
        span = "since the server started (one scrape so far)"
    else:
        span = f"last {show('window_s')} ({figures.scrapes} scrapes)"
    lines = [
        f"vLLM metrics  {url}  {when}  {span}",
        f"  throughput   prefill {show('prefill_tps')}   decode {show('decode_tps')}",
        f"  requests     running {show('running')}   waiting {show('waiting')}   "
        f"finished {show('finished')} ({show('finished_by_reason')})   preemptions {show('preemptions')}",
        f"  cache        KV {show('kv_cache_pct')}   prefix hit {show('prefix_cache_hit_rate')}",
        f"  TTFT         {show('ttft')}",
        f"  ITL          {show('itl')}",
        f"  TPOT         {show('tpot')}",
        f"  E2E          {show('e2e')}",
        f"  spec decode  acceptance {show('spec_acceptance_rate')}   "
        f"mean length {show('spec_mean_acceptance_length')}   "
        f"per position {show('spec_acceptance_by_position')}",
    ]
    if gpus is not None:
        lines.extend(format_gpu_lines(gpus))
    if figures.counter_reset:
        lines.append("  note         the server restarted in this window: counters were reset")
    return "\n".join(lines)

"""CPU cost of the metrics poller per scrape, on real vLLM /metrics text.

    .venv/bin/python benchmarks/bench_metrics_poller.py [--iterations N] [--url URL]

Measures time.process_time() (CPU of this process, not wall time) for:
  parse    parse_metrics() of a recorded /metrics answer (prometheus_client's parser)
  derive   derive_figures() over a full window of snapshots
  record   MetricsPoller.record(): append + derive the figures row, as each scrape does
  scrape   with --url: the whole scrape_once() against a live server (HTTP GET included)
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from workbench.metrics import MetricsPoller, derive_figures, parse_metrics, select_window

RECORDED = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "vllm-0.32.0-cpu"
FILES = ("metrics_under_load.prom", "metrics_spec_decode_ngram.prom")


def cpu_ms_per_call(fn, iterations: int) -> float:
    start = time.process_time()
    for i in range(iterations):
        fn(i)
    return (time.process_time() - start) / iterations * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=300)
    parser.add_argument("--interval", type=float, default=1.0, help="scrape interval, for the CPU share")
    parser.add_argument("--window", type=float, default=10.0)
    parser.add_argument("--url", help="also time scrape_once() against this live server")
    args = parser.parse_args()
    n = args.iterations
    per_scrape = args.window / args.interval

    print(f"{n} iterations; CPU ms per call (time.process_time); window {args.window:g} s "
          f"at {args.interval:g} s = {per_scrape:.0f} snapshots")
    for name in FILES:
        text = (RECORDED / name).read_text()
        parse_ms = cpu_ms_per_call(lambda i: parse_metrics(text, float(i)), n)

        poller = MetricsPoller("http://127.0.0.1:9", interval=args.interval, window=args.window)
        for i in range(int(per_scrape) + 2):
            poller.record(parse_metrics(text, float(i) * args.interval))
        window = select_window(poller.snapshots(), args.window)
        derive_ms = cpu_ms_per_call(lambda i: derive_figures(window), n)

        snapshots = [parse_metrics(text, 1000.0 + i * args.interval) for i in range(n)]
        record_ms = cpu_ms_per_call(lambda i: poller.record(snapshots[i]), n)

        total = parse_ms + record_ms
        print(
            f"  {name} ({len(text):,} bytes, {text.count(chr(10)):,} lines): "
            f"parse {parse_ms:.2f}  derive {derive_ms:.3f}  record {record_ms:.3f}  "
            f"parse+record {total:.2f} ms = {total / (args.interval * 1000) * 100:.2f} % of one core"
        )

    if args.url:
        with_http = MetricsPoller(args.url, interval=args.interval, window=args.window)
        scrape_ms = cpu_ms_per_call(lambda i: with_http.scrape_once(), max(20, n // 10))
        wall = time.perf_counter()
        with_http.scrape_once()
        wall_ms = (time.perf_counter() - wall) * 1000
        with_http.close()
        print(f"  live scrape_once() {args.url}: {scrape_ms:.2f} ms CPU, {wall_ms:.1f} ms wall")


if __name__ == "__main__":
    main()

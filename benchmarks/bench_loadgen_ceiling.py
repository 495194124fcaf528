"""How much load can the benchmark's load generator itself consume on this machine?

Runs the workbench benchmark against the fixed-rate test server (in its own
process) streaming as fast as it can (no prefill or decode delay, one token per
chunk, the worst case for the client), at rising concurrency, and prints per
level: concurrent streams, token chunks per second consumed, and the client's
CPU time per token. Where the chunks/s stop rising with concurrency, the client
(or the 2-core box) is the ceiling; a real server below that rate is measured
faithfully.

    .venv/bin/python benchmarks/bench_loadgen_ceiling.py [--levels 1,4,16,64] [--osl 256]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.helpers.fixed_rate_server import FixedRateServer  # noqa: E402
from workbench.bench import BenchConfig, run_benchmark  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--levels", default="1,4,16,64", help="concurrency levels, comma-separated")
    parser.add_argument("--osl", type=int, default=256, help="tokens per request (one per chunk)")
    parser.add_argument("--requests-per-stream", type=int, default=4)
    args = parser.parse_args()
    server = FixedRateServer(prefill_rate=0, decode_rate=0, mode="one")
    print(f"machine: {os.cpu_count()} cores; server: fixed-rate test server, unthrottled, 1 token per chunk")
    print(f"{'streams':>8}{'requests':>10}{'chunks/s':>12}{'tokens/s':>12}{'client CPU us/token':>21}"
          f"{'client CPU %':>14}{'errors':>8}")
    with server.in_subprocess() as url:
        for level in (int(x) for x in args.levels.split(",")):
            config = BenchConfig(url=url, input_tokens=64, output_tokens=args.osl, concurrency=level,
                                 requests=level * args.requests_per_stream, warmup_requests=level)
            cpu0, wall0 = time.process_time(), time.perf_counter()
            result = run_benchmark(config)
            cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
            s = result.summary
            chunks = sum(r.event_kinds.count("c") for r in result.records)
            # CPU over the whole call (prompt building and warm-up included): an upper bound.
            print(f"{level:>8}{s.requests:>10}{chunks / s.duration_s:>12,.0f}{s.output_tok_s:>12,.0f}"
                  f"{cpu / (s.output_tokens * (1 + level / s.requests)) * 1e6:>21.1f}"
                  f"{cpu / wall * 100:>13.0f}%{s.errors:>8}")


if __name__ == "__main__":
    main()

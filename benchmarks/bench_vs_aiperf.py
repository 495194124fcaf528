"""The workbench benchmark and aiperf against a server whose timing is known.

The fixed-rate test server (in its own process) sends the first token 200 ms after
a request arrives and then 40 tokens/s per stream, 128 output tokens, and records
when it sent every chunk. That record is the truth. At each concurrency the
workbench and then aiperf 0.13.0 run against the same server; the table shows,
for TTFT, E2E, per-user decode and output tok/s, the truth of each tool's run
(the server's record of the requests that tool sent), what each tool measured,
and its error. Also: the server's worst send lag (if it grows, the server fell
behind and the truth itself is late), the workbench's client-lag verdict, and where
the workbench's TTFT error comes from: client sent -> the server's socket read returned
the request (loopback: near zero unless a core was busy), and the server wrote the first
token -> the client read it (the client's share). The server schedules from that socket
read, so its own parsing queue (printed: 256 requests landing at once take it tens of ms)
is in neither the truth nor the error. The issue's comparison is
with no warm-up requests: --warmup 0. WORKBENCH_BENCH_LOOP=asyncio runs the workbench
on asyncio's loop instead of uvloop.

--workload multiturn runs the workbench's multi-turn sessions instead (one session per stream,
--turns turns of 128 output tokens each, every later turn resending the whole history plus 32
new words; the truth is again the server's record of every request). aiperf is not run then.

    .venv/bin/python benchmarks/bench_vs_aiperf.py [--levels 1,16,64,128,256] [--rounds 2] [--warmup 0]
    .venv/bin/python benchmarks/bench_vs_aiperf.py --levels 128,256 --workload multiturn --turns 3

aiperf comes from <repo>/.venv-aiperf (AIPERF_BIN overrides); it runs without
HF_HUB_OFFLINE (aiperf 0.13.0 rejects a local tokenizer path under it) and with
--no-server-metrics --no-gpu-telemetry. The figures are timing figures: run on
a quiet machine (the table prints /proc/loadavg).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.helpers.fixed_rate_server import MODEL, FixedRateServer  # noqa: E402
from workbench.bench import BenchConfig, run_benchmark  # noqa: E402

FIRST_TOKEN_S = 0.200
DECODE_RATE = 40.0
ISL, OSL = 64, 128
TURN_ISL = 32
METRICS = (("TTFT mean", "ms"), ("E2E mean", "ms"), ("decode/user", "tok/s"), ("output tok/s", "tok/s"))


def timings(url: str) -> list[dict[str, int]]:
    with urllib.request.urlopen(f"{url}/timings", timeout=30) as response:
        return json.loads(response.read())  # type: ignore[no-any-return]


def truth_of(records: list[dict[str, int]]) -> dict[str, float]:
    """The server's own record of a run's requests, in the tools' definitions."""
    ttft = [(t["first_sent_ns"] - t["arrival_ns"]) / 1e6 for t in records]
    e2e = [(t["last_sent_ns"] - t["arrival_ns"]) / 1e6 for t in records]
    decode = [(OSL - 1) * 1e9 / (t["last_sent_ns"] - t["first_sent_ns"]) for t in records]
    window_s = (max(t["last_sent_ns"] for t in records) - min(t["arrival_ns"] for t in records)) / 1e9
    return {"TTFT mean": statistics.mean(ttft), "E2E mean": statistics.mean(e2e),
            "decode/user": statistics.mean(decode), "output tok/s": OSL * len(records) / window_s,
            "send_lag_ms": max(t["max_send_lag_ns"] for t in records) / 1e6}


def error_parts(records: list[Any], truth: list[dict[str, int]]) -> dict[str, float]:
    """Where the workbench's TTFT error comes from, in mean ms over the same requests.

    TTFT(client) - TTFT(server) = (server read the head - client sent it) + (body in - head in)
    + (client read the first token - server wrote it); means of sums are sums of means, so
    no request has to be matched to its server record. One clock (CLOCK_MONOTONIC) for both.
    """
    def mean(values: list[int]) -> float:
        return statistics.mean(values) / 1e6

    ok = [r for r in records if r.ok]
    first_read = [r.start_ns + r.ttft_ns for r in ok]
    last_read = [r.start_ns + r.e2e_ns for r in ok]
    return {"send->head": mean([t["head_ns"] for t in truth]) - mean([r.start_ns for r in ok]),
            "head->body": mean([t["arrival_ns"] - t["head_ns"] for t in truth]),
            "write->read first": mean(first_read) - mean([t["first_sent_ns"] for t in truth]),
            "write->read last": mean(last_read) - mean([t["last_sent_ns"] for t in truth]),
            "server late first": mean([t["first_sent_ns"] - t["arrival_ns"] for t in truth]) - FIRST_TOKEN_S * 1e3,
            "server parse queue": mean([t["handled_ns"] - t["arrival_ns"] for t in truth]),
            "queued->send": mean([r.send_delay_ns or 0 for r in ok])}


def run_workbench(url: str, level: int, requests: int, warmup: int,
                  turns: int | None = None) -> tuple[dict[str, float], str, list[Any]]:
    if turns is None:
        config = BenchConfig(url=url, input_tokens=ISL, output_tokens=OSL, concurrency=level, requests=requests,
                             warmup_requests=warmup)
    else:
        config = BenchConfig(url=url, input_tokens=ISL, output_tokens=OSL, workload="multiturn", sessions=level,
                             turns=turns, turn_input_tokens=TURN_ISL, warmup_requests=warmup)
    result = run_benchmark(config)
    s = result.summary
    if s.errors:
        raise SystemExit(f"workbench: {s.errors} errors: {s.error_messages}")
    figures = {"TTFT mean": s.ttft_ms.mean, "E2E mean": s.e2e_ms.mean,
               "decode/user": s.decode_tok_s_per_user.mean, "output tok/s": s.output_tok_s}
    lag = result.client_lag.describe() if result.client_lag else "-"
    return figures, lag, result.records


def aiperf_bin() -> Path:
    return Path(os.environ.get("AIPERF_BIN", ROOT / ".venv-aiperf" / "bin" / "aiperf"))


def run_aiperf(url: str, level: int, requests: int, warmup: int, tokenizer: Path, out: Path) -> dict[str, float]:
    argv = [str(aiperf_bin()), "profile", "--model", MODEL, "--url", url, "--endpoint-type", "chat", "--streaming",
            "--concurrency", str(level), "--request-count", str(requests),
            "--synthetic-input-tokens-mean", str(ISL), "--synthetic-input-tokens-stddev", "0",
            "--output-tokens-mean", str(OSL), "--output-tokens-stddev", "0",
            "--extra-inputs", "ignore_eos:true", "--extra-inputs", f"min_tokens:{OSL}",
            "--tokenizer", str(tokenizer), "--artifact-dir", str(out), "--ui-type", "none",
            "--no-server-metrics", "--no-gpu-telemetry", "--random-seed", "1",
            "--use-server-token-count"]  # usage.completion_tokens, as the workbench counts
    if warmup:  # aiperf 0.13 refuses --warmup-request-count 0; leaving it out sends none
        argv += ["--warmup-request-count", str(warmup)]
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=out.parent, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"aiperf failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    d: dict[str, Any] = json.loads((out / "profile_export_aiperf.json").read_text())
    return {"TTFT mean": d["time_to_first_token"]["avg"], "E2E mean": d["request_latency"]["avg"],
            "decode/user": d["output_token_throughput_per_user"]["avg"],
            "output tok/s": d["output_token_throughput"]["avg"]}


def err(measured: float | None, true: float) -> str:
    return "-" if measured is None else f"{(measured - true) / true * 100:+.1f} %"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--levels", default="1,16,64,128,256")
    parser.add_argument("--rounds", type=int, default=2, help="requests per stream in each run")
    parser.add_argument("--tokenizer", type=Path, help="aiperf's tokenizer folder (default: the CPU demo model's)")
    parser.add_argument("--no-aiperf", action="store_true")
    parser.add_argument("--warmup", type=int, help="warm-up requests per run (default: min(streams, 8))")
    parser.add_argument("--workload", choices=["single", "multiturn"], default="single",
                        help="multiturn: one session per stream, --turns turns each (the workbench only)")
    parser.add_argument("--turns", type=int, default=3, help="turns per session with --workload multiturn")
    args = parser.parse_args()
    multiturn = args.workload == "multiturn"
    if multiturn:
        args.no_aiperf = True
    tokenizer = args.tokenizer
    if tokenizer is None and not args.no_aiperf:
        from workbench.demo.models import build_demo_model

        tokenizer = build_demo_model().path
    if not args.no_aiperf and not aiperf_bin().is_file():
        raise SystemExit(f"aiperf is not at {aiperf_bin()}: scripts/install.sh --test installs it (or --no-aiperf)")
    server = FixedRateServer(decode_rate=DECODE_RATE, first_token_s=FIRST_TOKEN_S, mode="one")
    rows = []
    with server.in_subprocess() as url, tempfile.TemporaryDirectory(prefix="bench-vs-aiperf-") as tmp:
        for level in (int(x) for x in args.levels.split(",")):
            requests = level * args.turns if multiturn else max(8, args.rounds * level)
            seen = len(timings(url))
            warmup = min(level, 8) if args.warmup is None else args.warmup
            ours, lag, records = run_workbench(url, level, requests, warmup, args.turns if multiturn else None)
            ours_records = sorted(timings(url)[seen:], key=lambda t: t["arrival_ns"])[-requests:]
            ours_truth = truth_of(ours_records)
            parts = error_parts(records, ours_records)
            theirs: dict[str, float] | None = None
            theirs_truth = None
            if not args.no_aiperf:
                seen = len(timings(url))
                theirs = run_aiperf(url, level, requests, warmup, tokenizer, Path(tmp) / f"aiperf-c{level}")
                theirs_truth = truth_of(sorted(timings(url)[seen:], key=lambda t: t["arrival_ns"])[-requests:])
            rows.append((level, ours_truth, ours, lag, theirs_truth, theirs, parts))
            print(f"done: concurrency {level}", file=sys.stderr, flush=True)
    shape = (f"multi-turn: {args.turns} turns per session, {ISL} in then +{TURN_ISL} words a turn, {OSL} out a turn"
             if multiturn else f"{ISL} in / {OSL} out")
    print(f"fixed-rate server: first token {FIRST_TOKEN_S * 1000:.0f} ms after arrival, {DECODE_RATE:.0f} tok/s per "
          f"stream, {shape}, one token per chunk; {os.cpu_count()} cores; "
          f"/proc/loadavg {Path('/proc/loadavg').read_text().strip()}")
    print("truth = the server's own record of the requests each tool sent (first / last chunk written - arrival)")
    print(f"{'streams':>7}  {'metric':<13}{'unit':>6}{'truth(wb)':>11}{'workbench':>11}{'error':>9}"
          f"{'truth(ai)':>11}{'aiperf':>11}{'error':>9}")
    for level, ours_truth, ours, lag, theirs_truth, theirs, parts in rows:
        for name, unit in METRICS:
            t1, m1 = ours_truth[name], ours[name]
            cells = f"{t1:>11,.1f}{m1:>11,.1f}{err(m1, t1):>9}"
            if theirs is not None and theirs_truth is not None:
                t2, m2 = theirs_truth[name], theirs[name]
                cells += f"{t2:>11,.1f}{m2:>11,.1f}{err(m2, t2):>9}"
            print(f"{level:>7}  {name:<13}{unit:>6}{cells}")
        lag_ai = "" if theirs_truth is None else f"; in aiperf's run {theirs_truth['send_lag_ms']:.1f} ms"
        print(f"{'':>7}  server worst send lag {ours_truth['send_lag_ms']:.1f} ms in the workbench's run{lag_ai}; "
              f"workbench: {lag}")
        ttft_error = ours["TTFT mean"] - ours_truth["TTFT mean"]
        print(f"{'':>7}  workbench TTFT error {ttft_error:+.2f} ms = client sent -> server's socket read of the head "
              f"{parts['send->head']:+.2f} + head -> body {parts['head->body']:+.2f} + server wrote the first token "
              f"-> client read it {parts['write->read first']:+.2f} ms; last token write -> read "
              f"{parts['write->read last']:+.2f} ms; not in the error: the server's own lateness (first token "
              f"{parts['server late first']:+.2f} ms past 200 ms, in the truth too), its parse queue "
              f"({parts['server parse queue']:.2f} ms, scheduled from the socket read) and the client's queue before "
              f"sending ({parts['queued->send']:.2f} ms)")


if __name__ == "__main__":
    main()

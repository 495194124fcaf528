"""`python -m workbench bench`: benchmark a running server, or compare saved runs.

    python -m workbench bench --url http://127.0.0.1:8000 --preset smoke
    python -m workbench bench --preset speed-bench --isl 2048
    python -m workbench bench --preset sweep --max-concurrency 8
    python -m workbench bench --url http://A:8000 --url http://B:8000 --preset smoke
    python -m workbench bench --url http://127.0.0.1:8000 --goodput "ttft:500 tpot:30"
    python -m workbench bench --url http://127.0.0.1:8000 --tokenizer ./model-dir   # no /tokenize (trtllm-serve)
    python -m workbench bench --workload multiturn --sessions 8 --turns 6 --turn-isl 64
    python -m workbench bench --workload agentic --sessions 4 --turns 10 --turn-isl 512 --tool-call-osl 24
    python -m workbench bench --workload trace --trace sessions.jsonl
    python -m workbench bench compare A/bench.json B/bench.json

Nothing measured is lost: Ctrl-C (or the server going away) ends the load and
writes what was measured, marked partial (exit 130 / 1); --output-dir is checked
before the run, and an existing result there is never overwritten.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from pathlib import Path

from workbench.bench import (
    PRESETS,
    BenchConfig,
    load_result,
    preset_config,
    run_benchmark,
    run_sweep,
    sweep_levels,
)
from workbench.bench.config import WORKLOADS
from workbench.bench.goodput import parse_goodput
from workbench.bench.sessions import load_trace
from workbench.bench.report import TerminalProgress, format_comparison, format_result, format_sweep
from workbench.bench.results import check_output_dir
from workbench.errors import StopReason, WorkbenchError
from workbench.server import resolve_server_url

# With --request-rate and no --concurrency, in-flight requests are capped this high.
OPEN_LOOP_MAX_IN_FLIGHT = 256


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "bench",
        help="benchmark a running server (TTFT, TPOT, ITL, E2E, tok/s), or compare saved runs",
        description="Send a synthetic load of exact input length to a running vLLM server and report "
        "aiperf-compatible figures. Presets: "
        + "; ".join(f"{name}: {p['description']}" for name, p in PRESETS.items()),
    )
    parser.add_argument("--url", action="append", help="server base URL; give two to compare them "
                        "(default: the server the workbench launched)")
    parser.add_argument("--preset", choices=sorted(PRESETS), help="a named load shape (default smoke)")
    parser.add_argument("--isl", type=int, help="input tokens per request (chat-formatted, exact)")
    parser.add_argument("--osl", type=int, help="output tokens per request (max_tokens with ignore_eos)")
    parser.add_argument("--concurrency", type=int, help="requests in flight (with --request-rate: the cap)")
    parser.add_argument("--request-rate", type=float, help="requests per second, Poisson arrivals")
    parser.add_argument("--requests", type=int, help="measured requests")
    parser.add_argument("--duration", type=float, help="seconds to send for, instead of a request count")
    parser.add_argument("--warmup", type=int, help="warm-up requests, not counted")
    parser.add_argument("--reasoning", choices=("on", "off"), help="chat_template_kwargs.enable_thinking (default off)")
    parser.add_argument("--max-concurrency", type=int, help="highest level of the sweep preset")
    parser.add_argument("--seed", type=int, help="seed of the synthetic prompts")
    parser.add_argument("--goodput", nargs="+", metavar="KEY:VALUE",
                        help="SLOs for goodput, e.g. --goodput ttft:500 tpot:30 (ms; also e2el, ttfo, and aiperf's "
                        "tags such as time_to_first_token, inter_token_latency, output_token_throughput_per_user)")
    parser.add_argument("--tokenizer", help="count input tokens with this tokenizer (a folder, or a model id in the "
                        "Hugging Face cache) instead of the server's /tokenize; needed for trtllm-serve")
    parser.add_argument("--model", help="the served model name (default: the first one /v1/models lists)")
    sessions = parser.add_argument_group("session workloads (agents: each turn resends the whole history)")
    sessions.add_argument("--workload", choices=WORKLOADS, help="single (default): independent requests; multiturn: "
                          "sessions of user turns; agentic: tool-loop turns; trace: replay --trace")
    sessions.add_argument("--sessions", type=int, help="sessions running at once (default 8)")
    sessions.add_argument("--turns", type=int, help="turns per session (default 6)")
    sessions.add_argument("--turn-isl", type=int, help="tokens each later turn adds: a user message (multiturn) or a "
                          "tool result (agentic); default 64; the first turn is --isl")
    sessions.add_argument("--turn-osl", help="output tokens per turn, comma-separated (the last repeats), e.g. 128,64")
    sessions.add_argument("--think-time", type=float, help="seconds between an answer and the session's next turn")
    sessions.add_argument("--tool-call-osl", type=int, help="agentic: output tokens of each assistant tool-call turn")
    sessions.add_argument("--trace", help="a JSONL trace of sessions to replay (implies --workload trace; "
                          "format in README)")
    parser.add_argument("--output-dir", type=Path, help="where JSON/CSV go (default bench-results/<time>-<preset>)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.set_defaults(func=bench_command)
    actions = parser.add_subparsers(dest="bench_action", metavar="ACTION")
    compare = actions.add_parser("compare", help="show two saved results side by side")
    compare.add_argument("a", type=Path, help="first result .json")
    compare.add_argument("b", type=Path, help="second result .json")
    compare.set_defaults(func=bench_compare_command)


def _turn_outputs(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        return [int(part) for part in str(text).split(",")]
    except ValueError:
        raise WorkbenchError(f"--turn-osl takes whole numbers separated by commas, not {text!r}.",
                             hint="For example --turn-osl 128,64,32") from None


def _config(args: argparse.Namespace, url: str) -> BenchConfig:
    concurrency = args.concurrency
    if args.request_rate is not None and concurrency is None:
        concurrency = OPEN_LOOP_MAX_IN_FLIGHT
    return preset_config(
        args.preset or "smoke",
        url=url,
        input_tokens=args.isl,
        output_tokens=args.osl,
        concurrency=concurrency,
        request_rate=args.request_rate,
        requests=args.requests,
        duration_s=args.duration,
        warmup_requests=args.warmup,
        reasoning=None if args.reasoning is None else args.reasoning == "on",
        seed=args.seed,
        label=url,
        goodput=parse_goodput(args.goodput),
        tokenizer=args.tokenizer,
        model=args.model,
        workload=args.workload or ("trace" if args.trace else None),
        sessions=args.sessions,
        turns=args.turns,
        turn_input_tokens=args.turn_isl,
        turn_output_tokens=_turn_outputs(args.turn_osl),
        think_time_s=args.think_time,
        tool_call_tokens=args.tool_call_osl,
        trace_file=args.trace,
    )


def bench_command(args: argparse.Namespace) -> int:
    if args.preset == "sweep" and (args.workload not in (None, "single") or args.trace):
        raise WorkbenchError("The sweep preset sends single requests; a session workload is bounded by its "
                             "sessions and turns.", hint="Leave out --preset sweep, or --workload/--trace.")
    if args.preset == "sweep" and args.max_concurrency is None:
        raise WorkbenchError(
            "The sweep needs its highest concurrency: the server's --max-num-seqs is not visible from its API.",
            hint="Pass --max-concurrency N (the server's --max-num-seqs, or less; "
            "vLLM defaults to 128 per CPU engine and 256-1024 on GPUs).",
        )
    urls = args.url or [resolve_server_url(None)]
    if len(urls) > 2:
        raise WorkbenchError("Give at most two --url values (two configurations to compare).")
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = check_output_dir(args.output_dir or Path("bench-results") / f"{stamp}-{args.preset or 'smoke'}")
    for url in urls:
        config = _config(args, url)  # every setting checked before anything is sent
    if config.workload == "trace" and config.trace_file:
        load_trace(config.trace_file)  # a bad trace is refused before the run, with its line
    progress = None if args.quiet else TerminalProgress(sys.stderr)
    try:
        return _run(args, urls, out, progress)
    except WorkbenchError:
        if progress:
            print(file=sys.stderr)  # end the progress line before the error message
        raise


def _run(args: argparse.Namespace, urls: list[str], out: Path, progress: TerminalProgress | None) -> int:
    if args.preset == "sweep":
        if len(urls) != 1:
            raise WorkbenchError("The sweep runs against one server; give one --url.")
        sweep = run_sweep(_config(args, urls[0]), sweep_levels(args.max_concurrency), progress)
        if progress:
            print(file=sys.stderr)
        print(format_sweep(sweep))
        paths = sweep.save(out)
        print(f"\nwrote {paths['json']} and {paths['csv']} (one row per concurrency, ready to plot), "
              f"figures in {paths['figures_html']}")
        return _exit_code([r.summary.errors for r in sweep.levels], sweep.partial, sweep.stop_reason)
    results = []
    for i, url in enumerate(urls):
        result = run_benchmark(_config(args, url), progress, on_warning=_warn(progress))
        if progress:
            print(file=sys.stderr)
        print(format_result(result))
        stem = "bench" if len(urls) == 1 else f"bench-{'ab'[i]}"
        paths = result.save(out, stem)
        print(f"\nwrote {paths['json']}, {paths['requests_csv']}, {paths['summary_csv']}, "
              f"{paths['figures_html']}\n")
        results.append(result)
        if result.partial is not None:
            break  # interrupted: do not start the next server's run
    if len(results) == 2:
        print(format_comparison(*results))
    cut = next((r for r in results if r.partial is not None), None)
    return _exit_code([r.summary.errors for r in results], None if cut is None else cut.partial,
                      None if cut is None else cut.stop_reason)


def _warn(progress: TerminalProgress | None):
    def warn(message: str) -> None:
        if progress:
            print(file=sys.stderr)  # off the progress line
        print(f"WARNING: {message}", file=sys.stderr)

    return warn


def _exit_code(errors: list[int], partial: str | None, reason: StopReason | None) -> int:
    if partial is not None:
        print(f"PARTIAL: {partial}; the measured part was written above.", file=sys.stderr)
        return 130 if reason is StopReason.INTERRUPTED else 1
    return 0 if all(e == 0 for e in errors) else 1


def bench_compare_command(args: argparse.Namespace) -> int:
    print(format_comparison(load_result(args.a), load_result(args.b)))
    return 0

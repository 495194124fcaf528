"""`python -m workbench experiment`: which configuration wins at my concurrency.

    python -m workbench experiment --hardware cpu --spec off,ngram --concurrency 1,4,16
    python -m workbench experiment --hardware h200 --spec off,mtp,dspark --concurrency 1,8,64 --goodput ttft:500
    python -m workbench experiment --hardware cpu --config 'plain:off' --config 'ngram-8seqs:ngram:--max-num-seqs 8'
    python -m workbench experiment --hardware h200 --spec mtp --vary 'ssm32=--mamba-ssm-cache-dtype float32' \
        --vary 'ssm16=--mamba-ssm-cache-dtype float16' --quality full
    python -m workbench experiment --attach http://127.0.0.1:8000 --label mine --concurrency 1,4
    python -m workbench experiment --hardware cpu --spec off,ngram --slo ttft_p90:500 tpot_p90:25
    python -m workbench experiment --attach http://127.0.0.1:8000 --slo e2e_p99:8000 --slo-by rate
    python -m workbench experiment --resume experiments/20261204-181500

For each configuration in turn: launch it on one port, wait until ready, warm up,
run the concurrency sweep with the same prompts, read /metrics around each level,
and (unless --quality off) check its answers on the same server: agreement with the
reference configuration at temperature 0, and accuracy on an lm-eval task; then stop
it. Results (state.json, experiment.json, report.html) are written after every level; Ctrl-C stops the running server and writes what was measured, marked
partial (exit 130); `--resume DIR` continues it.

With --slo: for each configuration, the highest concurrency (--slo-by rate: request rate) at
which every objective holds, searched adaptively (workbench.experiment.slo); the answer
prints first, then every probe. Without --concurrency it runs the search alone.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TextIO

from workbench.bench.goodput import parse_goodput
from workbench.bench.results import check_output_dir
from workbench.cli.checks import at_least, positive_float
from workbench.cli.render import add_selection_arguments, selection_from_args
from workbench.errors import InputError
from workbench.experiment import (
    ExperimentProgress,
    ExperimentSettings,
    builtin_workload,
    configs_from_specs,
    format_levels,
    format_quality,
    format_winners,
    load_dataset,
    load_experiment,
    new_experiment,
    parse_config_text,
    plan_lines,
    run_experiment,
)
from workbench.experiment.configs import ExperimentConfig, vary_configs
from workbench.experiment.quality import BUILTIN_TASK, QUALITY_MODES, QualitySettings
from workbench.experiment.results import REPORT_FILE, SUMMARY_FILE, default_output_dir
from workbench.experiment.runner import occupancy_before
from workbench.experiment.slo import SloSearch, parse_slos
from workbench.experiment.slo_report import format_slo
from workbench.recipes import Selection, load_catalog


MAX_CONCURRENCY = 4096


def _levels(text: str) -> list[int]:
    try:
        levels = [int(w) for w in text.replace(" ", "").split(",") if w]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of whole numbers, e.g. 1,4,16") from None
    if not levels or any(n < 1 or n > MAX_CONCURRENCY for n in levels):
        raise argparse.ArgumentTypeError(f"{text!r}: give concurrency levels from 1 to {MAX_CONCURRENCY}, e.g. 1,4,16")
    return sorted(set(levels))


def _temperature(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 <= value <= 2:
        raise argparse.ArgumentTypeError("the temperature is between 0 and 2")
    return value


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "experiment",
        help="compare configurations (e.g. speculative decoding on/off) across concurrency levels; one report",
        description="Launch each configuration in turn, run the same concurrency sweep with the same prompts, "
        "and write one report: the winners per concurrency (per-user decode, TTFT, total output, goodput), "
        "where speculative decoding stops paying, acceptance per category and draft position.",
    )
    add_selection_arguments(p, port="same")
    p.add_argument("--config", action="append", default=[], metavar="LABEL:SPEC[:FLAGS]",
                   help="a configuration: its label, its spec mode (off for none) and extra vllm serve flags; "
                   "repeatable, and added to those of --spec")
    p.add_argument("--vary", action="append", default=[], metavar="LABEL=FLAGS",
                   help="a configuration that differs only by extra vllm serve flags, e.g. "
                   "'ssm16=--mamba-ssm-cache-dtype float16'; repeatable, one per --spec mode")
    p.add_argument("--quality", choices=QUALITY_MODES, default="quick",
                   help="after each sweep, check the answers on the same server: agreement with the reference at "
                   "temperature 0 and accuracy on an lm-eval task (quick: a subset, about a minute per "
                   "configuration on the CPU engine; full: every prompt and item; default quick)")
    p.add_argument("--quality-task", default=BUILTIN_TASK, metavar="NAME",
                   help=f"the lm-eval task for accuracy (default {BUILTIN_TASK}, shipped with the workbench; "
                   "any task lm-eval has here, e.g. gsm8k, or a task YAML file)")
    p.add_argument("--reference", metavar="LABEL", help="the configuration the others' answers are compared with "
                   "(default: the first)")
    p.add_argument("--concurrency", type=_levels, metavar="1,4,16",
                   help="concurrency levels of the sweep (default 1,4,16; none with --slo unless given)")
    p.add_argument("--requests", type=at_least(1), help="measured requests per level "
                   "(default: the workload's prompt count, or 2 x concurrency if more)")
    p.add_argument("--osl", type=at_least(1), default=128, help="output tokens per request (default 128; "
                   "a dataset line's output_tokens wins)")
    p.add_argument("--warmup", type=at_least(0), default=1, help="warm-up requests per level (default 1)")
    p.add_argument("--temperature", type=_temperature, default=0.0, help="sampling temperature (default 0)")
    p.add_argument("--goodput", nargs="+", metavar="KEY:VALUE", help="SLOs for goodput, e.g. ttft:500 tpot:50")
    p.add_argument("--slo", nargs="+", metavar="FIGURE_STAT:BOUND",
                   help="search each configuration's capacity within these objectives, e.g. ttft_p90:500 "
                   "tpot_p90:25 (ttft, ttfo, tpot, e2e, itl in ms, at most; decode in tok/s per user, at least; "
                   "pNN = NN %% of requests, or mean)")
    p.add_argument("--slo-by", choices=["concurrency", "rate"], default="concurrency",
                   help="search by concurrency (users, closed loop; default) or by request rate (Poisson arrivals)")
    p.add_argument("--max-concurrency", type=at_least(1),
                   help="the highest concurrency the SLO search tries (by rate: the most requests in flight; "
                   "default 256)")
    p.add_argument("--max-rate", type=positive_float, help="the highest request rate the search by rate tries (req/s)")
    p.add_argument("--max-probes", type=at_least(1), help="the SLO search's probe budget per "
                   "configuration (default 16)")
    p.add_argument("--dataset", type=Path, help="your prompts: JSONL, one {\"prompt\", \"category\", "
                   "\"output_tokens\"} a line (default: the built-in workload)")
    p.add_argument("--attach", metavar="URL", help="measure the server already running at URL (one configuration)")
    p.add_argument("--label", default="attached", help="the attached server's label (with --attach)")
    p.add_argument("--startup-timeout", type=at_least(1), default=900, help="seconds a server may take to start")
    p.add_argument("--output-dir", type=Path, help="where results go (default experiments/<time>)")
    p.add_argument("--resume", type=Path, metavar="DIR", help="continue the experiment in DIR")
    p.add_argument("--quiet", action="store_true", help="no progress line")
    p.set_defaults(func=experiment_command)


class _ProgressLine:
    """One line, rewritten in place on a terminal; a new line per phase change elsewhere."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self.last = 0.0
        self.last_phase: tuple[str, int | None, str] | None = None

    def __call__(self, p: ExperimentProgress) -> None:
        key = (p.config, p.concurrency, p.phase)
        now = time.monotonic()
        if self.tty:
            if key == self.last_phase and now - self.last < 0.2:
                return
            bar = ""
            if p.total:
                filled = int(20 * p.done / p.total)
                bar = "[" + "#" * filled + "." * (20 - filled) + "] "
            self.stream.write("\r\033[K" + bar + p.line()[:150])
        elif key != self.last_phase or (p.total and p.done == p.total):
            self.stream.write(p.line() + "\n")
        else:
            return
        self.stream.flush()
        self.last, self.last_phase = now, key

    def end(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()


def _base_selection(args: argparse.Namespace) -> Selection:
    spec = args.spec
    args.spec = None
    try:
        return selection_from_args(args)
    finally:
        args.spec = spec


def _configs(args: argparse.Namespace) -> list[ExperimentConfig]:
    catalog = load_catalog()
    base = _base_selection(args)
    if args.vary:
        configs = vary_configs(args.spec, args.vary, base, catalog)
    else:
        configs = configs_from_specs(args.spec, base, catalog) if args.spec else []
    for text in args.config:
        config = parse_config_text(text, base, catalog)
        if any(c.label == config.label for c in configs):
            raise InputError(f"Two configurations are labelled {config.label!r}.", hint="Give each its own label.")
        configs.append(config)
    if not configs:
        raise InputError("No configuration to compare.",
                         hint="Give --spec off,ngram (the recipe's spec modes) or --config LABEL:SPEC[:FLAGS], "
                         "or --attach URL for a server you started.")
    if args.reference is not None and all(c.label != args.reference for c in configs):
        raise InputError(f"--reference {args.reference!r} names no configuration.",
                         hint="Give one of: " + ", ".join(c.label for c in configs) + ".", settings=("reference",))
    return configs


def _search(args: argparse.Namespace) -> SloSearch | None:
    given = [flag for flag, value in (("--slo-by", args.slo_by != "concurrency" or None),
                                      ("--max-concurrency", args.max_concurrency), ("--max-rate", args.max_rate),
                                      ("--max-probes", args.max_probes)) if value is not None]
    if not args.slo:
        if given:
            raise InputError(f"{', '.join(given)} set the SLO search, and no --slo was given.",
                             hint="Add the objectives, e.g. --slo ttft_p90:500 tpot_p90:25, or drop "
                             f"{', '.join(given)}.")
        return None
    if args.max_rate is not None and args.slo_by != "rate":
        raise InputError("--max-rate bounds the search by rate.", hint="Add --slo-by rate, or drop --max-rate.")
    return SloSearch(parse_slos(args.slo), args.slo_by, args.max_concurrency or 256, args.max_rate,
                     args.max_probes or 16)


def experiment_command(args: argparse.Namespace) -> int:
    catalog = load_catalog()
    if args.resume:
        result = load_experiment(args.resume)
        out = args.resume
        print(f"Resuming {out}: configurations and settings as saved.", file=sys.stderr)
    else:
        search = _search(args)
        settings = ExperimentSettings(
            concurrency=args.concurrency or ([] if search else [1, 4, 16]), requests_per_level=args.requests,
            output_tokens=args.osl, warmup_requests=args.warmup, temperature=args.temperature,
            goodput=parse_goodput(args.goodput), startup_timeout_s=float(args.startup_timeout),
            attach_url=args.attach, slo=None if search is None else search.to_dict(),
            quality=QualitySettings(args.quality, task=args.quality_task, reference=args.reference))
        if args.attach:
            if args.spec or args.config or args.vary:
                raise InputError("--attach measures one server you started; --spec, --config and --vary launch "
                                 "servers.", hint="Drop --spec/--config/--vary, or drop --attach.")
            if args.reference not in (None, args.label):
                raise InputError(f"--reference {args.reference!r} names no configuration: --attach measures one, "
                                 f"labelled {args.label!r}.", hint="Drop --reference.")
            configs = [ExperimentConfig(args.label, Selection())]
        else:
            configs = _configs(args)
        workload = load_dataset(args.dataset) if args.dataset else builtin_workload()
        out = args.output_dir or default_output_dir()
        if (out / SUMMARY_FILE).exists():
            raise InputError(f"{out} already holds an experiment.",
                             hint=f"Continue it with --resume {out}, or choose another --output-dir.")
        if out.is_dir() and any(out.iterdir()):
            raise InputError(f"--output-dir {out} is not empty.", hint="Give a new or empty folder for the results.")
        result = new_experiment(configs, settings, workload)
    port = None if args.resume or args.server_port in (None, 8000) else args.server_port
    # Before any folder is made or server started: a GPU already held refuses (the runner checks again).
    occupancy = occupancy_before(result, catalog, port=port)
    if occupancy is not None and occupancy.blocking:
        raise occupancy.error()
    if not args.resume:
        check_output_dir(out)
    for line in plan_lines(result):
        print(line, file=sys.stderr)
    progress = None if args.quiet else _ProgressLine(sys.stderr)
    try:
        result = run_experiment(result, out, catalog, progress=progress, port=port)
    finally:
        if progress:
            progress.end()
    slo = format_slo(result)
    if slo is not None:  # the answer first
        print(slo)
    if result.settings.concurrency:
        print("\n" + format_levels(result) if slo else format_levels(result))
        print()
        print(format_winners(result))
    quality = format_quality(result)
    if quality:
        print()
        print(quality)
    for c in result.configs:
        if c.status == "failed" and c.diagnosis:
            print(f"\n{c.label}: FAILED to launch: {c.diagnosis.get('summary')}\n  {c.diagnosis.get('fix') or ''}")
    print(f"\nwrote {out / SUMMARY_FILE} and {out / REPORT_FILE}")
    if result.status == "partial":
        print(f"PARTIAL: {result.partial}; continue with: python -m workbench experiment --resume {out}",
              file=sys.stderr)
        return 130
    return 1 if any(c.status == "failed" for c in result.configs) else 0


__all__ = ["experiment_command", "register"]

"""Run an experiment: for each configuration, launch (or attach), sweep, stop; then the next.

For each configuration in turn: render its plan, launch it on the experiment's one
port (or use the server at --attach URL), wait until ready, then at each concurrency
level run the same workload through `workbench.bench.run_benchmark` (a warm-up, the
/metrics counters read before and after the measured requests), then the SLO search's
probes if one was asked for (workbench.experiment.slo decides each level), write the
results, and stop the server before the next configuration. With a quality pass
(ExperimentSettings.quality), the same server then answers the agreement prompts and
lm-eval's task before it is stopped (quality_run.py).

Before anything starts, what already holds the machine is looked for (occupancy.py): on a
GPU a running server or GPU memory in use refuses the experiment (LaunchError, with the
ways on); on the CPU engine the servers start beside a running one, said in the log.

Nothing is lost: a configuration that fails to launch is recorded as failed with its
diagnosis and the experiment goes on; results are written after every level; Ctrl-C
(or `should_stop`) stops the running server and writes what was measured, marked
partial; `resume` continues from the levels already done.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import math
import os
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import httpx

from workbench.bench import BenchConfig, BenchProgress, run_benchmark
from workbench.bench.results import BenchResult
from workbench.errors import BenchStopped, LaunchError, StopReason, WorkbenchError
from workbench.experiment.configs import ExperimentConfig, render_config
from workbench.experiment.occupancy import Occupancy, check_occupancy
from workbench.experiment.quality_run import QualityProgress, guess_seconds, measure_quality
from workbench.experiment.results import ConfigResult, ExperimentResult, ExperimentSettings
from workbench.experiment.report import report_html
from workbench.experiment.slo import SloSearch, Step, next_step, probes_left, run_search
from workbench.experiment.workloads import Workload
from workbench.recipes import Catalog, LaunchPlan
from workbench import server
from workbench.server import ServerEvent, ServerProcess, free_port, port_free
from workbench.server.command import PlanLike
from workbench.server.readiness import NotReady, ReadyOutcome
from workbench.server.hardware import detect_hardware
from workbench.server.page_flags import vllm_flag_table

__all__ = ["PACES", "PER_REQUEST_SPEC_FLAG", "ExperimentProgress", "Pace", "estimate_seconds", "guess_pace",
           "machine_facts", "new_experiment", "occupancy_before", "plan_lines", "run_experiment"]

log = logging.getLogger("workbench.experiment")

PER_REQUEST_SPEC_FLAG = "--per-request-spec-decode-metrics"


@dataclass(frozen=True)
class Pace:
    """A guess for the plan's estimate before anything is measured (per-user decode at concurrency 1,
    seconds to start a server), what it is based on; replaced by measured figures as levels finish."""

    decode_tps: float
    launch_s: float
    basis: str


# Measured with the SmolLM2 demo recipe: on this project's 2-core CI machine (vLLM's CPU build), and on an
# H100 80GB with vLLM 0.26.0 (tests/fixtures/vllm-0.26.0-cuda-h100/: 52 tok/s eager, 693 with CUDA graphs;
# ready in 50-60 s warm, 90-125 s with torch.compile and graph capture).
PACES = {
    "cpu": Pace(25.0, 45.0, "vLLM's CPU build, eager"),
    "gpu_eager": Pace(50.0, 60.0, "a GPU, eager"),
    "gpu_graphs": Pace(600.0, 100.0, "a GPU with CUDA graphs"),
}


def guess_pace(machine_hardware: str | None, config: ExperimentConfig) -> Pace:
    """The pace to guess for `config` on this machine: the CPU's, or a GPU's (eager or with CUDA graphs)."""
    if (machine_hardware or "cpu") == "cpu" or config.selection.hardware == "cpu":
        return PACES["cpu"]
    extra = " ".join(config.selection.extra)
    return PACES["gpu_eager"] if "--enforce-eager" in extra.split() else PACES["gpu_graphs"]


@dataclass(frozen=True)
class ExperimentProgress:
    config: str
    config_index: int  # 1-based
    configs: int
    concurrency: int | None
    level_index: int  # 1-based; 0 while launching
    levels: int
    phase: str  # launching, warmup, running, agreement, accuracy (the quality pass), stopping, failed, done
    done: int = 0
    total: int | None = None
    eta_s: float | None = None
    message: str = ""
    step: str = "level"  # "probe" while an SLO search runs (levels: its probe budget)

    def line(self) -> str:
        where = f"[{self.config_index}/{self.configs}] {self.config}"
        if self.concurrency is not None:
            where += f" · concurrency {self.concurrency} ({self.step} {self.level_index}/{self.levels})"
        count = f" {self.done}/{self.total}" if self.total else ""
        eta = "" if self.eta_s is None else f" · ETA {_clock(self.eta_s)}"
        tail = f" · {self.message}" if self.message else ""
        return f"{where} · {self.phase}{count}{eta}{tail}"


def _clock(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


ProgressFn = Callable[[ExperimentProgress], None]
StopFn = Callable[[], bool]


def machine_facts() -> dict[str, Any]:
    """What the report says about the machine the client ran on."""
    detection = detect_hardware()
    memory_gb = None
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    memory_gb = round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return {"hardware": detection.hardware_id, "gpus": [g.name for g in detection.gpus],
            "cpu": platform.processor() or platform.machine(), "cpu_cores": os.cpu_count(),
            "memory_gb": memory_gb, "python": platform.python_version(), "platform": platform.platform()}


def new_experiment(configs: list[ExperimentConfig], settings: ExperimentSettings, workload: Workload) -> ExperimentResult:
    return ExperimentResult(settings=settings, workload=workload, configs=[ConfigResult(c) for c in configs],
                            machine=machine_facts(),
                            started_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"))


def _output_tokens(workload: Workload, settings: ExperimentSettings) -> float:
    return sum(p.output_tokens or settings.output_tokens for p in workload.prompts) / len(workload.prompts)


def _level_seconds(settings: ExperimentSettings, workload: Workload, concurrency: int, decode_tps: float) -> float:
    requests = settings.requests_at(concurrency, len(workload.prompts)) + settings.warmup_requests
    rounds = math.ceil(requests / concurrency)
    # Per-user decode slows as concurrency grows on a saturated machine: a square-root guess.
    return rounds * _output_tokens(workload, settings) / (decode_tps / math.sqrt(concurrency))


def _search_seconds(result: ExperimentResult, c: ConfigResult, decode_tps: float) -> float:
    """The SLO search's probes still to run, each guessed as long as the next one."""
    search = result.settings.search()
    step = None if search is None else next_step(search, c.probes)
    if search is None or step is None:
        return 0.0
    if step.rate:
        requests = step.rate_requests(result.settings.requests_per_level, len(result.workload.prompts))
        per_probe = requests / step.rate + _output_tokens(result.workload, result.settings) / decode_tps
    else:
        per_probe = _level_seconds(result.settings, result.workload, step.concurrency, decode_tps)
    return probes_left(search, c.probes) * per_probe


def _first_pace(result: ExperimentResult) -> Pace:
    return guess_pace(result.machine.get("hardware"), result.configs[0].config) if result.configs else PACES["cpu"]


def quality_seconds(result: ExperimentResult, decode_tps: float | None = None) -> float:
    """A guess of one configuration's quality pass (0 when it is off)."""
    s = result.settings
    return guess_seconds(s.quality, len(result.workload.prompts), s.output_tokens,
                         decode_tps or _first_pace(result).decode_tps)


def estimate_seconds(result: ExperimentResult, decode_tps: float | None = None,
                     launch_s: float | None = None, quality_s: float | None = None) -> float:
    """Time left: each configuration's launch, its levels not yet done and its quality pass. Measured
    figures where given (`decode_tps`, `launch_s`, `quality_s`: the last pass's time), else each
    configuration's guessed pace on this machine."""
    total = 0.0
    each_quality = quality_seconds(result, decode_tps) if quality_s is None else quality_s
    for c in result.configs:
        if c.status in ("done", "failed"):
            continue
        if result.settings.quality.on and c.quality is None:
            total += each_quality
        todo = [n for n in result.settings.concurrency if n not in c.done_levels()]
        pace = guess_pace(result.machine.get("hardware"), c.config)
        search_s = _search_seconds(result, c, decode_tps or pace.decode_tps)
        if not todo and not search_s:
            continue
        total += 0.0 if result.settings.attach_url else (launch_s or pace.launch_s)
        total += sum(_level_seconds(result.settings, result.workload, n, decode_tps or pace.decode_tps)
                     for n in todo) + search_s
    return total


def plan_lines(result: ExperimentResult) -> list[str]:
    """The plan shown before anything starts: configurations x levels x requests, and the estimate."""
    s = result.settings
    prompts = len(result.workload.prompts)
    per_level = ", ".join(f"c={n}: {s.requests_at(n, prompts)}" for n in s.concurrency)
    sweep = (f"{len(s.concurrency)} level(s) (concurrency {', '.join(map(str, s.concurrency))}); requests per level "
             f"{per_level}" if s.concurrency else "an SLO search (no fixed levels); requests per probe: "
             + (f"{s.requests_per_level} (or the concurrency, if more)" if s.requests_per_level is not None
                else "the workload's prompts, or 2 x concurrency if more"))
    lines = [f"Experiment: {len(result.configs)} configuration(s) x {sweep} "
             f"(+{s.warmup_requests} warm-up); workload {result.workload.name} "
             f"({prompts} prompts: {', '.join(result.workload.categories)}), {s.output_tokens} output tokens, "
             f"temperature {s.temperature:g}."]
    search = s.search()
    if search is not None:
        lines.append(search.describe())
    for c in result.configs:
        done = sorted(c.done_levels())
        state = f" [{c.status}{', levels done: ' + ', '.join(map(str, done)) if done else ''}]" \
            if c.status != "pending" else ""
        lines.append(f"  {c.label}{state}")
    q = s.quality
    if q.on:
        reference = q.reference or (result.configs[0].label if result.configs else "-")
        items = q.items_limit()
        lines.append(f"Quality ({q.mode}): after each sweep, agreement with {reference} on "
                     f"{q.prompts_for(prompts)} prompt(s) x {q.tokens_for(s.output_tokens)} tokens at temperature 0, "
                     f"one at a time; accuracy on {'every item' if items is None else f'{items} items'} of {q.task} "
                     f"through lm-eval; about {_clock(quality_seconds(result))} per configuration (a guess).")
    paces = sorted({guess_pace(result.machine.get("hardware"), c.config) for c in result.configs},
                   key=lambda p: p.decode_tps)
    guess = "; ".join(f"{p.decode_tps:g} tok/s per user at concurrency 1 and {p.launch_s:g} s per launch on "
                      f"{p.basis}" for p in paces)
    lines.append(f"Estimate: about {_clock(estimate_seconds(result))} (a guess of {guess}, measured with the "
                 f"SmolLM2 demo model; the ETA is refined as levels finish).")
    return lines


def _with_per_request_metrics(plan: LaunchPlan, speculative: bool) -> LaunchPlan:
    """Ask vLLM for per-request acceptance when it has the flag (the local vLLM's --help says so)."""
    if not speculative or PER_REQUEST_SPEC_FLAG in plan.argv:
        return plan
    table = vllm_flag_table(run=True)
    if table is None or PER_REQUEST_SPEC_FLAG not in table:
        log.info("vLLM here has no %s: acceptance comes from /metrics only", PER_REQUEST_SPEC_FLAG)
        return plan
    return dataclasses.replace(plan, argv=[*plan.argv, PER_REQUEST_SPEC_FLAG, "summary"],
                               provenance={**plan.provenance, PER_REQUEST_SPEC_FLAG: "experiment"})


def _vllm_version(base_url: str) -> str | None:
    try:
        answer = httpx.get(f"{base_url}/version", timeout=5.0)
        version = answer.json().get("version") if answer.status_code == 200 else None
        return str(version) if version else None
    except (httpx.HTTPError, ValueError, AttributeError):
        return None


class _Interrupted(Exception):
    """Ctrl-C or should_stop while a server was starting or a level ran: `reason`, and the words."""

    def __init__(self, reason: StopReason, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class _Run:
    """One experiment in progress: the bookkeeping around each configuration."""

    def __init__(self, result: ExperimentResult, directory: Path, catalog: Catalog, progress: ProgressFn | None,
                 should_stop: StopFn | None, state_dir: Path | str | None, port: int | None) -> None:
        self.result, self.directory, self.catalog = result, directory, catalog
        self.progress, self.should_stop, self.state_dir = progress, should_stop, state_dir
        self.port = port
        self.measured_tps: float | None = None
        self.launch_s: float | None = None
        self.quality_s: float | None = None  # the last quality pass's measured time
        self.quality_started: float | None = None

    def emit(self, index: int, c: ConfigResult, phase: str, concurrency: int | None = None, level: int = 0,
             done: int = 0, total: int | None = None, message: str = "", probes: int | None = None) -> None:
        if self.progress is None:
            return
        eta = estimate_seconds(self.result, self.measured_tps, self.launch_s, self.quality_s)
        if self.quality_started is not None:  # the running pass (its configuration's sweep is done): what is left
            whole = self.quality_s if self.quality_s is not None else quality_seconds(self.result, self.measured_tps)
            eta += max(0.0, whole - (time.monotonic() - self.quality_started))
        levels = len(self.result.settings.concurrency) if probes is None else probes
        self.progress(ExperimentProgress(c.label, index, len(self.result.configs), concurrency, level, levels, phase,
                                         done, total, eta, message, "level" if probes is None else "probe"))

    def save(self) -> None:
        self.result.save(self.directory, report_html(self.result))

    def stopped(self) -> bool:
        return self.should_stop is not None and self.should_stop()

    def start_server(self, index: int, c: ConfigResult) -> ServerProcess:
        settings = self.result.settings
        if settings.attach_url:
            handle = server.attach(settings.attach_url, state_dir=self.state_dir)
            c.command = f"(attached: a server started elsewhere, at {handle.base_url})"
            return handle
        plan = _with_per_request_metrics(render_config(c.config, self.catalog), c.config.spec is not None)
        c.command, c.plan = plan.shell_command(multiline=False), plan.to_dict()
        if self.port is None:
            self.port = plan.port if port_free("127.0.0.1", plan.port) else free_port()
        self.emit(index, c, "launching", message=f"port {self.port}")
        started = time.monotonic()
        # cast: PlanLike declares `engine: str`, LaunchPlan narrows it to a Literal (the same value).
        handle = server.launch(cast("PlanLike", plan), port=self.port, state_dir=self.state_dir, progress=lambda m: log.info("%s", m))

        def on_event(event: ServerEvent) -> None:
            if event.kind == "phase" and event.phase is not None:
                self.emit(index, c, "launching", message=f"{event.phase.label}, {time.monotonic() - started:.0f} s")

        unsubscribe = handle.subscribe(on_event, replay=False)
        try:
            handle.wait_ready(settings.startup_timeout_s, stop=self.stopped)
        except NotReady as exc:
            handle.stop()
            if exc.outcome is ReadyOutcome.STOPPED and self.stopped():
                raise _Interrupted(StopReason.USER, "stopped by the user while the server started") from exc
            raise
        except BaseException:
            handle.stop()
            raise
        finally:
            unsubscribe()
        self.launch_s = time.monotonic() - started
        return handle

    def run_config(self, index: int, c: ConfigResult) -> None:
        settings = self.result.settings
        try:
            handle = self.start_server(index, c)
        except LaunchError as exc:
            c.status = "failed"
            # Its own diagnosis: the one this launch's wait found, never an earlier configuration's.
            found = exc.diagnosis if isinstance(exc, NotReady) else None
            c.diagnosis = {"summary": exc.message, "fix": exc.hint, **(found.to_dict() if found else {})}
            log.warning("configuration %s failed to launch: %s", c.label, exc.message)
            self.emit(index, c, "failed", message=exc.message)
            self.save()
            return
        except WorkbenchError as exc:  # a plan that cannot run here (no vLLM, wrong engine)
            c.status = "failed"
            c.diagnosis = {"summary": exc.message, "fix": exc.hint}
            self.emit(index, c, "failed", message=exc.message)
            self.save()
            return
        c.status = "running"
        c.server = {"base_url": handle.base_url, "vllm_version": _vllm_version(handle.base_url),
                    "time_to_ready_s": handle.time_to_ready_s, "mode": handle.mode}
        self.save()
        try:
            self.sweep(index, c, handle)
            if settings.quality.on:
                self.check_quality(index, c, handle)
        finally:
            self.emit(index, c, "stopping")
            handle.stop()

    def check_quality(self, index: int, c: ConfigResult, handle: ServerProcess) -> None:
        """The quality pass on the same server; its problems are recorded, never raised (the
        speed figures are saved already). A stop during it ends the experiment, partial."""
        settings = self.result.settings

        def on_progress(p: QualityProgress) -> None:
            self.emit(index, c, p.phase, done=p.done, total=p.total, message=p.message)

        self.quality_started = time.monotonic()
        try:
            c.quality = measure_quality(handle.base_url, handle.model, self.result.workload.prompts, settings.quality,
                                        settings.output_tokens, self.directory / "quality", c.label, on_progress,
                                        self.should_stop)
        except KeyboardInterrupt as exc:
            raise _Interrupted(StopReason.INTERRUPTED, "interrupted (Ctrl-C) during the quality pass") from exc
        finally:
            self.quality_started = None
        self.quality_s = c.quality.seconds
        self.save()
        if c.quality.status == "partial" and self.stopped():
            c.status = "partial"
            raise _Interrupted(StopReason.USER, "stopped by the user during the quality pass")

    def sweep(self, index: int, c: ConfigResult, handle: ServerProcess) -> None:
        settings = self.result.settings
        prompts = self.result.workload.bench_prompts()
        for number, concurrency in enumerate(settings.concurrency, 1):
            if concurrency in c.done_levels():
                continue
            if self.stopped():
                raise _Interrupted(StopReason.USER, "stopped by the user")
            requests = settings.requests_at(concurrency, len(prompts))
            config = BenchConfig(url=handle.base_url, output_tokens=settings.output_tokens, concurrency=concurrency,
                                 requests=requests, warmup_requests=settings.warmup_requests,
                                 label=f"{c.label} @ {concurrency}", goodput=settings.goodput, prompts=prompts,
                                 extra_body={"temperature": settings.temperature}, model=handle.model)

            def on_progress(p: BenchProgress, n: int = number, conc: int = concurrency) -> None:
                self.emit(index, c, p.phase, conc, n, p.done, p.total)

            try:
                level = run_benchmark(config, on_progress, self.should_stop)
            except KeyboardInterrupt as exc:
                raise _Interrupted(StopReason.INTERRUPTED, "interrupted (Ctrl-C)") from exc
            except BenchStopped as exc:  # the warm-up was cut: by a person, the experiment ends
                if exc.reason.by_user:
                    raise _Interrupted(exc.reason, exc.message) from exc
                c.status, c.note = "partial", f"concurrency {concurrency}: {exc.message}"
                self.save()
                return
            except WorkbenchError as exc:
                c.status, c.note = "partial", f"concurrency {concurrency}: {exc.message}"
                self.save()
                return
            c.levels = [r for r in c.levels if r.config.concurrency != concurrency] + [level]
            c.levels.sort(key=lambda r: r.config.concurrency)
            decode = level.summary.decode_tok_s_per_user.mean
            if decode:
                self.measured_tps = decode * math.sqrt(concurrency)
            if level.partial is not None:
                c.status, c.note = "partial", f"concurrency {concurrency}: {level.partial}"
                self.save()
                if level.stop_reason is not None and level.stop_reason.by_user:
                    raise _Interrupted(level.stop_reason, level.partial)
                return
            self.save()
        search = settings.search()
        if search is not None and not self.search(index, c, handle, search):
            return
        c.status = "done"
        self.save()

    def search(self, index: int, c: ConfigResult, handle: ServerProcess, search: SloSearch) -> bool:
        """The SLO search's probes on this server; False when one was cut short (c.note says why)."""
        settings = self.result.settings
        prompts = self.result.workload.bench_prompts()

        measured: list[BenchResult] = []

        def measure(step: Step, number: int) -> BenchResult:
            if self.stopped():
                raise _Interrupted(StopReason.USER, "stopped by the user")
            requests = (settings.requests_at(step.concurrency, len(prompts)) if step.rate is None
                        else step.rate_requests(settings.requests_per_level, len(prompts)))
            config = BenchConfig(url=handle.base_url, output_tokens=settings.output_tokens, concurrency=step.concurrency,
                                 request_rate=step.rate, requests=requests, warmup_requests=settings.warmup_requests,
                                 label=f"{c.label} @ {step.load()}", goodput=settings.goodput, prompts=prompts,
                                 extra_body={"temperature": settings.temperature}, model=handle.model)

            def on_progress(p: BenchProgress) -> None:
                self.emit(index, c, p.phase, None if step.rate else step.concurrency, number, p.done, p.total,
                          f"SLO search: {step.load()}", probes=search.max_probes)

            try:
                level = run_benchmark(config, on_progress, self.should_stop)
            except KeyboardInterrupt as exc:
                raise _Interrupted(StopReason.INTERRUPTED, "interrupted (Ctrl-C)") from exc
            except BenchStopped as exc:  # a person ends the experiment; a server gone fails the probe
                if exc.reason.by_user:
                    raise _Interrupted(exc.reason, exc.message) from exc
                raise
            measured.append(level)
            decode = level.summary.decode_tok_s_per_user.mean
            if decode and step.rate is None:
                self.measured_tps = decode * math.sqrt(step.concurrency)
            return level

        def reuse(concurrency: int) -> BenchResult | None:
            return next((r for r in c.levels if r.config.concurrency == concurrency and r.partial is None
                         and r.config.request_rate is None), None)

        ended = run_search(search, c.probes, measure, reuse, self.save)
        if ended is None:
            return True
        c.status, c.note = "partial", f"SLO search: {ended}"
        self.save()
        reason = measured[-1].stop_reason if measured else None
        if reason is not None and reason.by_user:
            raise _Interrupted(reason, ended)
        return False


def occupancy_before(result: ExperimentResult, catalog: Catalog, *, port: int | None = None,
                     state_dir: Path | str | None = None) -> Occupancy | None:
    """What holds the machine for the configurations still to run (None when attaching: nothing
    is launched then). Configurations that do not render are left to the run, which records why."""
    if result.settings.attach_url:
        return None
    plans = []
    for c in result.configs:
        if c.status in ("done", "failed"):
            continue
        try:
            plans.append(render_config(c.config, catalog))
        except WorkbenchError:
            continue
    if not plans:
        return None
    return check_occupancy(plans, catalog, port=port or plans[0].port, state_dir=state_dir)


def run_experiment(result: ExperimentResult, directory: Path | str, catalog: Catalog, *,
                   progress: ProgressFn | None = None, should_stop: StopFn | None = None,
                   state_dir: Path | str | None = None, port: int | None = None) -> ExperimentResult:
    """Run every configuration not yet done (a fresh experiment, or one being resumed).

    Returns the result, also written to `directory` after every level; `status` is
    "partial" when Ctrl-C or `should_stop` ended it (the running server is stopped first).
    Raises LaunchError before anything starts when a GPU experiment finds the GPU held.
    """
    occupancy = occupancy_before(result, catalog, port=port, state_dir=state_dir)
    if occupancy is not None and occupancy.blocking:
        raise occupancy.error()
    for line in occupancy.lines() if occupancy is not None else []:
        log.warning("%s", line)
    run = _Run(result, Path(directory), catalog, progress, should_stop, state_dir, port)
    result.status, result.partial = "running", None
    run.save()
    try:
        for index, c in enumerate(result.configs, 1):
            if c.status in ("done", "failed"):
                continue
            try:
                run.run_config(index, c)
            except (_Interrupted, KeyboardInterrupt) as exc:
                reason = str(exc) or "interrupted (Ctrl-C)"
                c.status = "partial"
                c.note = c.note or reason
                result.status, result.partial = "partial", f"{c.label}: {reason}"
                break
    finally:
        if result.status == "running":
            result.status = "done"
        run.save()
    return result

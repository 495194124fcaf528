"""Run an experiment: for each configuration, launch (or attach), sweep, stop; then the next.

For each configuration in turn: render its plan, launch it on the experiment's one
port (or use the server at --attach URL), wait until ready, then at each concurrency
level run the same workload through `workbench.bench.run_benchmark` (a warm-up, the
/metrics counters read before and after the measured requests), then the SLO search's
probes if one was asked for (workbench.experiment.slo decides each level), write the
results, and stop the server before the next configuration.

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
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import httpx

from workbench.bench import BenchConfig, BenchProgress, run_benchmark
from workbench.bench.results import BenchResult
from workbench.errors import LaunchError, WarmupEndedError, WorkbenchError
from workbench.experiment.configs import ExperimentConfig, render_config
from workbench.experiment.results import ConfigResult, ExperimentResult, ExperimentSettings
from workbench.experiment.report import report_html
from workbench.experiment.slo import SloSearch, Step, next_step, probes_left, run_search
from workbench.experiment.workloads import Workload
from workbench.recipes import Catalog, LaunchPlan
from workbench import server
from workbench.server import ServerProcess, free_port, port_free
from workbench.server.command import PlanLike
from workbench.server.hardware import detect_hardware
from workbench.server.page_flags import vllm_flag_table

__all__ = ["PER_REQUEST_SPEC_FLAG", "ExperimentProgress", "estimate_seconds", "machine_facts", "new_experiment",
           "plan_lines", "run_experiment"]

log = logging.getLogger("workbench.experiment")

PER_REQUEST_SPEC_FLAG = "--per-request-spec-decode-metrics"
# Guesses for the plan's estimate before anything is measured; replaced by measured figures as levels finish.
_GUESS_LAUNCH_S = 45.0
_GUESS_DECODE_TPS = 25.0


@dataclass(frozen=True)
class ExperimentProgress:
    config: str
    config_index: int  # 1-based
    configs: int
    concurrency: int | None
    level_index: int  # 1-based; 0 while launching
    levels: int
    phase: str  # launching, warmup, running, stopping, failed, done
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
    import os

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


def estimate_seconds(result: ExperimentResult, decode_tps: float = _GUESS_DECODE_TPS,
                     launch_s: float = _GUESS_LAUNCH_S) -> float:
    """Time left: each configuration's launch and its levels not yet done (a rough guess, said so)."""
    total = 0.0
    for c in result.configs:
        if c.status in ("done", "failed"):
            continue
        todo = [n for n in result.settings.concurrency if n not in c.done_levels()]
        search_s = _search_seconds(result, c, decode_tps)
        if not todo and not search_s:
            continue
        total += 0.0 if result.settings.attach_url else launch_s
        total += sum(_level_seconds(result.settings, result.workload, n, decode_tps) for n in todo) + search_s
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
    lines.append(f"Estimate: about {_clock(estimate_seconds(result))} (a guess of {_GUESS_DECODE_TPS:g} tok/s per user "
                 f"at concurrency 1 and {_GUESS_LAUNCH_S:g} s per launch; the ETA is refined as levels finish).")
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
    """Ctrl-C or should_stop while a server was starting or a level ran."""


class _Run:
    """One experiment in progress: the bookkeeping around each configuration."""

    def __init__(self, result: ExperimentResult, directory: Path, catalog: Catalog, progress: ProgressFn | None,
                 should_stop: StopFn | None, state_dir: Path | str | None, port: int | None) -> None:
        self.result, self.directory, self.catalog = result, directory, catalog
        self.progress, self.should_stop, self.state_dir = progress, should_stop, state_dir
        self.port = port
        self.measured_tps: float | None = None
        self.launch_s: float | None = None
        self.last_diagnosis: dict[str, Any] | None = None

    def emit(self, index: int, c: ConfigResult, phase: str, concurrency: int | None = None, level: int = 0,
             done: int = 0, total: int | None = None, message: str = "", probes: int | None = None) -> None:
        if self.progress is None:
            return
        eta = estimate_seconds(self.result, self.measured_tps or _GUESS_DECODE_TPS, self.launch_s or _GUESS_LAUNCH_S)
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
        try:
            while True:
                if self.stopped():
                    raise _Interrupted("stopped by the user while the server started")
                try:
                    handle.wait_ready(timeout=min(2.0, settings.startup_timeout_s))
                    break
                except LaunchError:
                    if handle.status.value not in ("starting",):
                        raise
                    if time.monotonic() - started > settings.startup_timeout_s:
                        raise
                    self.emit(index, c, "launching",
                              message=f"{handle.phase.value if handle.phase else 'starting'}, "
                              f"{time.monotonic() - started:.0f} s")
        except BaseException:
            self.last_diagnosis = handle.diagnosis.to_dict() if handle.diagnosis else None
            handle.stop()
            raise
        self.launch_s = time.monotonic() - started
        return handle

    def run_config(self, index: int, c: ConfigResult) -> None:
        settings = self.result.settings
        try:
            handle = self.start_server(index, c)
        except LaunchError as exc:
            c.status = "failed"
            c.diagnosis = {"summary": exc.message, "fix": exc.hint, **(self.last_diagnosis or {})}
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
        finally:
            self.emit(index, c, "stopping")
            handle.stop()

    def sweep(self, index: int, c: ConfigResult, handle: ServerProcess) -> None:
        settings = self.result.settings
        prompts = self.result.workload.bench_prompts()
        for number, concurrency in enumerate(settings.concurrency, 1):
            if concurrency in c.done_levels():
                continue
            if self.stopped():
                raise _Interrupted("stopped by the user")
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
                raise _Interrupted("interrupted (Ctrl-C)") from exc
            except WarmupEndedError as exc:  # the warm-up was cut: interrupted, or the server went away
                raise _Interrupted(exc.message) from exc
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
                if level.partial.startswith(("interrupted", "stopped")):
                    raise _Interrupted(level.partial)
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

        def measure(step: Step, number: int) -> BenchResult:
            if self.stopped():
                raise _Interrupted("stopped by the user")
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
                raise _Interrupted("interrupted (Ctrl-C)") from exc
            except WarmupEndedError as exc:
                raise _Interrupted(exc.message) from exc
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
        if ended.startswith(("interrupted", "stopped")):
            raise _Interrupted(ended)
        return False


def run_experiment(result: ExperimentResult, directory: Path | str, catalog: Catalog, *,
                   progress: ProgressFn | None = None, should_stop: StopFn | None = None,
                   state_dir: Path | str | None = None, port: int | None = None) -> ExperimentResult:
    """Run every configuration not yet done (a fresh experiment, or one being resumed).

    Returns the result, also written to `directory` after every level; `status` is
    "partial" when Ctrl-C or `should_stop` ended it (the running server is stopped first).
    """
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

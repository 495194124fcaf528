"""`ServerProcess`: the supervisor of one vLLM server, over whatever `Runtime` runs it.

It owns what every kind of server shares: the record (`ServerRecord`, saved on
each change), readiness (/health and /v1/models), start-up phases from the log,
events, the watcher thread and the staged stop's bookkeeping. What differs
between a local process group, a docker container, an attached URL and a
multi-node head is the runtime's (workbench.server.runtime).

A handle made by start()/launch() in this process is supervised by a watcher
thread: `status`, `phase`, `phases` and `events()` update live. A handle loaded
from a record (find_running, load_server) works out its status when asked
(`refresh()`), from the process table and HTTP.

A worker node of a multi-node deployment is followed by the same class: its
`Supervision` says what differs (no HTTP of its own to probe: the deployment
declares it ready; its diagnosis; where its record is kept; who stops it).
"""

from __future__ import annotations

import atexit
import dataclasses
import logging
import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from workbench.errors import LaunchError
from workbench.server.command import Mode
from workbench.server.diagnosis import Diagnosis, diagnose, known_issues_for_plan
from workbench.server.events import EventLog, ServerEvent, ServerEventKind
from workbench.server.logfile import LogFollower, log_tail, log_text
from workbench.server.phases import PhaseDetector, PhaseRecord, StartupPhase, Status
from workbench.server.ports import port_holder
from workbench.server.machine import installed_vllm
from workbench.server.probe import probe, tls_context
from workbench.server.process import STOP_TIMEOUT_S, StopResult, StopStage
from workbench.server.readiness import NotReady, ReadyOutcome
from workbench.server.record import ServerRecord, mark_stopping, read_record, save_record
from workbench.server.runtime import Runtime
from workbench.server.state import SECRET_ENV, STATE_FILE, redact_record

__all__ = ["STARTUP_TIMEOUT_S", "ServerEvent", "ServerEventKind", "ServerProcess", "StopCheck", "Supervision",
           "tls_context"]

log = logging.getLogger("workbench.server")

STARTUP_TIMEOUT_S = 900.0
POLL_S = 0.25
HEALTH_EVERY_S = 1.0
WATCH_EVERY_S = 5.0  # after ready: each probe is a line in vLLM's access log


StopCheck = Callable[[], bool]


@dataclass(frozen=True)
class Supervision:
    """What differs between following a server and following a worker node; the following
    itself (log, phases, status, diagnosis, events, the staged stop) is the same code.

    The defaults are a server's: ready when /health and /v1/models answer, diagnosed by the
    server rules, recorded in its folder's state.json, stopped elsewhere when that says so."""

    name: str | None = None  # how the log names it (default: "server <port>")
    probes_http: bool = True  # False: no HTTP of its own; `mark_ready` declares it ready
    diagnose: Callable[[str, int | None], Diagnosis] | None = None  # (its log, redacted; exit code) -> why
    save: Callable[[ServerRecord], None] | None = None  # where each change goes (default: state.json)
    stopped_elsewhere: StopCheck | None = None  # is a stop of it under way elsewhere? (its exit is no failure)


SERVER = Supervision()


def _url_host(host: str) -> str:
    # A server bound to all interfaces is reached on loopback from here.
    return {"0.0.0.0": "127.0.0.1", "::": "[::1]"}.get(host, f"[{host}]" if ":" in host else host)


class ServerProcess:
    """A vLLM server the workbench started (local, docker, several nodes) or attached to.

    `record` is how it started (frozen); `status`, `phases`, `exit_code`,
    `diagnosis` and `time_to_ready_s` are how it is doing (the supervisor's to
    change); `runtime` is how it runs."""

    def __init__(self, record: ServerRecord, state_dir: Path, runtime: Runtime,
                 supervision: Supervision = SERVER) -> None:
        self.state_dir = state_dir
        self.runtime = runtime
        self.supervision = supervision
        self.name = supervision.name or f"server {record.port}"
        self.record = record
        self.mode: Mode = record.mode
        self.port = record.port
        self.host = record.host
        self.model = record.served_model
        self.api_key = record.api_key
        self.pid = record.pid
        self.pgid = record.pgid
        self.argv = record.argv
        self.env = record.env
        self.plan = record.plan
        self.container_name = record.container_name
        self.started_at = record.started_at
        self.run_id = record.run_id
        self.base_url: str = record.base_url or f"http://{_url_host(self.host)}:{self.port}"
        self.log_path: Path | None = Path(record.log_path) if record.log_path else None
        # A stop that did not finish: check again.
        self.status = Status.STARTING if record.status is Status.STOPPING else record.status
        self.phases = [dataclasses.replace(p) for p in record.phases]
        self.time_to_ready_s = record.time_to_ready_s
        self.exit_code = record.exit_code
        self.diagnosis = record.diagnosis
        self.stop_result: StopResult | None = None
        self._events = EventLog()
        self._save_lock = threading.Lock()  # the watcher and the caller both save; one write at a time
        self._watcher: threading.Thread | None = None
        self._stopping = False
        self._started_mono = time.monotonic() - max(0.0, time.time() - self.started_at)

    # -- what a view reads --------------------------------------------------

    @property
    def openai_base_url(self) -> str:
        return f"{self.base_url}/v1"

    @property
    def popen(self) -> subprocess.Popen[bytes] | None:
        """The Popen of the group leader when this process started it, else None."""
        return self.runtime.popen

    @property
    def phase(self) -> StartupPhase | None:
        return self.phases[-1].phase if self.phases else None

    @property
    def state_path(self) -> Path:
        return self.state_dir / STATE_FILE

    @property
    def supervised(self) -> bool:
        """True when a watcher in this process follows the server live."""
        return self._watcher is not None and self._watcher.is_alive()

    def _secrets(self) -> list[str | None]:
        return [self.api_key, *(self.env.get(k) for k in SECRET_ENV)]

    def log_tail(self, lines: int = 40) -> list[str]:
        """The last lines of the server's log, keys redacted (empty for an attached server)."""
        return log_tail(self.log_path, lines, self._secrets())

    def log_text(self) -> str:
        """The whole log, keys redacted ("" when there is none)."""
        return log_text(self.log_path, self._secrets())

    def group_pids(self) -> list[int]:
        """Live pids of the server's process group (empty when all gone, or attached)."""
        return self.runtime.members()

    def is_alive(self) -> bool:
        """Attached: /health answers. Started here: its processes still run. Loaded
        from a record: the leader runs with the start time recorded."""
        return self.runtime.is_alive()

    def snapshot(self) -> ServerRecord:
        """The record as it stands now."""
        return replace(
            self.record, **self.runtime.record_fields(), base_url=self.base_url, status=self.status,
            phases=tuple(replace(p) for p in self.phases), time_to_ready_s=self.time_to_ready_s,
            exit_code=self.exit_code, diagnosis=self.diagnosis,
            stop_stage=self.stop_result.stage if self.stop_result else None,
            supervisor_pid=os.getpid() if self.supervised else None)

    def to_dict(self) -> dict[str, Any]:
        return self.snapshot().to_dict()

    def public_dict(self) -> dict[str, Any]:
        """`to_dict()` fit to print or show: keys and tokens replaced by ***."""
        return redact_record(self.to_dict())

    def __repr__(self) -> str:
        return f"<ServerProcess {self.mode} {self.base_url} {self.model} {self.status.value}>"

    # -- events ---------------------------------------------------------------

    @property
    def events_so_far(self) -> list[ServerEvent]:
        return self._events.snapshot()

    def subscribe(self, callback: Callable[[ServerEvent], None], *, replay: bool = True) -> Callable[[], None]:
        """Call `callback(event)` for each event (on the watcher thread); with
        `replay`, first for the events already past. Returns an unsubscribe function."""
        return self._events.subscribe(callback, replay=replay)

    def events(self, timeout: float | None = None) -> Iterator[ServerEvent]:
        """Every event from the start, then live ones, until the server is ready,
        failed or stopped (or `timeout` seconds pass with nothing new)."""
        index = 0
        cond = self._events.cond
        while True:
            with cond:
                if index >= len(self._events):
                    if self.status is not Status.STARTING or not self.supervised:
                        return
                    if not cond.wait(timeout) and index >= len(self._events):
                        return
                batch = self._events.since(index)
                index += len(batch)
            yield from batch

    def emit(self, kind: ServerEventKind, phase: StartupPhase | None, detail: str = "",
             progress: float | None = None) -> None:
        """Record a phase entered, progress in it or a status change; tell subscribers; save."""
        elapsed = time.monotonic() - self._started_mono
        if kind == "phase" and phase is not None:
            if self.phases and self.phases[-1].duration_s is None:
                self.phases[-1].duration_s = round(elapsed - self.phases[-1].started_s, 3)
            self.phases.append(PhaseRecord(phase, round(elapsed, 3), None if phase is not StartupPhase.READY else 0.0,
                                           detail))
        elif kind == "progress" and self.phases and phase is self.phase:
            self.phases[-1].detail = detail
        if kind == "status" and self.status is not Status.STARTING and self.phases \
                and self.phases[-1].duration_s is None:
            self.phases[-1].duration_s = round(elapsed - self.phases[-1].started_s, 3)
        if kind != "progress":
            log.info("%s: %s %s", self.name, phase.value if phase else self.status.value, detail)
        event = ServerEvent(kind, phase, self.status, round(elapsed, 3), detail, progress,
                            self.diagnosis if kind == "status" else None)
        self._events.publish(event)
        if kind != "progress":
            self.save()

    def save(self) -> None:
        """Write the record (unless another process already recorded this run stopped), or hand it
        to the supervision's `save` (a node's deployment keeps it; it takes its own lock)."""
        if self.supervision.save is not None:
            self.supervision.save(self.snapshot())
            return
        with self._save_lock:
            save_record(self.state_dir, self.snapshot())

    # -- supervision (watcher thread) ------------------------------------------

    def supervise(self, *, on_event: Callable[[ServerEvent], None] | None = None, stop_at_exit: bool = True,
                  started: str | None = None) -> None:
        """Follow a server this process just started: the STARTED phase (`started` its detail), a
        stop at interpreter exit (unless `stop_at_exit` is False), the watcher thread."""
        if on_event:
            self.subscribe(on_event)
        self.emit("phase", StartupPhase.STARTED, started or f"pid {self.pid}: {' '.join(self.argv[:3])} ...")
        if stop_at_exit:
            atexit.register(self._stop_at_exit)
        self._watcher = threading.Thread(target=self._watch, name=f"watch-{self.name.replace(' ', '-')}",
                                         daemon=True)
        self._watcher.start()

    def _watch(self) -> None:
        detector = PhaseDetector()
        follower = LogFollower(self.log_path)
        last_probe = 0.0

        def read_log() -> None:
            for line in follower.new_lines():
                for phase, detail, progress in detector.feed(line):
                    if self.status is not Status.STARTING:
                        continue
                    if phase in {r.phase for r in self.phases} or progress is not None:
                        if phase is self.phase and detail != self.phases[-1].detail:
                            self.emit("progress", phase, detail, progress)
                    else:
                        self.emit("phase", phase, detail, progress)

        while True:
            read_log()
            if self.runtime.has_exited():
                read_log()
                self._finish()
                return
            now = time.monotonic()
            every = HEALTH_EVERY_S if self.status is Status.STARTING else WATCH_EVERY_S
            if self.supervision.probes_http and self.status in (Status.STARTING, Status.READY) \
                    and now - last_probe >= every:
                last_probe = now
                self._check_http()
            time.sleep(POLL_S)

    def _check_http(self) -> None:
        health, listed = probe(self.base_url, self.model, self.api_key)
        if self.status is Status.STARTING:
            if health == 200 and StartupPhase.HTTP_UP not in {r.phase for r in self.phases}:
                self.emit("phase", StartupPhase.HTTP_UP, self.base_url)
            if health == 200 and listed:
                self.mark_ready(f"{self.model} at {self.openai_base_url}")
        elif self.status is Status.READY and health is not None and health >= 500 and not self._stopping:
            # vLLM answers 503 on /health once its engine is dead.
            self._fail(None)

    def mark_ready(self, detail: str) -> None:
        """It is ready: the READY phase with `detail`, then the status. The watcher calls it when
        /health and /v1/models answer; a deployment, for a worker node whose engine reports."""
        if self.status is not Status.STARTING:
            return
        self.time_to_ready_s = round(time.monotonic() - self._started_mono, 3)
        self.emit("phase", StartupPhase.READY, detail)
        self.status = Status.READY
        self.emit("status", None, f"ready in {self.time_to_ready_s:.1f} s")

    def fail(self, diagnosis: Diagnosis) -> None:
        """It failed, for the reason `diagnosis` gives (a deployment's check can know what no log says)."""
        self.diagnosis = diagnosis
        self.status = Status.FAILED
        log.warning("%s failed: %s", self.name, diagnosis.summary)
        self.emit("status", None, diagnosis.summary)

    def _diagnose(self, exit_code: int | None) -> Diagnosis:
        """The log's diagnosis (the supervision's own, for a node). A server's comes with the plan's
        known issues, for a vLLM from this environment its version beside the recipe's minimum, and
        for a port in use, what holds it."""
        if self.supervision.diagnose is not None:
            return self.supervision.diagnose(self.log_text(), exit_code)
        installed = installed_vllm() if self.mode == "local" else None
        wanted = (self.plan or {}).get("min_vllm_version")
        found = diagnose(self.log_text(), exit_code=exit_code, known_issues=known_issues_for_plan(self.plan),
                         installed_vllm=installed, min_vllm=str(wanted) if wanted else None)
        if found.cause == "address_in_use":
            holder = port_holder(self.port)
            if holder and holder.pid not in self.group_pids():
                found = replace(found, summary=f"Port {self.port} is held by {holder.describe()}.")
        return found

    def _fail(self, exit_code: int | None, *, gone: bool = False) -> None:
        self.exit_code = exit_code
        known = self.runtime.gone_diagnosis() if gone else None
        self.fail(known or self._diagnose(exit_code))

    def _stopped_elsewhere(self) -> bool:
        if self.supervision.stopped_elsewhere is not None:
            return self.supervision.stopped_elsewhere()
        on_disk = read_record(self.state_dir)
        return self.record.same_run(on_disk) and on_disk is not None \
            and on_disk.status in (Status.STOPPED, Status.STOPPING)

    def _finish(self) -> None:
        code = self.runtime.exit_code
        orphans = self.runtime.started_here and not self._stopping
        if self._stopping or self._stopped_elsewhere():
            self.exit_code = code
            self.status = Status.STOPPED
            self.emit("status", None, "stopped")
        elif self.status is not Status.FAILED:
            self._fail(code)
        else:
            self.exit_code = code
            self.save()
        if orphans:
            # The leader is gone: what it left in its group (an engine process) goes too.
            try:
                self.runtime.stop(5.0)
            except LaunchError as exc:
                log.warning("%s: what its leader left could not be stopped: %s", self.name, exc.message)

    # -- status for a handle that is not supervised here ---------------------

    def refresh(self) -> Status:
        """Work out the status now (a supervised handle is already live)."""
        if self.supervised or self.status is Status.STOPPED:
            return self.status
        if not self.runtime.is_alive():
            if self.status is not Status.FAILED:
                self._fail(self.exit_code, gone=True)
            return self.status
        if not self.supervision.probes_http:
            return self.status  # its deployment says when it is ready
        health, listed = probe(self.base_url, self.model, self.api_key, timeout=1.5)
        if health == 200 and (listed or not self.runtime.owns_processes):
            self.status = Status.READY
        elif health is not None and health >= 500 and self.status is Status.READY:
            self._fail(None, gone=True)
        return self.status

    # -- waiting and stopping ------------------------------------------------

    def wait_ready(self, timeout: float = STARTUP_TIMEOUT_S, *, stop: StopCheck | None = None) -> ServerProcess:
        """Block until ready and return the server. Any other end raises NotReady, whose `outcome`
        says which: FAILED (with the diagnosis), TIMED_OUT (it still runs), STOPPED (`stop()`, asked
        twice a second, turned True and it still runs; or the server was stopped)."""
        began = time.monotonic()
        deadline = began + timeout
        while True:
            status = self.status if self.supervised else self.refresh()
            if status is Status.READY:
                return self
            if status in (Status.FAILED, Status.STOPPED):
                break
            now = time.monotonic()
            where = f"phase: {self.phase.label if self.phase else 'none'}, {now - self._started_mono:.0f} s since it started"
            if stop is not None and stop():
                raise NotReady(f"Stopped waiting for vllm serve on port {self.port} after {now - began:.0f} s "
                               f"({where}); it is still starting.", outcome=ReadyOutcome.STOPPED,
                               waited_s=now - began, hint="Wait for it again, or stop it (ServerProcess.stop()).")
            if now >= deadline:
                raise NotReady(
                    f"vllm serve on port {self.port} is not ready after {now - began:.0f} s of waiting ({where}).",
                    outcome=ReadyOutcome.TIMED_OUT, waited_s=now - began,
                    hint=f"It is still running; watch {self.log_path} or stop it (ServerProcess.stop()).")
            with self._events.cond:
                self._events.cond.wait(min(0.5, deadline - now))
        if self._watcher:
            self._watcher.join(5)
        waited = time.monotonic() - began
        if self.status is Status.STOPPED:
            raise NotReady(f"vllm serve on port {self.port} was stopped before it was ready.",
                           outcome=ReadyOutcome.STOPPED, waited_s=waited)
        d = self.diagnosis or self._diagnose(self.exit_code)
        known = (f"\nKnown issue: {d.known_issue['title']} ({d.known_issue['sources'][0]})"
                 if d.known_issue and d.known_issue.get("sources") else "")
        raise NotReady(f"vllm serve on port {self.port} failed: {d.summary}", outcome=ReadyOutcome.FAILED,
                       waited_s=waited, diagnosis=d, hint=f"{d.fix}{known}\nLog: {self.log_path}")

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> StopResult:
        """Staged stop of everything the runtime runs (an attached server is only
        forgotten). Nothing of it is left running after it."""
        started = time.monotonic()
        if self.runtime.owns_processes:
            self._stopping = True
            # Other processes read a stop under way in its state.json (a node's record is its deployment's).
            if self.supervision.save is None and (self.runtime.started_here or self.runtime.is_alive()):
                mark_stopping(self.state_dir, self.snapshot())
        result = self.runtime.stop(timeout)
        self.stop_result = replace(result, seconds=round(time.monotonic() - started, 3))
        if self.runtime.started_here:
            self.exit_code = self.runtime.exit_code
        if self._watcher and self._watcher is not threading.current_thread():
            self._watcher.join(10)
        if self.status is not Status.FAILED:
            self.status = Status.STOPPED
        stage = self.stop_result.stage
        self.emit("status", None, "detached" if stage is StopStage.DETACHED else f"stopped ({stage.value})")
        log.info("%s stopped: %s in %.1f s", self.name, stage.value, self.stop_result.seconds)
        return self.stop_result

    def keep(self) -> None:
        """Leave the server running when this process exits (undoes stop_at_exit)."""
        atexit.unregister(self._stop_at_exit)

    def _stop_at_exit(self) -> None:
        if self.runtime.owns_processes and self.status is not Status.STOPPED:
            try:
                self.stop(timeout=15)
            except Exception as exc:  # at interpreter exit there is nobody left to ask; say it in the log
                log.warning("%s could not be stopped at exit: %s", self.name, exc)

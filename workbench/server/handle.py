"""`ServerProcess`: one vLLM server the workbench started (local, docker) or attached to.

A handle made by start()/launch() in this process is supervised by a watcher
thread: `status`, `phase`, `phases` and `events()` update live, from vLLM's log
lines (workbench.server.phases) and HTTP (/health, /v1/models). A handle loaded
from a state file (find_running, load_server) works out its status when asked
(`refresh()`), from the process table and HTTP.
"""

from __future__ import annotations

import atexit
import functools
import os
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Literal

import httpx

from workbench.errors import LaunchError
from workbench.server.command import DEFAULT_HOST, Mode
from workbench.server.diagnosis import Diagnosis, diagnose, known_issues_for_plan
from workbench.server.phases import PhaseDetector, PhaseRecord, StartupPhase, Status
from workbench.server.ports import port_holder
from workbench.server.process import STOP_TIMEOUT_S, ProcessGroup, StopResult, StopStage, proc_stat, stop_group
from workbench.server.state import STATE_FILE, SECRET_ENV, BadRecord, check_record, read_json, redact, redact_record, write_json

__all__ = ["STARTUP_TIMEOUT_S", "ServerEvent", "ServerEventKind", "ServerProcess"]

ServerEventKind = Literal["phase", "progress", "status"]
STARTUP_TIMEOUT_S = 900.0
POLL_S = 0.25
HEALTH_EVERY_S = 1.0
WATCH_EVERY_S = 5.0  # after ready: each probe is a line in vLLM's access log


@dataclass(frozen=True)
class ServerEvent:
    """One thing a view can show: a phase entered, progress within it, a status change."""

    kind: ServerEventKind
    phase: StartupPhase | None
    status: Status
    elapsed_s: float  # since the process started
    detail: str = ""
    progress: float | None = None  # 0..1, while loading weights
    diagnosis: Diagnosis | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["phase"] = self.phase.value if self.phase else None
        d["status"] = self.status.value
        d["diagnosis"] = self.diagnosis.to_dict() if self.diagnosis else None
        return d




@functools.cache
def tls_context() -> ssl.SSLContext:
    """For polls that repeat (probes, scrapes): built once, as loading the CA bundle
    costs ~15 ms of CPU each time httpx makes a client."""
    return httpx.create_ssl_context()


def _probe(base_url: str, model: str, api_key: str | None, timeout: float = 2.0) -> tuple[int | None, bool]:
    """(/health status or None if unreachable, served model listed in /v1/models)."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    with httpx.Client(timeout=timeout, verify=tls_context()) as client:
        try:
            health = client.get(f"{base_url}/health").status_code
        except httpx.HTTPError:
            return None, False
        if health != 200:
            return health, False
        try:
            r = client.get(f"{base_url}/v1/models", headers=headers)
            listed = r.status_code == 200 and any(m.get("id") == model for m in r.json().get("data", []))
        except (httpx.HTTPError, ValueError):
            listed = False
    return health, listed


def _url_host(host: str) -> str:
    # A server bound to all interfaces is reached on loopback from here.
    return {"0.0.0.0": "127.0.0.1", "::": "[::1]"}.get(host, f"[{host}]" if ":" in host else host)


class ServerProcess:
    """A vLLM server the workbench started (local, docker) or attached to.

    A handle made by start()/launch() in this process is supervised by a
    watcher thread: `status`, `phase`, `phases` and `events()` update live.
    A handle loaded from a state file (find_running, load_server) works out
    its status when asked (`refresh()`), from the process table and HTTP."""

    def __init__(self, state: dict[str, Any], state_dir: Path, popen: subprocess.Popen[bytes] | None = None) -> None:
        self.state_dir = state_dir
        self.mode: Mode = state["mode"]
        self.port: int = state["port"]
        self.host: str = state.get("host", DEFAULT_HOST)
        self.model: str = state["served_model"]
        self.api_key: str | None = state.get("api_key")
        self.pid: int | None = state.get("pid")
        self.pgid: int | None = state.get("pgid")
        self.argv: list[str] = state.get("argv", [])
        self.env: dict[str, str] = state.get("env", {})
        self.plan: dict[str, Any] | None = state.get("plan")
        self.container_name: str | None = state.get("container_name")
        self.started_at: float = state["started_at"]
        self.base_url: str = state.get("base_url") or f"http://{_url_host(self.host)}:{self.port}"
        self.log_path: Path | None = Path(state["log_path"]) if state.get("log_path") else None
        self.status = Status(state.get("status", Status.STARTING.value))
        self.phases = [PhaseRecord.from_dict(p) for p in state.get("phases", [])]
        self.time_to_ready_s: float | None = state.get("time_to_ready_s")
        self.exit_code: int | None = state.get("exit_code")
        self.diagnosis = Diagnosis.from_dict(state["diagnosis"]) if state.get("diagnosis") else None
        self.stop_result: StopResult | None = None
        self.run_id: str | None = state.get("run_id")  # one per start: a record is this run's only if it matches
        self._pid_start_ticks: int | None = state.get("pid_start_ticks")
        self._popen = popen
        self._group = ProcessGroup(self.pgid, popen) if self.pgid else None
        self._events: list[ServerEvent] = []
        self._subscribers: list[Callable[[ServerEvent], None]] = []
        self._cond = threading.Condition()
        # The watcher and the caller both save; one record write at a time.
        self._save_lock = threading.Lock()
        self._watcher: threading.Thread | None = None
        self._stopping = False
        self._started_mono = time.monotonic() - max(0.0, time.time() - self.started_at)

    @classmethod
    def from_record(cls, record: object, state_dir: Path) -> ServerProcess:
        """A handle for a record read from disk; BadRecord if it is not one the workbench writes."""
        state = dict(check_record(record, state_dir))
        if state.get("status") == "stopping":
            state["status"] = Status.STARTING.value  # a stop that did not finish: check again
        try:
            return cls(state, state_dir)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:  # a phase or diagnosis of the wrong shape
            raise BadRecord(f"a field has the wrong shape ({exc.__class__.__name__}: {exc})") from exc

    # -- what a view reads --------------------------------------------------

    @property
    def openai_base_url(self) -> str:
        return f"{self.base_url}/v1"

    @property
    def popen(self) -> subprocess.Popen[bytes] | None:
        """The Popen of the group leader when this process started it, else None."""
        return self._popen

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
        if lines <= 0 or not self.log_path:
            return []
        try:
            with self.log_path.open("rb") as f:
                f.seek(0, os.SEEK_END)
                size = f.tell()
                f.seek(max(0, size - 256 * lines))
                data = f.read().decode(errors="replace")
        except OSError:
            return []
        return [redact(line, self._secrets()) for line in data.splitlines()[-lines:]]

    def log_text(self) -> str:
        """The whole log, keys redacted ("" when there is none)."""
        try:
            text = self.log_path.read_text(errors="replace") if self.log_path else ""
        except OSError:
            return ""
        return redact(text, self._secrets())

    def group_pids(self) -> list[int]:
        """Live pids of the server's process group (empty when all gone, or attached)."""
        return self._group.members() if self._group else []

    def is_alive(self) -> bool:
        """Attach: /health answers. Local/docker started here: the process group
        still has members. Loaded from a record: the leader runs, with the start
        time recorded (a record without one, or a reused pid, never counts)."""
        if self.mode == "attach":
            return _probe(self.base_url, self.model, self.api_key, timeout=1.5)[0] is not None
        if not self._group:
            return False
        if self._popen is not None:
            # Ours: while any member lives the group id cannot be handed to another process.
            return bool(self._group.members())
        return self._leader_matches()

    def _leader_matches(self) -> bool:
        if not self.pid or self._pid_start_ticks is None or self.pgid != self.pid:
            return False
        stat = proc_stat(self.pid)
        return stat is not None and stat[0] not in ("Z", "X") and stat[2] == self._pid_start_ticks

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode, "port": self.port, "host": self.host, "base_url": self.base_url,
            "served_model": self.model, "api_key": self.api_key, "pid": self.pid, "pgid": self.pgid,
            "pid_start_ticks": self._pid_start_ticks, "argv": self.argv, "env": self.env, "plan": self.plan,
            "container_name": self.container_name, "started_at": self.started_at,
            "log_path": str(self.log_path) if self.log_path else None, "status": self.status.value,
            "phases": [p.to_dict() for p in self.phases], "time_to_ready_s": self.time_to_ready_s,
            "exit_code": self.exit_code, "diagnosis": self.diagnosis.to_dict() if self.diagnosis else None,
            "stop_stage": self.stop_result.stage.value if self.stop_result else None,
            "supervisor_pid": os.getpid() if self.supervised else None, "run_id": self.run_id,
        }

    def public_dict(self) -> dict[str, Any]:
        """`to_dict()` fit to print or show: keys and tokens replaced by ***."""
        return redact_record(self.to_dict())

    def __repr__(self) -> str:
        return f"<ServerProcess {self.mode} {self.base_url} {self.model} {self.status.value}>"

    # -- events ---------------------------------------------------------------

    @property
    def events_so_far(self) -> list[ServerEvent]:
        with self._cond:
            return list(self._events)

    def subscribe(self, callback: Callable[[ServerEvent], None], *, replay: bool = True) -> Callable[[], None]:
        """Call `callback(event)` for each event (on the watcher thread); with
        `replay`, first for the events already past. Returns an unsubscribe function."""
        with self._cond:
            past = list(self._events) if replay else []
            self._subscribers.append(callback)
        for event in past:
            callback(event)
        return lambda: self._subscribers.remove(callback) if callback in self._subscribers else None

    def events(self, timeout: float | None = None) -> Iterator[ServerEvent]:
        """Every event from the start, then live ones, until the server is ready,
        failed or stopped (or `timeout` seconds pass with nothing new)."""
        index = 0
        while True:
            with self._cond:
                if index >= len(self._events):
                    if self.status is not Status.STARTING or not self.supervised:
                        return
                    if not self._cond.wait(timeout) and index >= len(self._events):
                        return
                batch = self._events[index:]
                index += len(batch)
            yield from batch

    def _emit(self, kind: ServerEventKind, phase: StartupPhase | None, detail: str = "", progress: float | None = None) -> None:
        elapsed = time.monotonic() - self._started_mono
        if kind == "phase" and phase is not None:
            if self.phases and self.phases[-1].duration_s is None:
                self.phases[-1].duration_s = round(elapsed - self.phases[-1].started_s, 3)
            record = PhaseRecord(phase, round(elapsed, 3), None if phase is not StartupPhase.READY else 0.0, detail)
            self.phases.append(record)
        elif kind == "progress" and self.phases and phase is self.phase:
            self.phases[-1].detail = detail
        if kind == "status" and self.status is not Status.STARTING and self.phases and self.phases[-1].duration_s is None:
            self.phases[-1].duration_s = round(elapsed - self.phases[-1].started_s, 3)
        event = ServerEvent(kind, phase, self.status, round(elapsed, 3), detail, progress,
                            self.diagnosis if kind == "status" else None)
        with self._cond:
            self._events.append(event)
            subscribers = list(self._subscribers)
            self._cond.notify_all()
        if kind != "progress":
            self._save()
        for callback in subscribers:
            try:
                callback(event)
            except Exception:  # a view's bug must not stop the supervision
                pass

    def _same_run(self, on_disk: dict[str, Any]) -> bool:
        """Is the record on disk about this start (not an earlier server on the same port)?"""
        return on_disk.get("run_id") == self.run_id and on_disk.get("pid") == self.pid

    def _save(self) -> None:
        with self._save_lock:
            self._save_locked()

    def _save_locked(self) -> None:
        on_disk = read_json(self.state_path) or {}
        same = self._same_run(on_disk)
        if same and on_disk.get("status") == Status.STOPPED.value and self.status is not Status.STOPPED:
            return  # another process stopped it; keep its record
        data = self.to_dict()
        if same and data["stop_stage"] is None and on_disk.get("stop_stage"):
            data["stop_stage"] = on_disk["stop_stage"]  # recorded by the process that stopped it
        write_json(self.state_path, data)

    # -- supervision (watcher thread) ------------------------------------------

    def _start_watcher(self) -> None:
        self._watcher = threading.Thread(target=self._watch, name=f"vllm-watch-{self.port}", daemon=True)
        self._watcher.start()

    def _watch(self) -> None:
        detector = PhaseDetector()
        offset, pending = 0, b""
        last_probe = 0.0

        def read_log() -> None:
            nonlocal offset, pending
            if not self.log_path:
                return
            try:
                with self.log_path.open("rb") as f:
                    f.seek(offset)
                    chunk = f.read()
            except OSError:
                return
            offset += len(chunk)
            # tqdm redraws with \r: treat it as a line end too.
            lines = (pending + chunk).replace(b"\r", b"\n").split(b"\n")
            pending = lines.pop()
            for raw in lines:
                for phase, detail, progress in detector.feed(raw.decode(errors="replace")):
                    if self.status is not Status.STARTING:
                        continue
                    if phase in {r.phase for r in self.phases} or progress is not None:
                        if phase is self.phase and detail != self.phases[-1].detail:
                            self._emit("progress", phase, detail, progress)
                    else:
                        self._emit("phase", phase, detail, progress)

        while True:
            read_log()
            exited = self._popen.poll() is not None if self._popen else not self.is_alive()
            if exited:
                read_log()
                self._finish()
                return
            now = time.monotonic()
            every = HEALTH_EVERY_S if self.status is Status.STARTING else WATCH_EVERY_S
            if self.status in (Status.STARTING, Status.READY) and now - last_probe >= every:
                last_probe = now
                self._check_http()
            time.sleep(POLL_S)

    def _check_http(self) -> None:
        health, listed = _probe(self.base_url, self.model, self.api_key)
        if self.status is Status.STARTING:
            if health == 200 and StartupPhase.HTTP_UP not in {r.phase for r in self.phases}:
                self._emit("phase", StartupPhase.HTTP_UP, self.base_url)
            if health == 200 and listed:
                self.time_to_ready_s = round(time.monotonic() - self._started_mono, 3)
                self._emit("phase", StartupPhase.READY, f"{self.model} at {self.openai_base_url}")
                self.status = Status.READY
                self._emit("status", None, f"ready in {self.time_to_ready_s:.1f} s")
        elif self.status is Status.READY and health is not None and health >= 500 and not self._stopping:
            # vLLM answers 503 on /health once its engine is dead.
            self._fail(None)

    def _fail(self, exit_code: int | None) -> None:
        self.exit_code = exit_code
        self.diagnosis = diagnose(self.log_text(), exit_code=exit_code,
                                  known_issues=known_issues_for_plan(self.plan))
        if self.diagnosis.cause == "address_in_use":
            holder = port_holder(self.port)
            if holder and holder.pid not in self.group_pids():
                self.diagnosis = replace(self.diagnosis, summary=f"Port {self.port} is held by {holder.describe()}.")
        self.status = Status.FAILED
        self._emit("status", None, self.diagnosis.summary)

    def _finish(self) -> None:
        code = self._popen.returncode if self._popen else None
        on_disk = read_json(self.state_path) or {}
        stopped_elsewhere = self._same_run(on_disk) and on_disk.get("status") in (Status.STOPPED.value, "stopping")
        orphans = self._popen is not None and not self._stopping and self._group is not None
        if self._stopping or stopped_elsewhere:
            self.exit_code = code
            self.status = Status.STOPPED
            self._emit("status", None, "stopped")
        elif self.status is not Status.FAILED:
            self._fail(code)
        else:
            self.exit_code = code
            self._save()
        if orphans and self._group is not None:
            # The leader is gone: what it left in its group (an engine process) goes too.
            try:
                stop_group(self._group, timeout=5.0)
            except LaunchError:
                pass  # stuck in the kernel; the status above already says how it ended

    # -- status for a handle that is not supervised here ---------------------

    def refresh(self) -> Status:
        """Work out the status now (a supervised handle is already live)."""
        if self.supervised or self.status is Status.STOPPED:
            return self.status
        health, listed = _probe(self.base_url, self.model, self.api_key, timeout=1.5)
        if self.mode == "attach":
            self.status = Status.READY if health == 200 else Status.FAILED
            if self.status is Status.FAILED and self.diagnosis is None:
                self.diagnosis = Diagnosis("engine_died" if health else "unknown",
                                           f"The attached server at {self.base_url} does not answer /health"
                                           + (f" (HTTP {health})." if health else "."),
                                           "Check the server where it was started; attach again once it is up.")
            return self.status
        if not self.is_alive():
            if self.status is not Status.FAILED:
                self._fail(self.exit_code)
            return self.status
        if health == 200 and listed:
            self.status = Status.READY
        elif health is not None and health >= 500 and self.status is Status.READY:
            self._fail(None)
        return self.status

    # -- waiting and stopping ------------------------------------------------

    def wait_ready(self, timeout: float = STARTUP_TIMEOUT_S) -> ServerProcess:
        """Block until ready; raise LaunchError with the diagnosis if it fails or times out."""
        deadline = time.monotonic() + timeout
        while True:
            status = self.status if self.supervised else self.refresh()
            if status is Status.READY:
                return self
            if status in (Status.FAILED, Status.STOPPED):
                break
            if time.monotonic() >= deadline:
                raise LaunchError(
                    f"vllm serve on port {self.port} is not ready after {timeout:.0f} s "
                    f"(phase: {self.phase.value if self.phase else 'none'}).",
                    hint=f"It is still running; watch {self.log_path} or stop it with python -m workbench stop --port {self.port}.",
                )
            with self._cond:
                self._cond.wait(0.5)
        if self._watcher:
            self._watcher.join(5)
        if self.status is Status.STOPPED:
            raise LaunchError(f"vllm serve on port {self.port} was stopped before it was ready.")
        d = self.diagnosis or diagnose(self.log_text(), exit_code=self.exit_code,
                                       known_issues=known_issues_for_plan(self.plan))
        known = (f"\nKnown issue: {d.known_issue['title']} ({d.known_issue['sources'][0]})"
                 if d.known_issue and d.known_issue.get("sources") else "")
        raise LaunchError(f"vllm serve on port {self.port} failed: {d.summary}",
                          hint=f"{d.fix}{known}\nLog: {self.log_path}")

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> StopResult:
        """Staged stop of the whole process group (or docker stop); an attached
        server is only forgotten. Nothing of the group is left running after it."""
        started = time.monotonic()
        if self.mode == "attach":
            self.stop_result = StopResult(StopStage.DETACHED, 0.0)
            self.status = Status.STOPPED
            self._emit("status", None, "detached")
            return self.stop_result
        alive = self.is_alive()
        if not alive and self._popen is None:
            # Not provably ours (no start time, a reused pid, a dead leader): never signalled.
            workers = self._begin_stop_workers(timeout)
            if workers is not None:
                workers.join()
            self.stop_result = StopResult(StopStage.ALREADY_GONE, 0.0)
            if self.status is not Status.FAILED:
                self.status = Status.STOPPED
            self._emit("status", None, "stopped (already_gone)")
            return self.stop_result
        self._stopping = True
        on_disk = read_json(self.state_path) or {}
        if self._same_run(on_disk) and on_disk.get("status") not in (Status.STOPPED.value, None):
            write_json(self.state_path, {**on_disk, "status": "stopping"})
        if self.mode == "docker" and self.container_name and alive:
            try:
                subprocess.run(["docker", "stop", "-t", str(int(timeout)), self.container_name],
                               capture_output=True, timeout=timeout + 30)
            except (OSError, subprocess.SubprocessError):
                pass  # the group's staged stop below still ends the docker CLI
        workers = self._begin_stop_workers(timeout)
        if self._group is None:
            result = StopResult(StopStage.ALREADY_GONE, 0.0)
        else:
            result = stop_group(self._group, timeout)
        if workers is not None:
            workers.join()
        self.stop_result = replace(result, seconds=round(time.monotonic() - started, 3))
        if self._popen is not None:
            self._popen.poll()
            self.exit_code = self._popen.returncode
        if self._watcher and self._watcher is not threading.current_thread():
            self._watcher.join(10)
        if self.status is not Status.FAILED:
            self.status = Status.STOPPED
        self._emit("status", None, f"stopped ({self.stop_result.stage.value})")
        return self.stop_result

    def _begin_stop_workers(self, timeout: float) -> threading.Thread | None:
        """A multi-node head: its worker nodes stop alongside it (workbench.server.cluster)."""
        if not (self.state_dir / "cluster.json").exists():
            return None
        from workbench.server.cluster import begin_stop_workers

        return begin_stop_workers(self, timeout)

    def keep(self) -> None:
        """Leave the server running when this process exits (undoes stop_at_exit)."""
        atexit.unregister(self._stop_at_exit)

    def _stop_at_exit(self) -> None:
        if self.mode != "attach" and self.status is not Status.STOPPED:
            try:
                self.stop(timeout=15)
            except Exception:  # at interpreter exit there is nobody left to tell
                pass


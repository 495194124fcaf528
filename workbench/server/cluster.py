"""Supervising a multi-node deployment: the head (a ServerProcess) and every worker node.

    launch_cluster(plan, ["local"] or ["gpu2", ...]) -> Cluster
        .wait_ready()   head /health and /v1/models answer, and every engine reports in /metrics
        .rows()         a row per node: role, host, status, phase, pid, log
        .stop()         every node: SIGTERM, then SIGKILL after the timeout; nothing left running

The head is an ordinary ServerProcess (its folder, state.json, vllm.log); the
workers are recorded beside it in cluster.json, each with its own log
(node1.log, ...). A worker that fails is diagnosed from its log
(workbench.server.node_diagnosis) and the rest are stopped, logs kept.
The head's runtime is a `ClusterHead`: stopping the head stops the workers
alongside it, from any process (`adopt_head` wraps a head loaded from its record),
so `python -m workbench stop` needs nothing cluster-specific.
"""

from __future__ import annotations

import dataclasses
import logging
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import httpx

from workbench.errors import LaunchError, MetricsError
from workbench.metrics.parse import GENERATION_TOKENS, parse_metrics
from workbench.server.cluster_record import CLUSTER_FILE, ClusterRecord, NodeRecord, read_cluster_record, write_cluster_record
from workbench.server.command import PlanLike
from workbench.server.diagnosis import Diagnosis
from workbench.server.handle import STARTUP_TIMEOUT_S, ServerEvent, ServerProcess
from workbench.server.launch import start
from workbench.server.logfile import LogFollower
from workbench.server.node_diagnosis import ENGINE_VERSION, PGID_SEEN, diagnose_node, version_mismatch
from workbench.server.nodes import LOCAL, NodeCommand, plan_cluster, remote_stop_argv
from workbench.server.phases import PhaseDetector, PhaseRecord, StartupPhase, Status
from workbench.server.probe import tls_context
from workbench.server.process import STOP_TIMEOUT_S, StopResult, StopStage, spawn_group, stop_group
from workbench.server.record import read_record
from workbench.server.runtime_cluster import ClusterHead
from workbench.server.runtime_local import LocalProcessGroup

__all__ = ["CLUSTER_FILE", "Cluster", "NodeProcess", "adopt_head", "launch_cluster", "load_cluster", "node_rows"]

log = logging.getLogger("workbench.server")

POLL_S = 0.25
_LIVE: dict[str, Cluster] = {}  # clusters supervised by this process, by the head's run_id


def _node_log(folder: Path, rank: int) -> Path:
    return folder / f"node{rank}.log"


class NodeProcess:
    """One worker node: its process here (vllm, or the ssh client), log, phases, status."""

    def __init__(self, record: NodeRecord, popen: subprocess.Popen[bytes] | None = None) -> None:
        self.record = record  # how it was started (fixed); what changes is in the fields below
        self.rank, self.host, self.via, self.serves_http = record.rank, record.host, record.via, record.serves_http
        self.pid = record.pid
        self.log_path = Path(record.log_path)
        self.started_at = record.started_at
        self.status = record.status
        self.phases = [dataclasses.replace(p) for p in record.phases]  # the open phase's duration is set later
        self.diagnosis = record.diagnosis
        self.exit_code = record.exit_code
        self.remote_pgid = record.remote_pgid
        self.version = record.version
        self.stop_result: StopResult | None = None
        self.runtime = LocalProcessGroup(record.pid, record.pid_started_at, popen)  # its process (vllm, or ssh) here
        self._detector = PhaseDetector()
        self._log = LogFollower(self.log_path)

    @property
    def phase(self) -> StartupPhase | None:
        return self.phases[-1].phase if self.phases else None

    def snapshot(self) -> NodeRecord:
        """The node as it stands now, to write to cluster.json."""
        return dataclasses.replace(self.record, status=self.status, phases=tuple(self.phases),
                                   diagnosis=self.diagnosis, exit_code=self.exit_code,
                                   remote_pgid=self.remote_pgid, version=self.version)

    def is_alive(self) -> bool:
        """Its process group here still runs (started here), or its leader with the recorded start time."""
        return self.runtime.is_alive()

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def enter_phase(self, phase: StartupPhase, detail: str) -> None:
        elapsed = round(time.time() - self.started_at, 3)
        if self.phases and self.phases[-1].duration_s is None:
            self.phases[-1].duration_s = round(elapsed - self.phases[-1].started_s, 3)
        self.phases.append(PhaseRecord(phase, elapsed, 0.0 if phase is StartupPhase.READY else None, detail))

    def read_log(self) -> bool:
        """Feed new log lines to the phase detector; True if anything was learnt."""
        changed = False
        for line in self._log.new_lines():
            if line.startswith(PGID_SEEN) and self.remote_pgid is None:
                try:
                    self.remote_pgid = int(line.split()[1])
                except (IndexError, ValueError):
                    continue
                self.phases[-1].detail = f"running on {self.host}, remote session {self.remote_pgid}"
                changed = True
            version = ENGINE_VERSION.search(line)
            if version and self.version is None:
                self.version = version.group(1) or version.group(2)
                changed = True
            for phase, detail, _ in self._detector.feed(line):
                if self.status is not Status.STARTING:
                    continue
                if phase in {p.phase for p in self.phases}:
                    if phase is self.phase:
                        self.phases[-1].detail = detail
                else:
                    self.enter_phase(phase, detail)
                changed = True
        return changed

    def exited(self) -> bool:
        if not self.runtime.has_exited():
            return False
        if self.runtime.started_here:
            self.exit_code = self.runtime.exit_code
        return True

    def fail(self, diagnosis: Diagnosis) -> None:
        self.diagnosis = diagnosis
        self.status = Status.FAILED

    def stop(self, timeout: float = STOP_TIMEOUT_S, ssh: str = "ssh") -> StopResult:
        """SIGTERM to the node's whole group (on its host too, over ssh), SIGKILL after `timeout`."""
        started = time.monotonic()
        if not self.is_alive():
            self.stop_result = StopResult(StopStage.ALREADY_GONE, 0.0)
        elif self.via == "ssh" and self.remote_pgid:
            self.stop_result = self._stop_remote(timeout, ssh, started)
        else:
            self.stop_result = self.runtime.stop(timeout)
        if self.runtime.started_here:
            self.exit_code = self.runtime.exit_code
        if self.status is not Status.FAILED:
            self.status = Status.STOPPED
        return self.stop_result

    def _stop_remote(self, timeout: float, ssh: str, started: float) -> StopResult:
        def remote(sig: str) -> bool:
            argv = remote_stop_argv(self.host, int(self.remote_pgid or 0), sig, ssh)
            try:
                return subprocess.run(argv, capture_output=True, timeout=30).returncode == 0
            except (OSError, subprocess.SubprocessError):
                return False

        stage = StopStage.TERMINATED
        remote("TERM")
        deadline = time.monotonic() + timeout
        while remote("0") and time.monotonic() < deadline:
            time.sleep(0.5)
        if remote("0"):
            remote("KILL")
            stage = StopStage.KILLED
        self.runtime.stop(10.0)  # the ssh client here ends with the remote command
        return StopResult(stage, time.monotonic() - started, [self.pid] if self.pid else [])


class Cluster:
    """A multi-node deployment: the head here and its workers, supervised together."""

    def __init__(self, head: ServerProcess, nodes: list[NodeProcess], record: ClusterRecord) -> None:
        self.head = head
        self.nodes = nodes
        self.head_address = record.head_address
        self.iface = record.iface
        self.expected_engines = list(record.expected_engines)
        self.engines_seen = list(record.engines_seen)
        self.notes = list(record.notes)
        self.ssh = record.ssh
        self.time_to_ready_s = record.time_to_ready_s
        self.diagnosis = record.diagnosis
        self._status = record.status
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._watcher: threading.Thread | None = None
        self._stopping = False
        self._head_version: str | None = None

    # -- what a view reads ----------------------------------------------------

    @property
    def status(self) -> Status:
        return self._status

    @property
    def path(self) -> Path:
        return self.head.state_dir / CLUSTER_FILE

    def snapshot(self) -> ClusterRecord:
        """The deployment as it stands now, to write to cluster.json."""
        return ClusterRecord(self.head.run_id, self.head_address, self.iface, tuple(self.expected_engines),
                             tuple(self.engines_seen), tuple(self.notes), self.ssh, self._status,
                             self.time_to_ready_s, self.diagnosis, tuple(n.snapshot() for n in self.nodes))

    def rows(self) -> list[dict[str, Any]]:
        """A row per node (the head first): what the Server tab and `status` list."""
        return node_rows(self.head, self)

    def _save(self) -> None:
        write_cluster_record(self.head.state_dir, self.snapshot())

    # -- supervision ------------------------------------------------------------

    def supervise(self) -> None:
        """Record the deployment and follow it live from this process (launch_cluster calls it)."""
        self._save()
        _LIVE[str(self.head.run_id)] = self
        self._watcher = threading.Thread(target=self._watch, name=f"cluster-watch-{self.head.port}", daemon=True)
        self._watcher.start()

    def _watch(self) -> None:
        last_scrape = 0.0
        while True:
            changed = False
            for node in self.nodes:
                changed |= node.read_log()
                if node.status is Status.STARTING or node.status is Status.READY:
                    if node.exited() and not self._stopping and not self._head_stopping():
                        node.read_log()
                        node.fail(diagnose_node(node.log_text(), rank=node.rank, host=node.host, via=node.via,
                                                exit_code=node.exit_code, head_address=self.head_address))
                        changed = True
            changed |= self._check_versions()
            if self._status is Status.STARTING and self.head.status is Status.READY \
                    and time.monotonic() - last_scrape >= 1.0:
                last_scrape = time.monotonic()
                changed |= self._check_engines()
            changed |= self._update_status()
            if changed:
                with self._cond:
                    self._save()
                    self._cond.notify_all()
            if self._status in (Status.FAILED, Status.STOPPED) and not self._stopping:
                self._stop_rest()
            if self._status in (Status.FAILED, Status.STOPPED) and not any(n.is_alive() for n in self.nodes) \
                    and not self.head.is_alive():
                with self._cond:
                    self._save()
                    self._cond.notify_all()
                return
            time.sleep(POLL_S)

    def _head_stopping(self) -> bool:
        """Is the head being stopped (by this process or another)? Then workers exiting is no failure."""
        if self.head.status is Status.STOPPED:
            return True
        on_disk = read_record(self.head.state_dir)
        stopping = self.head.record.same_run(on_disk) and on_disk is not None \
            and on_disk.status in (Status.STOPPING, Status.STOPPED)
        if stopping:
            self._stopping = True
        return stopping

    def _check_versions(self) -> bool:
        if self._head_version is None:
            found = ENGINE_VERSION.search(self.head.log_text()) if self.head.log_path else None
            self._head_version = (found.group(1) or found.group(2)) if found else None
        changed = False
        for node in self.nodes:
            if node.status is Status.STARTING:
                mismatch = version_mismatch(self._head_version, node.version, node.rank, node.host)
                if mismatch:
                    node.fail(mismatch)
                    changed = True
        return changed

    def _check_engines(self) -> bool:
        try:
            text = httpx.get(f"{self.head.base_url}/metrics", timeout=5.0, verify=tls_context()).text
            snapshot = parse_metrics(text)
        except (httpx.HTTPError, MetricsError):
            return False
        seen = sorted({dict(labels).get("engine", "") for (name, labels) in snapshot.counters
                       if name == GENERATION_TOKENS})
        if seen == self.engines_seen:
            return False
        self.engines_seen = seen
        return True

    def _update_status(self) -> bool:
        before = self._status
        failed = [n for n in self.nodes if n.status is Status.FAILED]
        if self.head.status is Status.FAILED or failed:
            self._status = Status.FAILED
            if self.diagnosis is None:
                self.diagnosis = failed[0].diagnosis if failed else self.head.diagnosis
        elif self._stopping or self.head.status is Status.STOPPED:
            self._status = Status.STOPPED
        elif self._status is Status.STARTING and self.head.status is Status.READY \
                and set(self.expected_engines) <= set(self.engines_seen):
            self._status = Status.READY
            self.time_to_ready_s = round(time.time() - self.head.started_at, 3)
            for node in self.nodes:
                node.status = Status.READY
                node.enter_phase(StartupPhase.READY, "its engine reports in the head's /metrics"
                            if not node.serves_http else "serving")
        return self._status is not before

    def _stop_rest(self) -> None:
        """A failed deployment leaves nothing running: stop every node still up (logs are kept)."""
        self._stopping = True
        threading.Thread(target=self.head.stop, name="cluster-stop", daemon=True).start()

    def stop_workers(self, timeout: float) -> None:
        """Stop every worker node (the head's ClusterHead runtime calls it beside the head's stop)."""
        self._stopping = True
        threads = [threading.Thread(target=n.stop, args=(timeout, self.ssh), daemon=True) for n in self.nodes]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        with self._cond:
            self._update_status()
            self._save()
            self._cond.notify_all()

    # -- waiting and stopping -------------------------------------------------------

    def wait_ready(self, timeout: float = STARTUP_TIMEOUT_S) -> Cluster:
        """Block until every node is up; LaunchError with the failing node's diagnosis otherwise."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._status is Status.STARTING:
                left = deadline - time.monotonic()
                if left <= 0:
                    missing = sorted(set(self.expected_engines) - set(self.engines_seen))
                    raise LaunchError(
                        f"The {len(self.nodes) + 1}-node deployment is not ready after {timeout:.0f} s "
                        f"(head: {self.head.status.value}; engines not reporting: {', '.join(missing) or 'none'}).",
                        hint=f"It is still running; read the node logs ({', '.join(str(n.log_path) for n in self.nodes)}, "
                        f"{self.head.log_path}) or stop it.")
                self._cond.wait(min(left, 0.5))
        if self._status is Status.READY:
            return self
        d = self.diagnosis
        if d is None:
            raise LaunchError("The multi-node deployment was stopped before it was ready.")
        logs = ", ".join([str(self.head.log_path), *(str(n.log_path) for n in self.nodes)])
        raise LaunchError(f"The multi-node deployment failed: {d.summary}", hint=f"{d.fix}\nLogs: {logs}",
                          settings=d.settings)

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> StopResult:
        """Stop every node (the head's stop stops the workers alongside it)."""
        self._stopping = True
        result = self.head.stop(timeout)
        if self._watcher and self._watcher is not threading.current_thread():
            self._watcher.join(15)
        return result


def launch_cluster(
    plan: PlanLike,
    workers: Sequence[str],
    *,
    head_address: str | None = None,
    iface: str | None = None,
    python: str | None = None,
    host: str | None = None,
    port: int | None = None,
    ssh: str = "ssh",
    worker_vllm: str = "vllm",
    state_dir: Path | str | None = None,
    on_event: Callable[[ServerEvent], None] | None = None,
    progress: Callable[[str], None] | None = None,
    stop_at_exit: bool = True,
) -> Cluster:
    """Start the head here and every worker (here, or on its host over ssh); returns at once.
    `progress` gets notes and model-build messages (default: the `workbench.server` logger)."""
    progress = progress or log.info
    command = plan_cluster(plan, workers, head_address=head_address, iface=iface, python=python, host=host,
                           port=port, ssh=ssh, worker_vllm=worker_vllm, progress=progress)
    for note in command.notes:
        progress(f"note: {note}")
    head = start(command.head, state_dir=state_dir, on_event=on_event, stop_at_exit=stop_at_exit)
    nodes = []
    try:
        for node in command.workers:
            nodes.append(_spawn(node, head.state_dir))
    except LaunchError:
        for started in nodes:
            started.stop(10.0, ssh)
        head.stop(10.0)
        raise
    record = ClusterRecord(head.run_id, command.head_address, command.iface, tuple(command.expected_engines),
                           notes=tuple(command.notes), ssh=command.ssh)
    cluster = Cluster(head, nodes, record)
    head.runtime = ClusterHead(head.runtime, cluster.stop_workers)  # the head's stop stops the workers too
    cluster.supervise()
    return cluster


def _spawn(node: NodeCommand, folder: Path) -> NodeProcess:
    log_path = _node_log(folder, node.rank)
    spawned = spawn_group(node.argv, node.env, log_path, what=f"node {node.rank}",
                          hint="Check that the program exists (vllm here, ssh for a remote worker).")
    record = NodeRecord(rank=node.rank, host=node.host, log_path=str(log_path), started_at=time.time(), via=node.via,
                        argv=tuple(node.argv), remote_argv=None if node.remote_argv is None else tuple(node.remote_argv),
                        serves_http=node.serves_http, port=node.port, pid=spawned.pid,
                        pid_started_at=spawned.started_at)
    process = NodeProcess(record, spawned.popen)
    process.enter_phase(StartupPhase.STARTED,
                        f"pid {spawned.pid} on {node.host if node.host != LOCAL else 'this machine'}")
    return process


# -- records (any process) -------------------------------------------------------------


def load_cluster(head: ServerProcess) -> Cluster | None:
    """The cluster whose head is `head`: the live one supervised here, else from cluster.json."""
    live = _LIVE.get(str(head.run_id))
    if live is not None:
        return live
    record = read_cluster_record(head.state_dir)
    if record is None or record.run_id != head.run_id:
        return None
    nodes = [NodeProcess(n) for n in record.nodes]
    cluster = Cluster(head, nodes, record)
    for node in nodes:  # not supervised here: work the status out from the process table
        if node.status in (Status.STARTING, Status.READY) and not node.is_alive():
            node.fail(diagnose_node(node.log_text(), rank=node.rank, host=node.host, via=node.via,
                                    exit_code=node.exit_code, head_address=cluster.head_address))
    cluster._update_status()
    return cluster


def adopt_head(head: ServerProcess) -> None:
    """If `head` (loaded from its record) heads a multi-node deployment, wrap its runtime
    so that stopping it stops the workers too (read from cluster.json when it stops)."""
    if isinstance(head.runtime, ClusterHead) or not (head.state_dir / CLUSTER_FILE).exists():
        return

    def stop_workers(timeout: float) -> None:
        cluster = load_cluster(head)
        if cluster is not None and cluster.nodes:
            cluster.stop_workers(timeout)

    head.runtime = ClusterHead(head.runtime, stop_workers)


def node_rows(head: ServerProcess, cluster: Cluster | None = None) -> list[dict[str, Any]]:
    """A row per node of `head`'s deployment (one row for a single-node server)."""
    cluster = cluster if cluster is not None else load_cluster(head)
    rows = [{"rank": 0, "role": "head", "host": "this machine", "status": head.status.value,
             "phase": head.phase.label if head.phase else "", "pid": head.pid,
             "detail": head.diagnosis.summary if head.diagnosis else (head.phases[-1].detail if head.phases else ""),
             "log": str(head.log_path or "")}]
    for node in cluster.nodes if cluster else []:
        rows.append({"rank": node.rank, "role": "worker", "host": node.host, "status": node.status.value,
                     "phase": node.phase.label if node.phase else "", "pid": node.pid,
                     "detail": node.diagnosis.summary if node.diagnosis else
                     (node.phases[-1].detail if node.phases else ""), "log": str(node.log_path)})
    return rows

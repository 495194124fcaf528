"""Supervising a multi-node deployment: the head (a ServerProcess) and every worker node.

    launch_cluster(plan, ["local"] or ["gpu2", ...]) -> Cluster
        .wait_ready()   head /health and /v1/models answer, and every engine reports in /metrics
        .rows()         a row per node: role, host, status, phase, pid, log
        .stop()         every node: SIGTERM, then SIGKILL after the timeout; nothing left running

The head is an ordinary ServerProcess (its folder, state.json, vllm.log); each
worker's process is followed by a ServerProcess too, with its own runtime (a
process group here, or an ssh client and the session it started: SshSession) and
a `Supervision` for a node: no HTTP of its own (the cluster declares it ready when
its engine reports in the head's /metrics), diagnosed as a node
(workbench.server.node_diagnosis), recorded in cluster.json beside the head's
state.json, each with its own log (node1.log, ...), redacted like the head's. A
worker that fails stops the rest, logs kept. This module only composes them.
The head's runtime is a `ClusterHead`: stopping the head stops the workers
alongside it, from any process (`adopt_head` wraps a head loaded from its record),
so `python -m workbench stop` needs nothing cluster-specific.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx

from workbench.errors import LaunchError, MetricsError
from workbench.metrics.parse import GENERATION_TOKENS, parse_metrics
from workbench.server.cluster_record import CLUSTER_FILE, ClusterRecord, NodeRecord, read_cluster_record, write_cluster_record
from workbench.server.command import PlanLike
from workbench.server.diagnosis import Diagnosis
from workbench.server.handle import STARTUP_TIMEOUT_S, ServerEvent, ServerProcess, StopCheck, Supervision
from workbench.server.launch import start
from workbench.server.node_diagnosis import diagnose_node, engine_version, version_mismatch
from workbench.server.nodes import LOCAL, NodeCommand, plan_cluster
from workbench.server.phases import PhaseRecord, StartupPhase, Status
from workbench.server.probe import tls_context
from workbench.server.process import STOP_TIMEOUT_S, Spawned, StopResult, spawn_group, stop_group
from workbench.server.readiness import NotReady, ReadyOutcome
from workbench.server.record import ServerRecord, read_record
from workbench.server.runtime import Runtime
from workbench.server.runtime_cluster import ClusterHead
from workbench.server.runtime_local import LocalProcessGroup
from workbench.server.runtime_ssh import SshSession
from workbench.server.state import SECRET_ENV

__all__ = ["CLUSTER_FILE", "Cluster", "WorkerNode", "adopt_head", "launch_cluster", "load_cluster", "node_rows"]

log = logging.getLogger("workbench.server")

POLL_S = 0.25
ENGINES_EVERY_S = 1.0
_LIVE: dict[str, Cluster] = {}  # clusters supervised by this process, by the head's run_id


def _node_log(folder: Path, rank: int) -> Path:
    return folder / f"node{rank}.log"


class WorkerNode:
    """One worker node: how it was started (`record`, its entry in cluster.json) and its
    process, followed like any server's (`process`, a ServerProcess)."""

    def __init__(self, record: NodeRecord, process: ServerProcess) -> None:
        self.record = record
        self.process = process
        self.version = record.version  # the vLLM version its log states, once read

    @property
    def rank(self) -> int:
        return self.record.rank

    @property
    def host(self) -> str:
        return self.record.host

    @property
    def via(self) -> str:
        return self.record.via

    @property
    def serves_http(self) -> bool:
        return self.record.serves_http

    @property
    def pid(self) -> int | None:
        return self.record.pid

    @property
    def log_path(self) -> Path:
        return Path(self.record.log_path)

    @property
    def status(self) -> Status:
        return self.process.status

    @property
    def phases(self) -> list[PhaseRecord]:
        return self.process.phases

    @property
    def phase(self) -> StartupPhase | None:
        return self.process.phase

    @property
    def diagnosis(self) -> Diagnosis | None:
        return self.process.diagnosis

    @property
    def exit_code(self) -> int | None:
        return self.process.exit_code

    @property
    def remote_pgid(self) -> int | None:
        """The session on the worker host (ssh nodes), once its log names it."""
        runtime = self.process.runtime
        return runtime.remote_pgid if isinstance(runtime, SshSession) else None

    def is_alive(self) -> bool:
        return self.process.is_alive()

    def log_text(self) -> str:
        """Its whole log, keys redacted as the head's are."""
        return self.process.log_text()

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> StopResult:
        return self.process.stop(timeout)

    def snapshot(self) -> NodeRecord:
        """The node as it stands now, to write to cluster.json."""
        p = self.process
        return replace(self.record, status=p.status, phases=tuple(replace(x) for x in p.phases), diagnosis=p.diagnosis,
                       exit_code=p.exit_code, remote_pgid=self.remote_pgid or self.record.remote_pgid,
                       version=self.version)


class Cluster:
    """A multi-node deployment: the head here and its workers, supervised together."""

    def __init__(self, head: ServerProcess, record: ClusterRecord, spawned: Mapping[int, Spawned] | None = None) -> None:
        self.head = head
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
        self.nodes = [self._node(n, (spawned or {}).get(n.rank)) for n in record.nodes]

    def _node(self, record: NodeRecord, spawned: Spawned | None) -> WorkerNode:
        """A worker's process as a ServerProcess: a process group here (vllm, or the ssh client and
        the session it started on its host), supervised as a node of this deployment."""
        client = (LocalProcessGroup.spawned(spawned) if spawned is not None
                  else LocalProcessGroup(record.pid, record.pid_started_at))
        runtime: Runtime = client if record.via == LOCAL else SshSession(
            client, record.host, Path(record.log_path), self.ssh, record.remote_pgid)
        head = self.head
        as_server = ServerRecord(
            mode="local", port=record.port or head.port, served_model=head.model, started_at=record.started_at,
            host=head.host, api_key=head.api_key, argv=list(record.argv), log_path=record.log_path,
            # Only the head's secrets: what its log is redacted of is what every node's is.
            env={k: v for k, v in head.env.items() if k in SECRET_ENV}, status=record.status, phases=record.phases,
            exit_code=record.exit_code, diagnosis=record.diagnosis, run_id=head.run_id, **runtime.record_fields())

        def diagnose(log_text: str, exit_code: int | None) -> Diagnosis:
            return diagnose_node(log_text, rank=record.rank, host=record.host, via=record.via, exit_code=exit_code,
                                 head_address=self.head_address)

        supervision = Supervision(name=f"node {record.rank}", probes_http=False, diagnose=diagnose,
                                  save=self._node_changed, stopped_elsewhere=self._stopping_now)
        return WorkerNode(record, ServerProcess(as_server, head.state_dir, runtime, supervision))

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

    def refresh(self) -> Status:
        """Work the status out now: each node's (from the process table, for a cluster loaded
        from its record), then the deployment's."""
        for node in self.nodes:
            node.process.refresh()
        with self._cond:
            if self._update_status():
                self._save()
        return self._status

    def _save(self) -> None:
        with self._lock:
            write_cluster_record(self.head.state_dir, self.snapshot())

    def _node_changed(self, _record: ServerRecord) -> None:
        """A node's process changed (a phase, its status): record it, wake the waiters."""
        with self._cond:
            self._save()
            self._cond.notify_all()

    # -- supervision ------------------------------------------------------------

    def supervise(self) -> None:
        """Follow the deployment live from this process (launch_cluster calls it): each node's
        process by its own watcher, the deployment's readiness by this one."""
        self._save()
        _LIVE[str(self.head.run_id)] = self
        for node in self.nodes:
            where = node.host if node.host != LOCAL else "this machine"
            node.process.supervise(stop_at_exit=False, started=f"pid {node.pid} on {where}")
        self._watcher = threading.Thread(target=self._watch, name=f"cluster-watch-{self.head.port}", daemon=True)
        self._watcher.start()

    def _watch(self) -> None:
        last_scrape = 0.0
        while True:
            changed = self._check_versions()
            if self._status is Status.STARTING and self.head.status is Status.READY \
                    and time.monotonic() - last_scrape >= ENGINES_EVERY_S:
                last_scrape = time.monotonic()
                changed |= self._check_engines()
            with self._cond:
                changed |= self._update_status()
                if changed:
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

    def _stopping_now(self) -> bool:
        """Is the deployment being stopped (by this process or another)? Then a node exiting is no failure."""
        if self._stopping or self.head.status is Status.STOPPED:
            return True
        on_disk = read_record(self.head.state_dir)
        stopping = self.head.record.same_run(on_disk) and on_disk is not None \
            and on_disk.status in (Status.STOPPING, Status.STOPPED)
        if stopping:
            self._stopping = True
        return stopping

    def _check_versions(self) -> bool:
        """A node that runs another vLLM than the head fails (both read from their logs)."""
        if self._head_version is None:
            self._head_version = engine_version(self.head.log_path)
        changed = False
        for node in self.nodes:
            if node.status is not Status.STARTING:
                continue
            if node.version is None:
                node.version = engine_version(node.log_path)
                changed |= node.version is not None
            mismatch = version_mismatch(self._head_version, node.version, node.rank, node.host)
            if mismatch:
                node.process.fail(mismatch)
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
        """The deployment's status from the head's and the nodes' (call holding the lock)."""
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
                node.process.mark_ready("serving" if node.serves_http
                                        else "its engine reports in the head's /metrics")
        return self._status is not before

    def _stop_rest(self) -> None:
        """A failed deployment leaves nothing running: stop every node still up (logs are kept)."""
        self._stopping = True
        threading.Thread(target=self.head.stop, name="cluster-stop", daemon=True).start()

    def stop_workers(self, timeout: float) -> None:
        """Stop every worker node (the head's ClusterHead runtime calls it beside the head's stop)."""
        self._stopping = True
        threads = [threading.Thread(target=n.stop, args=(timeout,), daemon=True) for n in self.nodes]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        with self._cond:
            self._update_status()
            self._save()
            self._cond.notify_all()

    # -- waiting and stopping -------------------------------------------------------

    def wait_ready(self, timeout: float = STARTUP_TIMEOUT_S, *, stop: StopCheck | None = None) -> Cluster:
        """Block until every node is up and return the deployment; otherwise NotReady, as
        ServerProcess.wait_ready (FAILED with the failing node's diagnosis)."""
        began = time.monotonic()
        deadline = began + timeout
        with self._cond:
            while self._status is Status.STARTING:
                now = time.monotonic()
                missing = sorted(set(self.expected_engines) - set(self.engines_seen))
                where = (f"head: {self.head.status.value}; engines not reporting: {', '.join(missing) or 'none'}; "
                         f"{time.time() - self.head.started_at:.0f} s since it started")
                if stop is not None and stop():
                    raise NotReady(f"Stopped waiting for the {len(self.nodes) + 1}-node deployment after "
                                   f"{now - began:.0f} s ({where}); it is still starting.",
                                   outcome=ReadyOutcome.STOPPED, waited_s=now - began,
                                   hint="Wait for it again, or stop it (Cluster.stop()).")
                if now >= deadline:
                    raise NotReady(
                        f"The {len(self.nodes) + 1}-node deployment is not ready after {now - began:.0f} s of "
                        f"waiting ({where}).", outcome=ReadyOutcome.TIMED_OUT, waited_s=now - began,
                        hint=f"It is still running; read the node logs ({', '.join(str(n.log_path) for n in self.nodes)}, "
                        f"{self.head.log_path}) or stop it.")
                self._cond.wait(min(deadline - now, 0.5))
        if self._status is Status.READY:
            return self
        waited = time.monotonic() - began
        d = self.diagnosis
        if d is None:
            raise NotReady("The multi-node deployment was stopped before it was ready.",
                           outcome=ReadyOutcome.STOPPED, waited_s=waited)
        logs = ", ".join([str(self.head.log_path), *(str(n.log_path) for n in self.nodes)])
        raise NotReady(f"The multi-node deployment failed: {d.summary}", outcome=ReadyOutcome.FAILED,
                       waited_s=waited, diagnosis=d, hint=f"{d.fix}\nLogs: {logs}")

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
    spawned: dict[int, Spawned] = {}
    nodes: list[NodeRecord] = []
    try:
        for node in command.workers:
            spawned[node.rank], node_record = _spawn(node, head.state_dir)
            nodes.append(node_record)
    except LaunchError:
        for started in spawned.values():  # nothing ran on a worker host yet: their groups here are all
            stop_group(started.group, 10.0)
        head.stop(10.0)
        raise
    record = ClusterRecord(head.run_id, command.head_address, command.iface, tuple(command.expected_engines),
                           notes=tuple(command.notes), ssh=command.ssh, nodes=tuple(nodes))
    cluster = Cluster(head, record, spawned)
    head.runtime = ClusterHead(head.runtime, cluster.stop_workers)  # the head's stop stops the workers too
    cluster.supervise()
    return cluster


def _spawn(node: NodeCommand, folder: Path) -> tuple[Spawned, NodeRecord]:
    log_path = _node_log(folder, node.rank)
    spawned = spawn_group(node.argv, node.env, log_path, what=f"node {node.rank}",
                          hint="Check that the program exists (vllm here, ssh for a remote worker).")
    record = NodeRecord(rank=node.rank, host=node.host, log_path=str(log_path), started_at=time.time(), via=node.via,
                        argv=tuple(node.argv), remote_argv=None if node.remote_argv is None else tuple(node.remote_argv),
                        serves_http=node.serves_http, port=node.port, pid=spawned.pid,
                        pid_started_at=spawned.started_at)
    return spawned, record


# -- records (any process) -------------------------------------------------------------


def load_cluster(head: ServerProcess) -> Cluster | None:
    """The cluster whose head is `head`: the live one supervised here, else from cluster.json."""
    live = _LIVE.get(str(head.run_id))
    if live is not None:
        return live
    record = read_cluster_record(head.state_dir)
    if record is None or record.run_id != head.run_id:
        return None
    cluster = Cluster(head, record)
    cluster.refresh()  # not supervised here: the status from the process table
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

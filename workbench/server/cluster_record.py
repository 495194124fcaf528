"""`ClusterRecord`: cluster.json's one schema (a multi-node deployment's workers, beside
the head's state.json), and the one place it is read and written.

Like `ServerRecord`, a record is trusted only as far as it checks out: `from_dict`
refuses one the workbench would not write (`BadRecord`), and `read_cluster_record`
then says so in the log and returns None: the workers are not known.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workbench.server.diagnosis import Diagnosis
from workbench.server.phases import PhaseRecord, Status
from workbench.server.record import BadRecord, expect_field, is_time_value, is_whole_number
from workbench.server.state import read_json, write_json

__all__ = ["CLUSTER_FILE", "ClusterRecord", "NodeRecord", "read_cluster_record", "write_cluster_record"]

log = logging.getLogger("workbench.server")

CLUSTER_FILE = "cluster.json"
VIAS = ("local", "ssh")


@dataclass(frozen=True)
class NodeRecord:
    """One worker node as recorded: how it was started here, where its log is, how it is doing."""

    rank: int
    host: str
    log_path: str
    started_at: float
    via: str = "local"
    argv: tuple[str, ...] = ()
    remote_argv: tuple[str, ...] | None = None
    serves_http: bool = False
    port: int | None = None
    pid: int | None = None  # its process group's leader here (vllm, or the ssh client)
    pid_started_at: float | None = None
    status: Status = Status.STARTING
    phases: tuple[PhaseRecord, ...] = ()
    diagnosis: Diagnosis | None = None
    exit_code: int | None = None
    remote_pgid: int | None = None  # the process group on the worker host (ssh nodes)
    version: str | None = None  # the vLLM version its log names

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out.update(argv=list(self.argv), remote_argv=None if self.remote_argv is None else list(self.remote_argv),
                   pgid=self.pid, status=self.status.value, phases=[p.to_dict() for p in self.phases],
                   diagnosis=self.diagnosis.to_dict() if self.diagnosis else None)
        return out

    @classmethod
    def from_dict(cls, data: object) -> NodeRecord:
        if not isinstance(data, dict):
            raise BadRecord(f"a node is a JSON {type(data).__name__}, not an object")
        d = data
        for key in ("rank", "host", "log_path"):
            if key not in d:
                raise BadRecord(f"a node has no {key!r}")
        expect_field(d, "rank", is_whole_number(d["rank"]) and d["rank"] >= 1, "a worker rank (1 or more)")
        expect_field(d, "host", isinstance(d["host"], str) and d["host"] != "", "a host name")
        expect_field(d, "log_path", isinstance(d["log_path"], str), "a path")
        expect_field(d, "via", d.get("via", "local") in VIAS, "one of " + ", ".join(VIAS))
        for key in ("argv", "remote_argv"):
            value = d.get(key)
            expect_field(d, key, value is None or (isinstance(value, list) and all(isinstance(a, str) for a in value)),
                    "a list of words")
        for key in ("port", "pid", "exit_code", "remote_pgid"):
            expect_field(d, key, d.get(key) is None or is_whole_number(d[key]), "a whole number")
        expect_field(d, "pid", d.get("pid") is None or d["pid"] > 1, "a process id")
        for key in ("started_at", "pid_started_at"):
            expect_field(d, key, d.get(key) is None or is_time_value(d[key]), "a time")
        statuses = [s.value for s in Status]
        expect_field(d, "status", d.get("status", "starting") in statuses, "one of " + ", ".join(statuses))
        expect_field(d, "version", d.get("version") is None or isinstance(d["version"], str), "text")
        phases, diagnosis = _phases_and_diagnosis(d)
        return cls(
            rank=d["rank"], host=d["host"], log_path=d["log_path"], started_at=float(d.get("started_at") or 0.0),
            via=d.get("via", "local"), argv=tuple(d.get("argv") or ()),
            remote_argv=None if d.get("remote_argv") is None else tuple(d["remote_argv"]),
            serves_http=bool(d.get("serves_http")), port=d.get("port"), pid=d.get("pid"),
            pid_started_at=d.get("pid_started_at"), status=Status(d.get("status", Status.STARTING.value)),
            phases=phases, diagnosis=diagnosis, exit_code=d.get("exit_code"), remote_pgid=d.get("remote_pgid"),
            version=d.get("version"),
        )


@dataclass(frozen=True)
class ClusterRecord:
    """What cluster.json holds: the deployment (how the workers reach the head, which
    engines must report) and every worker node. `run_id` is the head's."""

    run_id: str | None
    head_address: str
    iface: str | None = None
    expected_engines: tuple[str, ...] = ("0",)
    engines_seen: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    ssh: str = "ssh"
    status: Status = Status.STARTING
    time_to_ready_s: float | None = None
    diagnosis: Diagnosis | None = None
    nodes: tuple[NodeRecord, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "head_address": self.head_address, "iface": self.iface,
                "expected_engines": list(self.expected_engines), "engines_seen": list(self.engines_seen),
                "notes": list(self.notes), "ssh": self.ssh, "status": self.status.value,
                "time_to_ready_s": self.time_to_ready_s,
                "diagnosis": self.diagnosis.to_dict() if self.diagnosis else None,
                "nodes": [n.to_dict() for n in self.nodes]}

    @classmethod
    def from_dict(cls, data: object) -> ClusterRecord:
        if not isinstance(data, dict):
            raise BadRecord(f"it holds a JSON {type(data).__name__}, not an object")
        d = data
        expect_field(d, "run_id", d.get("run_id") is None or isinstance(d["run_id"], str), "text")
        expect_field(d, "head_address", isinstance(d.get("head_address", ""), str), "an address")
        for key in ("iface", "ssh"):
            expect_field(d, key, d.get(key) is None or isinstance(d[key], str), "text")
        for key in ("expected_engines", "engines_seen", "notes"):
            value = d.get(key, [])
            expect_field(d, key, isinstance(value, list) and all(isinstance(v, str) for v in value), "a list of text")
        expect_field(d, "nodes", isinstance(d.get("nodes"), list), "a list")
        statuses = [s.value for s in Status]
        expect_field(d, "status", d.get("status", "starting") in statuses, "one of " + ", ".join(statuses))
        expect_field(d, "time_to_ready_s", d.get("time_to_ready_s") is None or is_time_value(d["time_to_ready_s"]), "a time")
        _, diagnosis = _phases_and_diagnosis(d)
        return cls(
            run_id=d.get("run_id"), head_address=d.get("head_address", ""), iface=d.get("iface"),
            expected_engines=tuple(d.get("expected_engines", ["0"])), engines_seen=tuple(d.get("engines_seen", [])),
            notes=tuple(d.get("notes", [])), ssh=d.get("ssh") or "ssh",
            status=Status(d.get("status", Status.STARTING.value)), time_to_ready_s=d.get("time_to_ready_s"),
            diagnosis=diagnosis, nodes=tuple(NodeRecord.from_dict(n) for n in d["nodes"]),
        )


def read_cluster_record(folder: Path) -> ClusterRecord | None:
    """The cluster.json in the head's folder, or None if there is none or it does not check out."""
    path = folder / CLUSTER_FILE
    data = read_json(path)
    if data is None:
        return None
    try:
        return ClusterRecord.from_dict(data)
    except BadRecord as exc:
        log.warning("%s does not check out (%s); the workers are not known", path, exc)
        return None


def write_cluster_record(folder: Path, record: ClusterRecord) -> None:
    write_json(folder / CLUSTER_FILE, record.to_dict())


def _phases_and_diagnosis(d: dict[str, Any]) -> tuple[tuple[PhaseRecord, ...], Diagnosis | None]:
    expect_field(d, "phases", isinstance(d.get("phases", []), list), "a list")
    expect_field(d, "diagnosis", d.get("diagnosis") is None or isinstance(d["diagnosis"], dict), "an object")
    try:
        phases = tuple(PhaseRecord.from_dict(p) for p in d.get("phases", []))
        diagnosis = Diagnosis.from_dict(d["diagnosis"]) if d.get("diagnosis") else None
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise BadRecord(f"a field has the wrong shape ({exc.__class__.__name__}: {exc})") from exc
    return phases, diagnosis

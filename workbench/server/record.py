"""`ServerRecord`: the state file's one schema, and the one place it is read and written.

A record is trusted only as far as it checks out: `ServerRecord.from_dict` refuses
one that is not what the workbench writes (a field missing or of the wrong type,
an unknown status, a log path outside its folder, a pgid that is not the pid) with
`BadRecord`, and the loader reports such a folder instead of failing on it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from workbench.server.command import DEFAULT_HOST, Mode
from workbench.server.diagnosis import Diagnosis
from workbench.server.phases import PhaseRecord, Status
from workbench.server.process import StopStage
from workbench.server.state import LOG_FILE, PREVIOUS_LOG_FILE, STATE_FILE, read_json, redact_record, write_json

__all__ = ["MODES", "BadRecord", "RecordProblem", "ServerRecord", "expect_field", "is_time_value", "is_whole_number",
           "mark_stopping", "read_record", "save_record"]

MODES: tuple[str, ...] = ("local", "docker", "attach")


class BadRecord(ValueError):
    """A state file that is not a record the workbench writes."""


@dataclass(frozen=True)
class RecordProblem:
    """A server folder whose state file was skipped, and why."""

    folder: Path
    reason: str

    def describe(self) -> str:
        return f"skipped {self.folder / STATE_FILE}: {self.reason}"


@dataclass(frozen=True)
class ServerRecord:
    """What state.json holds about one server: how it was started, where it is, how it is doing.

    Frozen: a change is a new record (`dataclasses.replace`), written with `save_record`."""

    mode: Mode
    port: int
    served_model: str
    started_at: float  # time.time() at start
    host: str = DEFAULT_HOST
    base_url: str | None = None
    api_key: str | None = None
    pid: int | None = None  # the process-group leader (local, docker); None when attached
    pgid: int | None = None
    pid_started_at: float | None = None  # the leader's start time: a reused pid is never taken for it
    argv: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    plan: dict[str, Any] | None = None
    container_name: str | None = None
    log_path: str | None = None
    status: Status = Status.STARTING
    phases: tuple[PhaseRecord, ...] = ()
    time_to_ready_s: float | None = None
    exit_code: int | None = None
    diagnosis: Diagnosis | None = None
    stop_stage: StopStage | None = None
    supervisor_pid: int | None = None  # the process whose watcher follows it, while one does
    run_id: str | None = None  # one per start: a record on disk is this run's only if it matches

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["status"] = self.status.value
        out["phases"] = [p.to_dict() for p in self.phases]
        out["diagnosis"] = self.diagnosis.to_dict() if self.diagnosis else None
        out["stop_stage"] = self.stop_stage.value if self.stop_stage else None
        return out

    def public_dict(self) -> dict[str, Any]:
        """`to_dict()` fit to print or show: keys and tokens replaced by ***."""
        return redact_record(self.to_dict())

    def same_run(self, other: ServerRecord | None) -> bool:
        """Is `other` about this start (not an earlier server in the same folder)?"""
        return other is not None and other.run_id == self.run_id and other.pid == self.pid

    @classmethod
    def from_dict(cls, data: object, folder: Path) -> ServerRecord:
        """The record in `data` if the workbench could have written it in `folder`, else BadRecord."""
        if not isinstance(data, dict):
            raise BadRecord(f"it holds a JSON {type(data).__name__}, not an object")
        r = data
        for key in ("mode", "port", "served_model", "started_at"):
            if key not in r:
                raise BadRecord(f"it has no {key!r}")
        expect_field(r, "mode", r["mode"] in MODES, "one of " + ", ".join(MODES))
        expect_field(r, "port", is_whole_number(r["port"]) and 1 <= r["port"] <= 65535, "a port number 1-65535")
        expect_field(r, "served_model", isinstance(r["served_model"], str), "a name")
        statuses = [s.value for s in Status]
        expect_field(r, "status", r.get("status", "starting") in statuses, "one of " + ", ".join(statuses))
        for key in ("host", "base_url", "api_key", "container_name", "log_path", "run_id"):
            expect_field(r, key, r.get(key) is None or isinstance(r[key], str), "text")
        for key in ("pid", "pgid", "exit_code", "supervisor_pid"):
            expect_field(r, key, r.get(key) is None or is_whole_number(r[key]), "a whole number")
        for key in ("pid", "pgid"):
            expect_field(r, key, r.get(key) is None or r[key] > 1, "a process id")
        for key in ("started_at", "pid_started_at", "time_to_ready_s"):
            expect_field(r, key, (key != "started_at" and r.get(key) is None) or is_time_value(r.get(key)), "a time")
        if r["mode"] != "attach" and r.get("pgid") != r.get("pid"):
            # Servers start in their own session, so the group id is the leader's pid.
            raise BadRecord(f"pgid {r.get('pgid')} is not pid {r.get('pid')}")
        expect_field(r, "argv", r.get("argv") is None or (isinstance(r["argv"], list)
                                                     and all(isinstance(a, str) for a in r["argv"])), "a list of words")
        expect_field(r, "env", r.get("env") is None or (isinstance(r["env"], dict)
                                                   and all(isinstance(v, str) for v in r["env"].values())), "a mapping")
        for key in ("plan", "diagnosis"):
            expect_field(r, key, r.get(key) is None or isinstance(r[key], dict), "an object")
        expect_field(r, "phases", isinstance(r.get("phases", []), list), "a list")
        stages = [s.value for s in StopStage]
        expect_field(r, "stop_stage", r.get("stop_stage") is None or r["stop_stage"] in stages, "one of " + ", ".join(stages))
        if r.get("log_path"):
            log = Path(r["log_path"])
            inside = (folder / log.name).resolve() == (folder / log).resolve() and log.name in (LOG_FILE,
                                                                                             PREVIOUS_LOG_FILE)
            if not inside:
                raise BadRecord(f"its log_path {r['log_path']} is outside {folder}")
        try:
            phases = tuple(PhaseRecord.from_dict(p) for p in r.get("phases", []))
            diagnosis = Diagnosis.from_dict(r["diagnosis"]) if r.get("diagnosis") else None
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise BadRecord(f"a field has the wrong shape ({exc.__class__.__name__}: {exc})") from exc
        return cls(
            mode=cast(Mode, r["mode"]), port=r["port"], served_model=r["served_model"],
            started_at=float(r["started_at"]), host=r.get("host") or DEFAULT_HOST, base_url=r.get("base_url"),
            api_key=r.get("api_key"), pid=r.get("pid"), pgid=r.get("pgid"), pid_started_at=r.get("pid_started_at"),
            argv=list(r.get("argv") or []), env=dict(r.get("env") or {}), plan=r.get("plan"),
            container_name=r.get("container_name"), log_path=r.get("log_path"),
            status=Status(r.get("status", Status.STARTING.value)), phases=phases,
            time_to_ready_s=r.get("time_to_ready_s"), exit_code=r.get("exit_code"), diagnosis=diagnosis,
            stop_stage=StopStage(r["stop_stage"]) if r.get("stop_stage") else None,
            supervisor_pid=r.get("supervisor_pid"), run_id=r.get("run_id"),
        )


def is_whole_number(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_time_value(value: object) -> bool:
    return (is_whole_number(value) or isinstance(value, float)) and value == value  # NaN is not a time


def expect_field(record: Mapping[str, Any], key: str, ok: bool, what: str) -> None:
    """BadRecord saying which field is wrong and what it should be, unless `ok`."""
    if not ok:
        raise BadRecord(f"{key} is {record.get(key)!r}, not {what}")


def read_record(folder: Path) -> ServerRecord | None:
    """The record in `folder`, or None if there is none or it does not check out."""
    data = read_json(folder / STATE_FILE)
    if data is None:
        return None
    try:
        return ServerRecord.from_dict(data, folder)
    except BadRecord:
        return None


def save_record(folder: Path, record: ServerRecord) -> None:
    """Write `record`, unless another process already recorded this run as stopped
    (its record stands); a stop stage recorded by the process that stopped it is kept."""
    on_disk = read_record(folder)
    if record.same_run(on_disk):
        assert on_disk is not None
        if on_disk.status is Status.STOPPED and record.status is not Status.STOPPED:
            return
        if record.stop_stage is None and on_disk.stop_stage is not None:
            record = dataclasses.replace(record, stop_stage=on_disk.stop_stage)
    write_json(folder / STATE_FILE, record.to_dict())


def mark_stopping(folder: Path, record: ServerRecord) -> None:
    """Say on disk that a stop of this run is under way (other processes then take
    its exit for a stop, not a crash)."""
    on_disk = read_record(folder)
    if record.same_run(on_disk) and on_disk is not None and on_disk.status is not Status.STOPPED:
        write_json(folder / STATE_FILE, dataclasses.replace(on_disk, status=Status.STOPPING).to_dict())

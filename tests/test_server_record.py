"""ServerRecord: the state file's one schema. What is written is read back the same; a stop
under way is an enum member on disk; what another process recorded as stopped stands."""

from __future__ import annotations

import dataclasses
import json
import re
import time

import pytest

from workbench.server.cluster_record import (
    CLUSTER_FILE,
    ClusterRecord,
    NodeRecord,
    read_cluster_record,
    write_cluster_record,
)
from workbench.server.diagnosis import Diagnosis
from workbench.server.phases import PhaseRecord, StartupPhase, Status
from workbench.server.process import StopStage
from workbench.server.record import BadRecord, ServerRecord, mark_stopping, read_record, save_record
from workbench.server.servers import load_server
from workbench.server.state import STATE_FILE


def _full(folder) -> ServerRecord:
    """A record with every field set to something other than its default."""
    return ServerRecord(
        mode="docker", port=8123, served_model="nemo", started_at=1_700_000_000.25, host="0.0.0.0",
        base_url="http://127.0.0.1:8123", api_key="sk-secret-key", pid=4242, pgid=4242,
        pid_started_at=1_700_000_000.11, argv=["docker", "run", "--name", "wb-8123"], env={"HF_TOKEN": "hf_x"},
        plan={"recipe_id": "r", "argv": ["vllm", "serve"]}, container_name="wb-8123",
        log_path=str(folder / "vllm.log"), status=Status.FAILED,
        phases=(PhaseRecord(StartupPhase.STARTED, 0.0, 1.5, "pid 4242"),
                PhaseRecord(StartupPhase.LOADING_WEIGHTS, 1.5, None, "loading")),
        time_to_ready_s=None, exit_code=1,
        diagnosis=Diagnosis("out_of_memory", "too big", "lower it", "OOM line", 1, ["a", "b"]),
        stop_stage=StopStage.KILLED, supervisor_pid=77, run_id="abc123",
    )


def test_every_field_survives_the_round_trip_through_the_state_file(tmp_path):
    record = _full(tmp_path)
    assert {f.name for f in dataclasses.fields(record)} == set(record.to_dict())
    save_record(tmp_path, record)
    on_disk = json.loads((tmp_path / STATE_FILE).read_text())
    assert on_disk["status"] == "failed" and on_disk["stop_stage"] == "killed" and on_disk["phases"][1]["phase"] == \
        "loading_weights"
    assert read_record(tmp_path) == record


def test_records_are_frozen():
    record = ServerRecord(mode="local", port=8000, served_model="m", started_at=1.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.status = Status.READY  # type: ignore[misc]


@pytest.mark.parametrize(("change", "reason"), [
    ({"status": "halfway"}, "status"),
    ({"stop_stage": "shot"}, "stop_stage"),
    ({"mode": "kubernetes"}, "mode"),
    ({"pid_started_at": "yesterday"}, "pid_started_at"),
    ({"pgid": 999}, "pgid"),
    ({"log_path": "/etc/passwd"}, "outside"),
    ({"phases": [{"phase": "dancing", "started_s": 0}]}, "wrong shape"),
])
def test_a_record_the_workbench_could_not_have_written_is_refused(tmp_path, change, reason):
    data = {**_full(tmp_path).to_dict(), **change}
    with pytest.raises(BadRecord, match=reason):
        ServerRecord.from_dict(data, tmp_path)


def test_a_stop_under_way_is_recorded_as_stopping_and_loaded_as_worth_checking(tmp_path):
    record = dataclasses.replace(_full(tmp_path), mode="local", status=Status.READY, stop_stage=None,
                                 container_name=None)
    save_record(tmp_path, record)
    mark_stopping(tmp_path, record)
    assert read_record(tmp_path).status is Status.STOPPING
    assert json.loads((tmp_path / STATE_FILE).read_text())["status"] == "stopping"
    handle = load_server(tmp_path)
    assert handle is not None and handle.status is Status.STARTING  # a stop that did not finish: check again


def test_another_process_s_stopped_record_stands_and_its_stop_stage_is_kept(tmp_path):
    mine = dataclasses.replace(_full(tmp_path), status=Status.READY, stop_stage=None)
    save_record(tmp_path, dataclasses.replace(mine, status=Status.STOPPED, stop_stage=StopStage.TERMINATED))
    save_record(tmp_path, mine)  # a late save of this process's view must not revive it
    assert read_record(tmp_path).status is Status.STOPPED
    save_record(tmp_path, dataclasses.replace(mine, status=Status.STOPPED))
    assert read_record(tmp_path).stop_stage is StopStage.TERMINATED
    other_run = dataclasses.replace(mine, run_id="another-start", started_at=time.time())
    save_record(tmp_path, other_run)  # a new start on the same port replaces the record whole
    assert read_record(tmp_path) == other_run


# -- cluster.json: the workers of a multi-node deployment, beside the head's record


def _cluster(folder) -> ClusterRecord:
    node = NodeRecord(rank=1, host="gpu-node-2", log_path=str(folder / "node1.log"), started_at=1_700_000_001.5,
                      via="ssh", argv=("ssh", "--", "gpu-node-2", "setsid ..."), remote_argv=("env", "vllm", "serve"),
                      serves_http=False, port=None, pid=5151, pid_started_at=1_700_000_001.4, status=Status.FAILED,
                      phases=(PhaseRecord(StartupPhase.STARTED, 0.0, None, "pid 5151 on gpu-node-2"),),
                      diagnosis=Diagnosis("nccl", "NCCL could not connect", "check the interface", "line", 3, []),
                      exit_code=1, remote_pgid=999, version="0.32.0")
    return ClusterRecord("abc123", "10.0.0.1", "eth1", ("0", "1"), ("0",), ("a note",), "ssh", Status.FAILED,
                         None, node.diagnosis, (node,))


def test_a_cluster_record_survives_the_round_trip_through_cluster_json(tmp_path):
    record = _cluster(tmp_path)
    write_cluster_record(tmp_path, record)
    assert read_cluster_record(tmp_path) == record
    assert {f.name for f in dataclasses.fields(record.nodes[0])} <= set(record.nodes[0].to_dict())


@pytest.mark.parametrize("change, says", [
    (lambda d: d.update(nodes="node1"), "nodes is 'node1', not a list"),
    (lambda d: d["nodes"][0].update(rank=0), "rank is 0, not a worker rank"),
    (lambda d: d["nodes"][0].update(via="telnet"), "via is 'telnet', not one of local, ssh"),
    (lambda d: d["nodes"][0].update(pid="5151"), "pid is '5151', not a whole number"),
    (lambda d: d["nodes"][0].update(status="stopping?"), "status is 'stopping?'"),
    (lambda d: d["nodes"][0].update(remote_argv="env vllm"), "remote_argv is 'env vllm', not a list of words"),
    (lambda d: d["nodes"][0].pop("log_path"), "a node has no 'log_path'"),
])
def test_a_cluster_record_that_does_not_check_out_is_refused_and_logged(tmp_path, caplog, change, says):
    data = _cluster(tmp_path).to_dict()
    change(data)
    with pytest.raises(BadRecord, match=re.escape(says)):
        ClusterRecord.from_dict(data)
    (tmp_path / CLUSTER_FILE).write_text(json.dumps(data))
    with caplog.at_level("WARNING", logger="workbench.server"):
        assert read_cluster_record(tmp_path) is None
    assert says in caplog.text and "the workers are not known" in caplog.text

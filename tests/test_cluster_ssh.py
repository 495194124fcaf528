"""A worker over ssh: the argv and the one quoted string ssh gets, stop over ssh, an unreachable host.

There is no second host here: an `ssh` on PATH records its argv and runs the
command string it was given through a local `sh -c`, as sshd hands it to the
remote user's shell. One deployment for the module (multi_node_tp_dp, SmolLM2).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from workbench.server.process import ProcessGroup
from workbench.errors import LaunchError
from workbench.recipes import Selection, load_catalog, render
from workbench.server import Status, free_port
from workbench.server.cluster import Cluster, launch_cluster
from workbench.server.nodes import SSH_OPTIONS

pytestmark = pytest.mark.vllm

REPO = Path(__file__).parent.parent
QUIET = lambda message: None  # noqa: E731
# A JSON value with spaces, quotes and braces: it must reach the worker as one word.
TRICKY = '{"temperature": 0.5, "top_p": 0.9}'

FAKE_SSH = """#!{python}
import json, os, sys
args = sys.argv[1:]
with open(os.environ["FAKE_SSH_LOG"], "a") as log:
    log.write(json.dumps(args) + "\\n")
# ssh [options] -- host command: the command is the one string after the host.
host_at = args.index("--") + 1
os.execvp("sh", ["sh", "-c", args[host_at + 1]])
"""


def plan(**extra: object):  # type: ignore[no-untyped-def]
    return render(Selection(recipe="SmolLM2-135M-Instruct", nodes=2, port=free_port(),
                            extra=[shlex.join(["--override-generation-config", TRICKY])], **extra),  # type: ignore[arg-type]
                  load_catalog())


def group_members(pgid: int) -> list[int]:
    return ProcessGroup(pgid).members()


@pytest.fixture(scope="module")
def fake_ssh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    bin_dir = tmp_path_factory.mktemp("bin")
    script = bin_dir / "ssh"
    script.write_text(FAKE_SSH.format(python=sys.executable))
    script.chmod(0o755)
    log = bin_dir / "ssh-argv.jsonl"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
        mp.setenv("FAKE_SSH_LOG", str(log))
        yield log


@pytest.fixture(scope="module")
def state_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cluster-ssh")


@pytest.fixture(scope="module")
def cluster(fake_ssh: Path, state_dir: Path) -> Iterator[Cluster]:
    vllm = str(Path(sys.executable).with_name("vllm"))
    c = launch_cluster(plan(), ["gpu-node-2"], head_address="127.0.0.1", worker_vllm=vllm, state_dir=state_dir,
                       progress=QUIET, stop_at_exit=False)
    try:
        c.wait_ready(600)
        yield c
    finally:
        c.stop(timeout=30)


def test_ssh_gets_an_argv_list_and_one_shlex_joined_string(cluster: Cluster, fake_ssh: Path) -> None:
    (node,) = cluster.nodes
    first = json.loads(fake_ssh.read_text().splitlines()[0])
    assert first[:len(SSH_OPTIONS)] == list(SSH_OPTIONS) and first[len(SSH_OPTIONS):-1] == ["--", "gpu-node-2"]
    words = shlex.split(first[-1])
    assert first[-1] == shlex.join(words)
    assert words[:4] == ["setsid", "--wait", "sh", "-c"] and words[5] == "workbench-node"
    remote_argv = node.record.remote_argv
    assert remote_argv is not None and words[6:] == list(remote_argv)
    assert remote_argv[0] == "env" and "--headless" in remote_argv
    assert TRICKY in remote_argv  # one word, quotes and spaces intact
    # The vllm the remote shell started got exactly those words.
    assert node.remote_pgid is not None
    cmdline = Path(f"/proc/{node.remote_pgid}/cmdline").read_bytes().split(b"\0")[:-1]
    words_run = [w.decode() for w in cmdline]
    assert TRICKY in words_run and words_run[words_run.index(TRICKY) - 1] == "--override-generation-config"


def test_ready_over_ssh(cluster: Cluster) -> None:
    assert cluster.status is Status.READY and cluster.engines_seen == ["0", "1"]
    assert cluster.rows()[1]["host"] == "gpu-node-2"
    assert cluster.nodes[0].via == "ssh"


def test_stop_from_another_process_stops_the_remote_session(cluster: Cluster, fake_ssh: Path,
                                                             state_dir: Path) -> None:
    node, head = cluster.nodes[0], cluster.head
    remote, local_ssh = node.remote_pgid, node.pid
    assert remote and local_ssh and group_members(remote)
    env = {**os.environ, "WORKBENCH_STATE_DIR": str(state_dir)}
    started = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "workbench", "stop", "--timeout", "30"], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=180)
    print(f"\nstop of head + ssh worker took {time.monotonic() - started:.1f} s: {out.stdout.strip()}")
    assert out.returncode == 0, out.stderr
    assert group_members(remote) == [] and group_members(local_ssh) == []
    assert head.pid is not None and group_members(head.pid) == []
    kills = [json.loads(line)[-1] for line in fake_ssh.read_text().splitlines()[1:]]
    assert f"kill -TERM -{remote}" in kills


def test_unreachable_host_is_diagnosed_and_the_head_stopped(state_dir: Path) -> None:
    # The system's own ssh: the module's recording one is still first on PATH here.
    real_ssh = shutil.which("ssh", path=os.defpath)
    assert real_ssh, "this test needs the OpenSSH client (apt install openssh-client)"
    c = launch_cluster(plan(), ["nosuchhost.invalid"], ssh=real_ssh,
                       head_address="127.0.0.1", state_dir=state_dir / "unreachable", progress=QUIET,
                       stop_at_exit=False)
    with pytest.raises(LaunchError, match=r"Node 1 \(nosuchhost.invalid\) cannot be reached over ssh") as err:
        c.wait_ready(120)
    assert "ssh nosuchhost.invalid true" in (err.value.hint or "")
    assert c.diagnosis is not None and "Could not resolve hostname" in c.diagnosis.evidence
    deadline = time.monotonic() + 60
    while c.head.pid and group_members(c.head.pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert c.head.pid is not None and group_members(c.head.pid) == []

"""What every node of a multi-node plan runs: the head here, each worker here or over ssh.

    plan_cluster(plan, workers=["local"] or ["gpu2", ...]) -> ClusterCommand
        .head      a ServeCommand for start() (this machine)
        .workers   a NodeCommand per worker: the argv run on this machine (vllm itself, or ssh)

Placeholders are filled in: `$HEAD_IP` with the head's address, `$IFACE_NAME`
(GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME) with the interface the user names.
The rendezvous ports (--master-port, --data-parallel-rpc-port) are bound on the
head, so free ones are picked here unless the plan pins them.

A worker on another host runs through ssh. Its command is an argv list until
the last step, where shlex.join makes the one string ssh hands the remote
shell. That string starts the worker in a session of its own (setsid) and
prints the session's id first, so `stop` can signal the whole remote group.
"""

from __future__ import annotations

import dataclasses
import re
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from workbench.errors import InputError, LaunchError
from workbench.recipes.argv import flag_value, has_flag, is_shell_variable, set_flag
from workbench.recipes.multinode import HEAD_IP, IFACE_NAME, node_serves_http
from workbench.server.command import PlanLike, ServeCommand, carried_env, prepare
from workbench.server.ports import free_port

__all__ = ["LOCAL", "PGID_MARKER", "SSH_OPTIONS", "ClusterCommand", "NodeCommand", "expected_engines",
           "plan_cluster", "remote_stop_argv", "ssh_argv"]

LOCAL = "local"  # a worker host name meaning "on this machine" (a one-box rehearsal)
PGID_MARKER = "workbench-node-pgid"
# No password prompt (it would hang a background start); give up on a dead host soon.
SSH_OPTIONS = ("-o", "BatchMode=yes", "-o", "ConnectTimeout=10")
# The one shell script of the remote side, fixed text: "$@" keeps the argv's words intact.
_REMOTE_SCRIPT = f'echo "{PGID_MARKER} $$"; exec "$@"'
_HOST_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.@:\[\]-]*$")
_SOCKET_ENV = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")


@dataclass(frozen=True)
class NodeCommand:
    """One worker node: what this machine runs for it."""

    rank: int
    host: str  # LOCAL or an ssh destination
    argv: list[str]  # executed here as-is: the vllm argv, or the ssh argv
    env: dict[str, str]  # added to this machine's environment (a local node's; ssh nodes carry theirs inside)
    remote_argv: list[str] | None = None  # what the worker host runs (ssh nodes)
    serves_http: bool = False
    port: int | None = None  # its HTTP port, when it serves HTTP

    @property
    def via(self) -> str:
        return "local" if self.host == LOCAL else "ssh"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class ClusterCommand:
    head: ServeCommand
    workers: list[NodeCommand]
    head_address: str
    iface: str | None
    expected_engines: list[str]  # the `engine` labels the head's /metrics shows once every engine is up
    notes: list[str] = field(default_factory=list)
    ssh: str = "ssh"

    def to_dict(self) -> dict[str, Any]:
        return {"head_address": self.head_address, "iface": self.iface, "expected_engines": self.expected_engines,
                "notes": self.notes, "ssh": self.ssh, "workers": [w.to_dict() for w in self.workers]}


def ssh_argv(host: str, remote_argv: Sequence[str], ssh: str = "ssh") -> list[str]:
    """The ssh argv that runs `remote_argv` on `host`: the command is one shlex.join-ed string,
    which the remote shell splits back into exactly these words."""
    return [ssh, *SSH_OPTIONS, "--", host, shlex.join(remote_argv)]


def remote_stop_argv(host: str, pgid: int, sig: str, ssh: str = "ssh") -> list[str]:
    """ssh argv that sends `sig` (TERM, KILL, or 0 to test) to the remote session `pgid`.
    No `--`: dash's kill (Debian's /bin/sh) takes `-SIG -PGID` but refuses `-SIG -- -PGID`."""
    return ssh_argv(host, ["kill", f"-{sig}", f"-{pgid}"], ssh)


def expected_engines(head_argv: Sequence[str]) -> list[str]:
    """The engine indexes the head's /metrics reports (the `engine` label): every DP rank
    when the head balances them all (internal LB), only its own under hybrid/external LB."""
    dp = int(flag_value(head_argv, "--data-parallel-size") or 1)
    local = int(flag_value(head_argv, "--data-parallel-size-local") or dp)
    if has_flag(head_argv, "--data-parallel-hybrid-lb") or has_flag(head_argv, "--data-parallel-external-lb"):
        return [str(i) for i in range(1 if local == 1 else local)]
    return [str(i) for i in range(dp)]


def _check_hosts(plan: PlanLike, workers: Sequence[str]) -> None:
    nodes = int(getattr(plan, "nodes", 1) or 1)
    if getattr(plan, "deploy_type", "single_node") != "multi_node" or nodes < 2:
        raise InputError("Worker hosts need a multi-node plan.",
                         hint="Plan two or more nodes, with a multi_node_* strategy (e.g. multi_node_tp_dp).",
                         settings=("nodes", "strategy"))
    if len(workers) != nodes - 1:
        raise InputError(f"{nodes} nodes run {nodes - 1} worker(s), but {len(workers)} worker host(s) are named.",
                         hint=f"Name one host per worker, {nodes - 1} in all (`local` runs a worker on this machine).",
                         settings={"workers": ",".join(["HOST"] * (nodes - 1))})
    for host in workers:
        if host != LOCAL and not _HOST_RE.match(host):
            raise InputError(f"{host!r} is not a host name ssh can take.",
                             hint="Give a host name, user@host or an address, or `local`.", settings=("workers",))


def _fill(words: Sequence[str], head_address: str) -> list[str]:
    out = [head_address if w == HEAD_IP else w for w in words]
    left = [w for w in out if is_shell_variable(w)]
    if left:
        raise InputError(f"The command still holds the placeholder(s) {', '.join(left)}.",
                         hint="Render without them, or give their values: the head's address and the network "
                         "interface between the nodes.", settings=("head_address", "iface"))
    return out


def _fill_env(env: dict[str, str], iface: str | None, notes: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in env.items():
        if value == IFACE_NAME:
            if iface is None:
                continue  # left to Gloo/NCCL's own choice; said once below
            value = iface
        if is_shell_variable(value):
            raise InputError(f"The environment variable {key}={value} is a placeholder.",
                             hint=f"Set {key} to its value in the extra vLLM flags or in the recipe.",
                             settings=("extra",))
        out[key] = value
    if iface is None and any(env.get(k) == IFACE_NAME for k in _SOCKET_ENV):
        notes.append("No network interface named: GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME are left unset, so "
                     "Gloo and NCCL pick one themselves; name the interface of the link between the nodes.")
    return out


def _with_ports(words: list[str], master_port: int | None, rpc_port: int | None) -> list[str]:
    if master_port is not None:
        words = set_flag(words, "--master-port", str(master_port))
    if rpc_port is not None:
        words = set_flag(words, "--data-parallel-rpc-port", str(rpc_port))
    return words


def plan_cluster(
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
    progress: Callable[[str], None] | None = None,
) -> ClusterCommand:
    """The head's ServeCommand and every worker's NodeCommand for a multi-node plan."""
    _check_hosts(plan, workers)
    remote = [w for w in workers if w != LOCAL]
    if head_address is None:
        if remote:
            raise InputError(f"Worker(s) {', '.join(remote)} must reach the head: its address is needed.",
                             hint="Give the head's address: this machine's address on the link to the workers "
                             "(`ip -br addr` lists them).", settings=("head_address",))
        head_address = "127.0.0.1"
    notes: list[str] = []
    env = _fill_env({**carried_env(), **plan.env}, iface, notes)
    head_rest = _fill(plan.argv[3:], head_address)
    worker_rests = [_fill(w[3:], head_address) for w in getattr(plan, "worker_argvs", [])]
    # Both rendezvous ports are bound on the head (this machine): free ones, unless pinned.
    master_port = free_port() if has_flag(head_rest, "--nnodes") and not has_flag(head_rest, "--master-port") else None
    rpc_port = (free_port() if has_flag(head_rest, "--data-parallel-size")
                and not has_flag(head_rest, "--data-parallel-rpc-port") else None)
    head_rest = _with_ports(head_rest, master_port, rpc_port)
    # vLLM binds the head's cross-node queues on VLLM_HOST_IP (else the default-route address).
    head_env = {**env, "VLLM_HOST_IP": head_address}
    head_plan = dataclasses.replace(  # type: ignore[type-var]
        plan, argv=[*plan.argv[:3], *head_rest], env=head_env, worker_argvs=[], worker_docker_argvs=[])
    head = prepare(head_plan, mode="local", python=python, host=host, port=port, progress=progress)
    model_at = head.argv.index("serve") + 1
    prefix, model = head.argv[:model_at], head.argv[model_at]
    served = ["--served-model-name", head.served_model] if flag_value(head_rest, "--served-model-name") is None else []
    nodes: list[NodeCommand] = []
    for rank, (where, rest) in enumerate(zip(workers, worker_rests), start=1):
        rest = _with_ports([*rest, *served], master_port, rpc_port)
        serves_http = node_serves_http(rest)
        node_port: int | None = None
        if serves_http:  # hybrid LB (multi_node_dep): this node has its own API server
            node_port = free_port() if where == LOCAL else head.port
            rest = set_flag(set_flag(rest, "--port", str(node_port)), "--host",
                            head.host if where == LOCAL else "0.0.0.0")
        node_env = {k: v for k, v in head.env.items() if k != "VLLM_API_KEY"}
        if where == LOCAL:
            nodes.append(NodeCommand(rank, where, [*prefix, model, *rest], node_env, None, serves_http, node_port))
            continue
        node_env.pop("VLLM_HOST_IP", None)  # the worker's own address is its business
        remote_argv = ["env", *(f"{k}={v}" for k, v in node_env.items()), worker_vllm, "serve", model, *rest]
        wrapped = ["setsid", "--wait", "sh", "-c", _REMOTE_SCRIPT, "workbench-node", *remote_argv]
        nodes.append(NodeCommand(rank, where, ssh_argv(where, wrapped, ssh), {}, remote_argv, serves_http, node_port))
    if remote and getattr(plan, "local_build", None):
        notes.append(f"The model is this machine's local build ({model}); each worker needs it at the same path.")
    return ClusterCommand(head, nodes, head_address, iface, expected_engines(head.argv), notes, ssh)

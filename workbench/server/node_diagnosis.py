"""Why a node of a multi-node deployment failed, read from that node's log.

Tried before the single-server rules (workbench.server.diagnosis), which still
answer anything these do not. Messages are ssh's, Gloo's, NCCL's, torch's and
vLLM 0.32's own; the interface one was captured from a real run
(tests/fixtures/launch-logs/multinode/dp_worker_wrong_iface.log).
"""

from __future__ import annotations

import re
import signal
from pathlib import Path

from workbench.server.diagnosis import Diagnosis, diagnose, last_lines

PGID_SEEN = "workbench-node-pgid"  # the remote side's first line (workbench.server.nodes.PGID_MARKER)

__all__ = ["ENGINE_VERSION", "diagnose_node", "engine_version", "version_mismatch"]

# The version each node's log states: the engine core's line (head and DP workers) and
# the headless multi-node TP/PP executor's (vLLM 0.32 entrypoints/cli/serve.py, v1/engine/core.py).
ENGINE_VERSION = re.compile(r"Initializing a V1 LLM engine \(v([^)\s]+)\)|Launching vLLM \(v([^)\s]+)\) headless")

_SSH_UNREACHABLE = re.compile(
    r"^(ssh: .*(?:Could not resolve hostname|connect to host|No route to host|Connection refused|"
    r"Connection timed out|Network is unreachable).*|.*Permission denied \(publickey.*|"
    r".*Host key verification failed.*)$", re.MULTILINE)
_NO_INTERFACE = re.compile(r"Unable to find address for: (\S+)|Bootstrap : no socket interface found")
_IN_USE = re.compile(r"EADDRINUSE|[Aa]ddress already in use")
_PORT = re.compile(r"port: (\d+)|:(\d+)\b.*[Aa]ddress already in use")
_NO_VLLM = re.compile(r"^.*(?:vllm|env): .*(?:command not found|No such file or directory).*$|"
                      r"^.*: \d+: .*vllm: not found.*$", re.MULTILINE)
_NO_HEAD = re.compile(r"Did not receive response from front-end process within \d+ minutes|"
                      r"DistNetworkError: The client socket has timed out.*")


_VERSION_WITHIN = 512 * 1024  # the engine states its version early in its log


def engine_version(log_path: Path | None) -> str | None:
    """The vLLM version a node's (or the head's) log states near its start, or None (not yet, or no log)."""
    if log_path is None:
        return None
    try:
        with log_path.open("rb") as f:
            text = f.read(_VERSION_WITHIN).decode(errors="replace")
    except OSError:
        return None
    found = ENGINE_VERSION.search(text)
    return (found.group(1) or found.group(2)) if found else None


def version_mismatch(head_version: str | None, node_version: str | None, rank: int, host: str) -> Diagnosis | None:
    """A diagnosis when node `rank` runs another vLLM than the head (both read from the logs)."""
    if not head_version or not node_version or head_version == node_version:
        return None
    return Diagnosis(
        "vllm_version_mismatch",
        f"Node {rank} ({host}) runs vLLM {node_version}, the head runs vLLM {head_version}; the nodes of one "
        "deployment must run the same vLLM.",
        f"Install vLLM {head_version} on {host} (or the head's on every node), then start again.",
        f"v{node_version} vs v{head_version}",
    )


def _line_of(text: str, match: re.Match[str]) -> str:
    start = text.rfind("\n", 0, match.start()) + 1
    end = text.find("\n", match.end())
    return text[start: end if end != -1 else None].strip()


def diagnose_node(log_text: str, *, rank: int, host: str, via: str, exit_code: int | None,
                  head_address: str = "") -> Diagnosis:
    """Why worker node `rank` (on `host`, run `via` local or ssh) stopped."""
    where = f"Node {rank} ({host})"
    tail = last_lines(log_text)
    found = _SSH_UNREACHABLE.search(log_text) if via == "ssh" else None
    if found or (via == "ssh" and exit_code == 255 and PGID_SEEN not in log_text):
        return Diagnosis(
            "host_unreachable", f"{where} cannot be reached over ssh.",
            f"Check that `ssh {host} true` works from here without a password prompt (a key in ssh-agent or "
            "~/.ssh/config), that the name resolves and that the host is up.",
            _line_of(log_text, found) if found else f"ssh exit code {exit_code}", exit_code, tail)
    found = _NO_INTERFACE.search(log_text)
    if found:
        name = found.group(1) or "the one named"
        return Diagnosis(
            "wrong_interface", f"{where}: the socket interface {name} does not exist there "
            "(GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME).",
            "Name the network interface that carries the link between the nodes and exists on every node "
            "(`ip -br addr` lists them; on a DGX Spark `ibdev2netdev` shows the QSFP one as (Up)).",
            _line_of(log_text, found), exit_code, tail, settings={"iface": None})
    found = _IN_USE.search(log_text)
    if found:
        port = _PORT.search(log_text)
        which = f"port {port.group(1) or port.group(2)}" if port else "a port it needs"
        return Diagnosis(
            "address_in_use", f"{where}: {which} is already in use.",
            "Stop what holds it (an earlier deployment still running), or leave vLLM's --master-port and "
            "--data-parallel-rpc-port unset so the workbench picks free ones.",
            _line_of(log_text, found), exit_code, tail)
    found = _NO_VLLM.search(log_text) if via == "ssh" else None
    if found:
        return Diagnosis(
            "missing_dependency", f"{where}: the vllm command is not found by a non-interactive ssh shell.",
            f"Install vLLM on {host}, or give the path of the workers' vllm command (e.g. a venv's bin/vllm).",
            _line_of(log_text, found), exit_code, tail, settings={"worker_vllm": None})
    found = _NO_HEAD.search(log_text)
    if found:
        return Diagnosis(
            "head_unreachable", f"{where} could not reach the head at {head_address or 'its address'}.",
            "The head's address must be this machine's address on the link to the workers, and the firewall "
            "must let the workers connect to it (the rendezvous ports and ephemeral ones).",
            _line_of(log_text, found), exit_code, tail, settings={"head_address": None})
    generic = diagnose(log_text, exit_code=exit_code)
    if generic.cause == "killed" or (generic.cause in ("unknown", "engine_died") and _by_signal(exit_code)):
        sig = _by_signal(exit_code) or "a signal"
        return Diagnosis(
            "killed", f"{where} was killed by {sig} from outside the workbench. The head may still answer "
            "/health, but requests it routes to that node's engine never return.",
            "Stop the deployment (python -m workbench stop) and start it again; if it was the out-of-memory "
            "killer (`dmesg` on that host), lower --max-model-len or --max-num-seqs.",
            generic.evidence, exit_code, tail)
    return Diagnosis(generic.cause, f"{where}: {generic.summary}", generic.fix, generic.evidence, exit_code, tail)


def _by_signal(exit_code: int | None) -> str | None:
    if exit_code is None or exit_code >= 0:
        return None
    try:
        return signal.Signals(-exit_code).name
    except ValueError:
        return None

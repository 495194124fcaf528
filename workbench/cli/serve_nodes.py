"""`serve --nodes N --workers HOST,...`: a multi-node deployment from the shell, and its node lines.

All the work is in workbench.server.cluster; this module parses options and prints.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from workbench.errors import LaunchError
from workbench.server.cluster import launch_cluster, load_cluster, node_rows
from workbench.server.handle import ServerProcess
from workbench.server.phases import Status

__all__ = ["add_node_arguments", "has_live_workers", "node_lines", "serve_nodes_command"]


def _hosts(text: str) -> list[str]:
    hosts = [t.strip() for t in text.split(",") if t.strip()]
    if not hosts:
        raise argparse.ArgumentTypeError("name at least one host (or `local`)")
    return hosts


def add_node_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("several nodes (with --nodes N and a multi_node_* strategy)")
    g.add_argument("--workers", type=_hosts, metavar="HOST[,HOST...]",
                   help="one host per worker node, reached with ssh; `local` runs that worker on this "
                   "machine (a one-box rehearsal). The head runs here.")
    g.add_argument("--ssh", default="ssh", metavar="PATH", help="the ssh client to use (default: ssh)")
    g.add_argument("--worker-vllm", default="vllm", metavar="PATH",
                   help="the vllm command on the worker hosts (default: vllm on their PATH)")


def serve_nodes_command(args: argparse.Namespace, plan: Any, print_event: Any) -> int:
    cluster = launch_cluster(plan, args.workers, head_address=args.head_address, iface=args.iface,
                             python=args.python, host=args.host, ssh=args.ssh, worker_vllm=args.worker_vllm,
                             on_event=print_event, progress=print, stop_at_exit=not args.keep)
    for row in cluster.rows():
        print(f"node {row['rank']} ({row['role']}, {row['host']}): pid {row['pid']}, log {row['log']}", flush=True)
    cluster.wait_ready(args.timeout)
    head = cluster.head
    print(f"Ready in {cluster.time_to_ready_s:.1f} s: {len(cluster.nodes) + 1} nodes, engines "
          f"{', '.join(cluster.engines_seen)} reporting; {head.base_url}  (OpenAI base URL {head.openai_base_url}, "
          f"model {head.model})", flush=True)
    if args.keep:
        print(f"Left running; stop every node with: python -m workbench stop --server-port {head.port}")
        return 0
    print("Serving until Ctrl-C (or run with --keep to leave it running).", flush=True)
    while cluster.status is Status.READY:
        time.sleep(1)
    if cluster.status is Status.FAILED and cluster.diagnosis:
        cluster.stop(timeout=15)
        raise LaunchError(f"The multi-node deployment stopped: {cluster.diagnosis.summary}",
                          hint=cluster.diagnosis.fix)
    return 0


def node_lines(head: ServerProcess) -> list[str]:
    """`status` lines for each worker node of a multi-node head (none for a single server)."""
    cluster = load_cluster(head)
    if cluster is None:
        return []
    lines = [f"  {len(cluster.nodes) + 1} nodes; engines expected {', '.join(cluster.expected_engines)}, "
             f"reporting {', '.join(cluster.engines_seen) or 'none yet'}"]
    for row in node_rows(head, cluster):
        lines.append(f"  node {row['rank']} {row['role']:<6} {row['host']:<14} {row['status']:<8} "
                     f"{row['phase']:<16} pid {row['pid']}  {row['detail']}")
        if row["role"] == "worker":
            lines.append(f"    log: {row['log']}")
    return lines


def has_live_workers(head: ServerProcess) -> bool:
    cluster = load_cluster(head)
    return cluster is not None and any(n.is_alive() for n in cluster.nodes)


def print_node_failure(head: ServerProcess) -> None:
    cluster = load_cluster(head)
    if cluster and cluster.diagnosis:
        print(cluster.diagnosis.describe(), file=sys.stderr)

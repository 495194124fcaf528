"""The parallel flags of one node of a multi-node strategy (vLLM's own multi-node engine).

Upstream's command synthesis (vllm-project/recipes, src/lib/command-synthesis.js)
derives the head's and each worker's flags from the strategy's
`parallel_flag` and `parallelism`; this module does the same, node by node:

    multi_node_tp / _tep   -tp G*N --nnodes N --node-rank r --master-addr $HEAD_IP  (+ --headless, r > 0)
    multi_node_tp_pp       -tp G -pp N --nnodes N --node-rank r --master-addr $HEAD_IP  (+ --headless)
    multi_node_tp_dp       -tp G -dp N -dpl 1 -dpa $HEAD_IP  (+ -dpr r --headless, r > 0)
    multi_node_dep         --enable-expert-parallel --data-parallel-hybrid-lb
                           -dp G*N -dpl G -dpa $HEAD_IP  (+ -dpr r*G, r > 0; every node serves HTTP)

(G: GPUs per node, N: nodes, r: the node's rank.) One deliberate difference:
upstream renders the tp_dp worker without `--headless`. On vLLM 0.32 a start
rank without `--headless` and a local DP size of 1 turns the worker into an
external-LB server (engine/arg_utils.py: "autoswitch to
data_parallel_external_lb"), while the head, with neither, stays internal-LB and
refuses it ("Remote engine 1 must use --headless unless in external or hybrid
dp lb mode", v1/engine/utils.py). vLLM's data-parallel docs pair the start rank
with `--headless`; so does this module, and that pair was run on the CPU build.

Ports are left to vLLM's defaults (--master-port 29501, --data-parallel-rpc-port
29550), as upstream does; the launcher sets free ones.
"""

from __future__ import annotations

from workbench.recipes.catalog import Strategy

__all__ = ["HEAD_IP", "IFACE_NAME", "node_parallel_args", "node_serves_http", "strategy_tensor_parallel"]

HEAD_IP = "$HEAD_IP"  # upstream's placeholder for the rank-0 node's address
IFACE_NAME = "$IFACE_NAME"  # upstream's placeholder for the interconnect's network interface


def strategy_tensor_parallel(strategy: Strategy, gpus_per_node: int, nodes: int) -> int:
    """The tensor-parallel size of a multi-node strategy: within a node for the
    TP-inside-a-node layouts (tp_dp, tp_pp), 1 for DEP (one DP rank per GPU, the
    experts split across them), across every GPU otherwise."""
    if strategy.parallel_flag == "--data-parallel-size":
        return 1
    if strategy.parallelism in ("tp_dp", "tp_pp"):
        return gpus_per_node
    return gpus_per_node * nodes


def node_parallel_args(strategy: Strategy, gpus_per_node: int, nodes: int, rank: int,
                       head_address: str = HEAD_IP) -> list[str]:
    """The strategy's vllm_args and parallel flags for node `rank` (0 = the head)."""
    args = list(strategy.vllm_args)
    worker = rank > 0
    if strategy.parallel_flag == "--data-parallel-size":  # multi_node_dep
        args += ["--data-parallel-size", str(gpus_per_node * nodes),
                 "--data-parallel-size-local", str(gpus_per_node),
                 "--data-parallel-address", head_address]
        if worker:
            args += ["--data-parallel-start-rank", str(rank * gpus_per_node)]
        return args
    if strategy.parallelism == "tp_dp":
        args += ["--tensor-parallel-size", str(gpus_per_node), "--data-parallel-size", str(nodes),
                 "--data-parallel-size-local", "1", "--data-parallel-address", head_address]
        if worker:
            args += ["--data-parallel-start-rank", str(rank), "--headless"]
        return args
    if strategy.parallelism == "tp_pp":
        args += ["--tensor-parallel-size", str(gpus_per_node), "--pipeline-parallel-size", str(nodes)]
    else:
        args += [strategy.parallel_flag, str(gpus_per_node * nodes)]
    args += ["--nnodes", str(nodes), "--node-rank", str(rank), "--master-addr", head_address]
    if worker:
        args.append("--headless")
    return args


def node_serves_http(argv: list[str]) -> bool:
    """Does this node run an API server? Every node but a `--headless` one does."""
    return "--headless" not in argv

"""`--format lws`: a LeaderWorkerSet (kubernetes-sigs/lws, the API vLLM's multi-node guide uses).

One group is one copy of the deployment: the leader pod runs the head's command, each
worker pod a worker's, and LWS restarts the group together when a pod fails. The
head's address is the leader pod's DNS name, which LWS gives every pod of the group
as `LWS_LEADER_ADDRESS`; a worker's rank is `LWS_WORKER_INDEX` (1, 2, ...). Kubernetes
fills `$(NAME)` in a container's command and args from its environment, so the leader's
args are the head's command token for token with `$(LWS_LEADER_ADDRESS)` as the address.
A one-node strategy renders a group of one pod (a Deployment does the same without LWS).
"""

from __future__ import annotations

from typing import Any

from workbench.deploy.kubernetes import SERVES_HTTP, cache_claim, service
from workbench.deploy.pod import DeployOptions, Sizing, head_address_argv, labels, pod_annotations, pod_spec, vllm_container
from workbench.recipes import LaunchPlan
from workbench.recipes.argv import shell_quote
from workbench.recipes.multinode import node_serves_http

__all__ = ["LEADER_ADDRESS", "LWS_NAME_LABEL", "WORKER_INDEX", "build", "worker_command"]

LEADER_ADDRESS = "$(LWS_LEADER_ADDRESS)"
WORKER_INDEX = "$(LWS_WORKER_INDEX)"
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"  # set by LWS on every pod of the set


def worker_command(plan: LaunchPlan) -> tuple[list[str], list[str] | None]:
    """The worker template's argv (rank 1's, with the rank as `$(LWS_WORKER_INDEX)`), and, where a rank
    is a multiple of it (DEP's first data-parallel rank of a node, `rank x GPUs`), a shell command that
    computes it instead (Kubernetes substitutes names, it does no arithmetic)."""
    argv = head_address_argv(plan.worker_argvs[0], LEADER_ADDRESS)
    per_rank = None
    for i, token in enumerate(argv[:-1]):
        if token == "--node-rank":
            argv[i + 1] = WORKER_INDEX
        elif token == "--data-parallel-start-rank":
            if argv[i + 1] == "1":
                argv[i + 1] = WORKER_INDEX
            else:
                per_rank = (i + 1, int(argv[i + 1]))
    if per_rank is None:
        return argv, None
    index, step = per_rank
    # `$$` is Kubernetes' escape for `$`: the shell, not the kubelet, evaluates $((...)).
    words = [f'"$$((LWS_WORKER_INDEX * {step}))"' if j == index else shell_quote(t).replace("$", "$$")
             if not t.startswith("$(") else t for j, t in enumerate(argv)]
    return argv, ["/bin/sh", "-c", "exec " + " ".join(words)]


def _template(plan: LaunchPlan, name: str, size: Sizing, opts: DeployOptions, container: dict[str, Any],
              component: str, serves: bool) -> dict[str, Any]:
    pod_labels = {**labels(name, component), SERVES_HTTP: str(serves).lower()}
    return {"metadata": {"labels": pod_labels, "annotations": pod_annotations(plan, size)},
            "spec": pod_spec(plan, container, size, f"{name}-hf-cache")}


def build(plan: LaunchPlan, name: str, size: Sizing, opts: DeployOptions) -> tuple[list[dict[str, Any]], str, list[str]]:
    group = size.pods_per_group
    leader_argv = head_address_argv(plan.argv, LEADER_ADDRESS)
    leader = vllm_container(plan, leader_argv, size, opts, serves_http=True)
    template: dict[str, Any] = {"size": group, "restartPolicy": "RecreateGroupOnPodRestart"}
    notes: list[str] = []
    if group == 1:
        # One pod per group: LWS runs the worker template as the leader when there is no leader template.
        template["workerTemplate"] = _template(plan, name, size, opts, leader, "leader", True)
        notes.append(f"{plan.strategy} runs on one node: each group is one pod (a Deployment, --format k8s, "
                     "does the same without the LWS controller).")
    else:
        worker_argv, shell = worker_command(plan)
        serves = node_serves_http(worker_argv)
        worker = vllm_container(plan, worker_argv, size, opts, serves_http=serves, command=shell)
        template["leaderTemplate"] = _template(plan, name, size, opts, leader, "leader", True)
        template["workerTemplate"] = _template(plan, name, size, opts, worker, "worker", serves)
        notes.append(f"Groups of {group} pods, one per node, each with that node's {size.gpus_per_pod} GPUs; the "
                     "cache volume is shared (ReadWriteMany).")
    meta: dict[str, Any] = {"name": name, **({"namespace": opts.namespace} if opts.namespace else {}),
                            "labels": labels(name, "server")}
    lws = {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "metadata": meta,
           "spec": {"replicas": opts.replicas, "startupPolicy": "LeaderCreated", "leaderWorkerTemplate": template}}
    claim = cache_claim(name, size, opts, shared=group > 1 or opts.replicas > 1)
    # LWS itself makes a headless Service named after the set (the pods' DNS names): this one is -api.
    api = service(name, plan, opts, {LWS_NAME_LABEL: name, SERVES_HTTP: "true"}, f"{name}-api")
    return [claim, lws, api], f"A LeaderWorkerSet of {group}-pod groups, its Service and the Hugging Face cache", notes

"""`--format k8s`: plain Kubernetes objects, no operator or CRD needed.

One node: a Deployment running the plan's command, a Service in front of it, and a
PersistentVolumeClaim for the Hugging Face cache. A multi-node strategy: one
Deployment per node (each running that node's command), a headless Service that
gives the head pod a DNS name for the workers (`--master-addr`), and the Service
in front of the nodes that serve HTTP. A LeaderWorkerSet (`--format lws`) does the
same and also restarts the group together; these Deployments do not.
"""

from __future__ import annotations

from typing import Any

from workbench.deploy.pod import (
    ANNOTATION,
    DeployOptions,
    Sizing,
    head_address_argv,
    labels,
    pod_annotations,
    pod_spec,
    vllm_container,
)
from workbench.errors import SelectionError
from workbench.recipes import LaunchPlan
from workbench.recipes.multinode import node_serves_http

__all__ = ["NODE_RANK", "SERVES_HTTP", "build", "cache_claim", "service"]

SERVES_HTTP = f"{ANNOTATION}/serves-http"
NODE_RANK = f"{ANNOTATION}/node-rank"


def cache_claim(name: str, size: Sizing, opts: DeployOptions, *, shared: bool) -> dict[str, Any]:
    """The Hugging Face cache: ReadWriteOnce for one pod, ReadWriteMany when pods on several nodes share it."""
    spec: dict[str, Any] = {"accessModes": ["ReadWriteMany" if shared else "ReadWriteOnce"],
                            "resources": {"requests": {"storage": f"{size.cache_gib}Gi"}}}
    if opts.storage_class:
        spec["storageClassName"] = opts.storage_class
    meta: dict[str, Any] = {"name": f"{name}-hf-cache", **({"namespace": opts.namespace} if opts.namespace else {}),
                            "labels": labels(name, "hf-cache")}
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta, "spec": spec}


def service(app: str, plan: LaunchPlan, opts: DeployOptions, selector: dict[str, str],
            service_name: str | None = None) -> dict[str, Any]:
    """The Service clients use: the plan's port, in front of the pods that serve HTTP."""
    meta: dict[str, Any] = {"name": service_name or app, **({"namespace": opts.namespace} if opts.namespace else {}),
                            "labels": labels(app, "api"),
                            "annotations": {f"{ANNOTATION}/served-model-name": plan.served_model_name}}
    return {"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": {
        "type": "ClusterIP", "selector": selector,
        "ports": [{"name": "http", "port": plan.port, "targetPort": "http", "protocol": "TCP"}]}}


def _deployment(app: str, deploy_name: str, plan: LaunchPlan, container: dict[str, Any], size: Sizing,
                opts: DeployOptions, replicas: int, pod_labels: dict[str, str]) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": deploy_name, **({"namespace": opts.namespace} if opts.namespace else {}),
                            "labels": pod_labels, "annotations": {f"{ANNOTATION}/recipe": plan.recipe_id}}
    selector = {"app.kubernetes.io/name": app, "app.kubernetes.io/component": pod_labels["app.kubernetes.io/component"]}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta, "spec": {
        "replicas": replicas,
        # The old pod's GPUs (and a ReadWriteOnce cache) must be free before the new pod can start.
        "strategy": {"type": "Recreate"},
        "selector": {"matchLabels": selector},
        "template": {"metadata": {"labels": pod_labels, "annotations": pod_annotations(plan, size)},
                     "spec": pod_spec(plan, container, size, f"{app}-hf-cache")}}}


def build(plan: LaunchPlan, name: str, size: Sizing, opts: DeployOptions) -> tuple[list[dict[str, Any]], str, list[str]]:
    multi = plan.deploy_type == "multi_node"
    claim = cache_claim(name, size, opts, shared=multi or opts.replicas > 1)
    if not multi:
        pod_labels = {**labels(name, "server"), SERVES_HTTP: "true"}
        container = vllm_container(plan, plan.argv, size, opts, serves_http=True)
        deploy = _deployment(name, name, plan, container, size, opts, opts.replicas, pod_labels)
        api = service(name, plan, opts, {"app.kubernetes.io/name": name, SERVES_HTTP: "true"})
        return [claim, deploy, api], "A Deployment, its Service and the Hugging Face cache", []
    if opts.replicas > 1:
        raise SelectionError(f"{opts.replicas} copies of a {plan.nodes}-node deployment: plain Deployments run one.",
                             hint="Use the LeaderWorkerSet format, whose replicas are whole groups.",
                             settings={"replicas": 1})
    head = f"{name}-head"
    headless: dict[str, Any] = {"apiVersion": "v1", "kind": "Service", "metadata": {
        "name": head, **({"namespace": opts.namespace} if opts.namespace else {}), "labels": labels(name, "head")},
        "spec": {"clusterIP": "None",
                 # The head is not ready until its workers have joined: its name must resolve before that.
                 "publishNotReadyAddresses": True,
                 "selector": {"app.kubernetes.io/name": name, NODE_RANK: "0"}}}
    docs: list[dict[str, Any]] = [claim, headless]
    for rank, argv in enumerate([plan.argv, *plan.worker_argvs]):
        node_argv = head_address_argv(argv, head)
        serves = node_serves_http(node_argv)
        pod_labels = {**labels(name, f"node-{rank}"), NODE_RANK: str(rank), SERVES_HTTP: str(serves).lower()}
        container = vllm_container(plan, node_argv, size, opts, serves_http=serves)
        docs.append(_deployment(name, f"{name}-node-{rank}", plan, container, size, opts, 1, pod_labels))
    docs.append(service(name, plan, opts, {"app.kubernetes.io/name": name, SERVES_HTTP: "true"}))
    notes = [f"{plan.nodes} Deployments, one per node, each requesting that node's {size.gpus_per_pod} GPUs; "
             "the cache volume is shared (ReadWriteMany). A LeaderWorkerSet also restarts the group together."]
    return docs, f"{plan.nodes} Deployments (one per node), their Services and the Hugging Face cache", notes

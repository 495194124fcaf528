"""`--format helm`: a values file for vLLM production-stack's chart (vllm-stack 0.1.12).

The chart builds the engine's command itself (templates/deployment-vllm-multi.yaml):
`vllm serve <modelURL> --host 0.0.0.0 --port <containerPort>`, then
`--enable-prefix-caching` or `--no-enable-prefix-caching` (always one of them), then
`--tensor-parallel-size` from `vllmConfig.tensorParallelSize` (which also mounts /dev/shm
of `shmSize`), then `vllmConfig.extraArgs` as given. So the plan's flags go to
`extraArgs`, less the ones the chart writes itself; `engine_command` gives the command the
chart will run, to compare with the plan's.

A multi-node strategy becomes the chart's KubeRay mode (`raySpec`, templates/ray-cluster.yaml):
the chart starts a Ray cluster of `replicaCount` workers plus a head and runs vLLM on the head
with `--distributed-executor-backend ray`, so vLLM's own multi-node flags (`--nnodes`,
`--node-rank`, `--master-addr`, `--headless`, the data-parallel address and local size) are
left out, and data parallelism runs on Ray (`--data-parallel-backend ray`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from workbench.deploy.pod import GPU_PRODUCTS, DeployOptions, Sizing, plan_env, pod_annotations
from workbench.recipes import LaunchPlan
from workbench.recipes.argv import flag_values, units

__all__ = ["CHART", "CHART_WRITES", "NATIVE_MULTI_NODE", "build", "engine_command", "image_parts"]

CHART = "vllm-stack 0.1.12 (vllm-project/production-stack)"
CHART_WRITES = ("--host", "--port", "--tensor-parallel-size", "--enable-prefix-caching", "--no-enable-prefix-caching")
NATIVE_MULTI_NODE = ("--nnodes", "--node-rank", "--master-addr", "--master-port", "--headless",
                     "--data-parallel-address", "--data-parallel-size-local", "--data-parallel-start-rank",
                     "--data-parallel-rpc-port")


def image_parts(image: str) -> tuple[str, str]:
    """("repo", "tag") of an image reference (a registry's :port is not a tag)."""
    repo, sep, tag = image.rpartition(":")
    if not sep or "/" in tag:
        return image, "latest"
    return repo, tag


def _extra_args(argv: list[str], multi: bool) -> list[str]:
    drop = set(CHART_WRITES) | (set(NATIVE_MULTI_NODE) if multi else set())
    out = [t for u in units(argv[3:]) if u.name not in drop for t in u.tokens()]
    if multi and "--data-parallel-size" in out:
        out += ["--data-parallel-backend", "ray"]
    return out


def _probe(port: int, period: int, failures: int) -> dict[str, Any]:
    return {"initialDelaySeconds": 0, "periodSeconds": period, "failureThreshold": failures,
            "httpGet": {"path": "/health", "port": port}}


def build(plan: LaunchPlan, name: str, size: Sizing, opts: DeployOptions) -> tuple[list[dict[str, Any]], str, list[str]]:
    multi = plan.deploy_type == "multi_node"
    fv = flag_values(plan.argv)
    repo, tag = image_parts(plan.docker_image)
    prefix = "--no-enable-prefix-caching" not in fv
    vllm_config: dict[str, Any] = {"enablePrefixCaching": prefix}
    tp = fv.get("--tensor-parallel-size")
    # tensorParallelSize is also what makes the chart mount /dev/shm; 1 when the plan sets none.
    vllm_config["tensorParallelSize"] = int(tp) if tp and tp.isdigit() else 1
    vllm_config["extraArgs"] = _extra_args(plan.argv, multi)
    model: dict[str, Any] = {
        "name": name,
        "annotations": {"workbench/recipe": plan.recipe_id},
        "podAnnotations": pod_annotations(plan, size),
        "repository": repo,
        "tag": tag,
        "modelURL": plan.model_id,
        "replicaCount": (plan.nodes - 1) if multi else opts.replicas,
        "requestCPU": size.cpu,
        "requestMemory": f"{size.memory_gib}Gi",
        "requestGPU": size.gpus_per_pod,
        "pvcStorage": f"{size.cache_gib}Gi",
        "pvcAccessMode": ["ReadWriteMany" if multi or opts.replicas > 1 else "ReadWriteOnce"],
        "shmSize": f"{size.shm_gib}Gi",
        "hf_token": {"secretName": opts.hf_token_secret, "secretKey": opts.hf_token_key},
        "env": plan_env(plan),
        "vllmConfig": vllm_config,
    }
    if opts.storage_class:
        model["storageClass"] = opts.storage_class
    if plan.hardware in GPU_PRODUCTS:
        model["nodeSelectorTerms"] = [{"matchExpressions": [
            {"key": "nvidia.com/gpu.product", "operator": "In", "values": list(GPU_PRODUCTS[plan.hardware])}]}]
    if not size.gpus_per_pod:
        model["runtimeClassName"] = ""  # the chart's default is "nvidia"; a CPU engine needs none
    if multi:
        model["raySpec"] = {"enabled": True, "headNode": {
            "requestCPU": size.cpu, "requestMemory": f"{size.memory_gib}Gi", "requestGPU": size.gpus_per_pod}}
    values = {"servingEngineSpec": {
        "containerPort": plan.port,
        "servicePort": plan.port,
        "startupProbe": _probe(plan.port, 10, size.startup_failure_threshold),
        "readinessProbe": _probe(plan.port, 10, 3),
        "livenessProbe": _probe(plan.port, 30, 5),
        "modelSpec": [model],
    }}
    notes = [f"helm install {name} vllm/vllm-stack --version 0.1.12 -f {name}-values.yaml "
             "(the chart's repository: https://vllm-project.github.io/production-stack)"]
    if multi:
        notes.append(f"{plan.strategy} runs on the chart's KubeRay cluster (a head and {plan.nodes - 1} worker(s)); "
                     "vLLM's own multi-node flags are left out and Ray places the ranks: install the KubeRay "
                     "operator first. For vLLM's own multi-node engine, use the LeaderWorkerSet.")
    if plan.env:
        notes.append("The plan's environment goes to modelSpec.env; the chart adds HF_HOME and its own variables.")
    return [values], f"Values for {CHART}", notes


def engine_command(values: Mapping[str, Any]) -> list[str]:
    """The command the chart runs for the first model, for the fields `build` sets (what the templates
    named in this module's docstring write, in their order)."""
    engine = values["servingEngineSpec"]
    model = engine["modelSpec"][0]
    cfg = model["vllmConfig"]
    ray = bool((model.get("raySpec") or {}).get("enabled"))
    argv = ["vllm", "serve", model["modelURL"], "--host", "0.0.0.0", "--port", str(engine.get("containerPort", 8000))]
    if ray:
        argv += ["--distributed-executor-backend", "ray"]
    if cfg.get("enablePrefixCaching"):
        argv.append("--enable-prefix-caching")
    elif not ray:
        argv.append("--no-enable-prefix-caching")
    if "tensorParallelSize" in cfg:
        argv += ["--tensor-parallel-size", str(cfg["tensorParallelSize"])]
    return argv + [str(t) for t in cfg.get("extraArgs") or []]

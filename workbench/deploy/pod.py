"""What every manifest format shares: names, sizing, and the vLLM pod one node runs.

The container runs the plan's own argv: `command` is its first two tokens
(`vllm serve`) and `args` the rest, so `command + args` is the rendered command
token for token. What an operator would otherwise forget is added around it:
the GPU request, /dev/shm as a memory-backed volume, the Hugging Face cache on
a volume, the token from a Secret, probes on /health, and a node affinity for
the GPU product.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from workbench.errors import InputError, SelectionError
from workbench.planner import MemoryPlan
from workbench.recipes import Catalog, HardwareProfile, LaunchPlan
from workbench.recipes.argv import flag_value, flag_values
from workbench.recipes.multinode import HEAD_IP, IFACE_NAME

__all__ = ["ANNOTATION", "DeployOptions", "GPU_PRODUCTS", "HF_CACHE", "Sizing", "check_name", "default_name",
           "gpu_affinity", "head_address_argv", "plan_env", "pod_annotations", "pod_spec", "sizing", "vllm_container"]

ANNOTATION = "workbench"  # the prefix of the provenance labels and annotations
HF_CACHE = "/root/.cache/huggingface"  # where the images' vLLM looks, as the docker command mounts it
NAME_MAX = 40  # leaves room for the suffixes the objects add (-hf-cache, -node-15, LWS's -<group>-<index>)
_NAME_RE = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
# The pod network's interface in the usual CNI setups; a secondary (RDMA) network has its own name.
POD_INTERFACE = "eth0"

# GPU Feature Discovery labels nodes `nvidia.com/gpu.product=<NVML name, spaces as dashes>`
# (NVIDIA/k8s-device-plugin internal/lm/resource.go). Values seen on real nodes; a profile without
# one gets no affinity (and a comment saying so) rather than a guess that would never schedule.
GPU_PRODUCTS: dict[str, tuple[str, ...]] = {
    "h100": ("NVIDIA-H100-80GB-HBM3", "NVIDIA-H100-SXM5-80GB"),
    "h200": ("NVIDIA-H200",),  # tests/fixtures/nvidia-h200-nvml: nvidia-smi -L says "NVIDIA H200"
    "b200": ("NVIDIA-B200",),
    "gb200": ("NVIDIA-GB200",),
    "a100": ("NVIDIA-A100-SXM4-80GB",),
}

# Start-up budget, for the startup probe: assumptions, not measurements (raise `startup_s` for
# slow storage). The first start downloads the weights into the cache volume, then loads them,
# then compiles (torch.compile) and captures CUDA graphs.
DOWNLOAD_S_PER_GIB = 10  # about 100 MiB/s from the Hub
LOAD_S_PER_GIB = 2  # about 500 MiB/s from the volume
COMPILE_S = 600
PROBE_PERIOD_S = 10


@dataclass(frozen=True)
class DeployOptions:
    """What the plan does not say about a cluster. None means "derived from the plan"."""

    name: str | None = None
    namespace: str | None = None
    hf_token_secret: str = "hf-token"  # a Secret the operator creates; its value never appears here
    hf_token_key: str = "HF_TOKEN"
    storage_class: str | None = None
    replicas: int = 1
    startup_s: int | None = None


@dataclass(frozen=True)
class Sizing:
    """Per pod: GPUs, shared memory, requests; the cache volume; the start-up budget; and how each was had."""

    pods_per_group: int
    gpus_per_pod: int
    shm_gib: int
    memory_gib: int
    cpu: int
    cache_gib: int
    startup_s: int
    weights_gib: float
    how: list[str] = field(default_factory=list)

    @property
    def startup_failure_threshold(self) -> int:
        return max(1, math.ceil(self.startup_s / PROBE_PERIOD_S))


def default_name(plan: LaunchPlan) -> str:
    """A Kubernetes name from the served model name (or the model id's last part)."""
    return default_like(plan.served_model_name.rsplit("/", 1)[-1])


def check_name(name: str, what: str = "name", limit: int = NAME_MAX) -> str:
    """`name` if it is a valid Kubernetes name for these objects, else an InputError saying why."""
    if len(name) > limit or not _NAME_RE.match(name):
        reason = (f"is {len(name)} characters long; at most {limit} leave room for the suffixes the objects add"
                  if len(name) > limit else
                  "must be lower-case letters, digits and '-', start with a letter and end with a letter or digit")
        suggestion = default_like(name)
        raise InputError(f"The Kubernetes {what} {name!r} {reason}.",
                         hint=f"Pick another {what}, e.g. {suggestion!r}.", settings={f"k8s_{what}": suggestion})
    return name


def default_like(text: str) -> str:
    """`text` as a valid name: lower case, '-' for the rest; leading words dropped while it is too long
    ("NVIDIA-Nemotron-3.5-Lightning-30B-A3B-NVFP4" -> "nemotron-3-5-lightning-30b-a3b-nvfp4")."""
    words = [w for w in re.split(r"[^a-z0-9]+", text.lower()) if w]
    while len(words) > 1 and len("-".join(words)) > NAME_MAX:
        words.pop(0)
    name = "-".join(words)[:NAME_MAX].strip("-")
    return name if name[:1].isalpha() else f"vllm-{name}"[:NAME_MAX].strip("-")


def require_nodes(plan: LaunchPlan) -> None:
    """A multi-node plan must say how many nodes: the group's size and GPU count depend on it."""
    if plan.engine != "vllm":
        raise SelectionError(f"The preset {plan.preset} runs {plan.engine}, not vllm serve; the manifests run vLLM.",
                             hint="Pick a vLLM command (no TensorRT-LLM preset).", settings={"preset": None})
    asked = (plan.selection.get("asked") or {}).get("nodes")
    if plan.deploy_type == "multi_node" and asked is None:
        raise SelectionError(
            f"{plan.strategy} spans several nodes, and the manifests need to know how many: the group has one "
            "pod per node, each with that node's GPUs.",
            hint="Give the number of nodes (2 or more).", settings={"nodes": 2})


def _int_flag(values: Mapping[str, str | None], *names: str) -> int | None:
    for name in names:
        text = values.get(name)
        if text is not None and text.isdigit():
            return int(text)
    return None


def gpus_per_pod(plan: LaunchPlan, hw: HardwareProfile) -> int:
    """GPUs one node's vLLM uses: TP x PP x local DP over the nodes (the argv's own parallel flags)."""
    if hw.is_cpu:
        return 0
    fv = flag_values(plan.argv)
    tp = _int_flag(fv, "--tensor-parallel-size", "-tp") or 1
    pp = _int_flag(fv, "--pipeline-parallel-size", "-pp") or 1
    dp = _int_flag(fv, "--data-parallel-size-local", "-dpl") or _int_flag(fv, "--data-parallel-size", "-dp") or 1
    nodes = _int_flag(fv, "--nnodes") or 1
    return max(1, tp * pp * dp // nodes)


def sizing(plan: LaunchPlan, catalog: Catalog, memory: MemoryPlan | None = None,
           options: DeployOptions | None = None) -> Sizing:
    """Size the pods from the plan, and from the planner's figures where it has them."""
    opts = options or DeployOptions()
    hw = catalog.hardware[plan.hardware]
    recipe = catalog.recipe(plan.recipe_id)
    how: list[str] = []
    if memory is not None and memory.weights is not None:
        weights_gib = memory.weights.bytes / 2**30
        how.append(f"weights {weights_gib:.1f} GiB: the memory planner ({memory.weights.how})")
    else:
        variant = recipe.variants.get(plan.variant or "", {})
        weights_gib = float(variant.get("vram_minimum_gb") or recipe.model.get("vram_minimum_gb") or 0) * 1e9 / 2**30
        why = ("no memory plan given" if memory is None else "the planner could not size the weights")
        how.append(f"weights {weights_gib:.1f} GiB: the recipe's vram_minimum_gb ({why})")
    gpus = gpus_per_pod(plan, hw)
    shm_docker = flag_value(plan.docker_argv, "--shm-size")
    if hw.is_cpu and shm_docker:
        shm = int(re.sub(r"[^0-9]", "", shm_docker) or 16)
        how.append(f"/dev/shm {shm} GiB: the docker command's --shm-size {shm_docker}")
    else:
        shm = max(2, gpus)
        how.append(f"/dev/shm {shm} GiB: 1 GiB per GPU of the pod, at least vLLM's Kubernetes guide's 2 GiB "
                   "(NCCL's shared-memory transport; the docker command uses --ipc=host)")
    nodes = max(1, plan.nodes)
    kv_cpu = int(plan.env.get("VLLM_CPU_KVCACHE_SPACE", "0") or 0) if hw.is_cpu else 0
    host = 8 if gpus else 4
    mem = math.ceil(weights_gib / nodes) + shm + kv_cpu + host
    how.append(f"memory request {mem} GiB: this pod's share of the weights ({math.ceil(weights_gib / nodes)}) as "
               f"they load + /dev/shm ({shm})" + (f" + the CPU KV cache ({kv_cpu})" if kv_cpu else "")
               + f" + {host} for the server itself")
    cpu = 2 * gpus + 2 if gpus else 4
    how.append(f"cpu request {cpu}: two per GPU worker and two for the API server" if gpus
               else "cpu request 4: the CPU engine's threads")
    cache = max(20, math.ceil(weights_gib * 2 / 10) * 10)
    how.append(f"Hugging Face cache {cache} GiB: twice the weights (a draft model, an update), at least 20")
    if opts.startup_s is not None:
        startup = opts.startup_s
        how.append(f"startup probe {startup} s: as asked")
    else:
        startup = math.ceil(weights_gib * (DOWNLOAD_S_PER_GIB + LOAD_S_PER_GIB)) + COMPILE_S
        how.append(f"startup probe {startup} s: the first start downloads ({DOWNLOAD_S_PER_GIB} s/GiB) and loads "
                   f"({LOAD_S_PER_GIB} s/GiB) {weights_gib:.1f} GiB, then compiles and captures CUDA graphs "
                   f"({COMPILE_S} s); assumptions, not measurements")
    return Sizing(nodes if plan.deploy_type == "multi_node" else 1, gpus, shm, mem, cpu, cache, startup,
                  weights_gib, how)


def head_address_argv(argv: Sequence[str], address: str) -> list[str]:
    """argv with the head's address (`--master-addr`, `--data-parallel-address`) set to `address`."""
    out = list(argv)
    for i, token in enumerate(out[:-1]):
        if token in ("--master-addr", "--data-parallel-address"):
            out[i + 1] = address
    return out


def plan_env(plan: LaunchPlan) -> list[dict[str, Any]]:
    """The plan's environment as a container's, the interconnect placeholder filled with the pod's interface."""
    return [{"name": name, "value": POD_INTERFACE if value == IFACE_NAME else value} for name, value in plan.env.items()]


def _env(plan: LaunchPlan, opts: DeployOptions) -> list[dict[str, Any]]:
    env = plan_env(plan)
    env.append({"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {
        "name": opts.hf_token_secret, "key": opts.hf_token_key, "optional": True}}})
    return env


def _probe(port: int, period: int, failures: int) -> dict[str, Any]:
    return {"httpGet": {"path": "/health", "port": port}, "periodSeconds": period, "failureThreshold": failures,
            "timeoutSeconds": 5}


def vllm_container(plan: LaunchPlan, argv: Sequence[str], size: Sizing, opts: DeployOptions, *,
                   serves_http: bool, command: Sequence[str] | None = None) -> dict[str, Any]:
    """The container for one node: `command + args` is `argv` (unless a shell `command` is given)."""
    requests: dict[str, Any] = {"cpu": str(size.cpu), "memory": f"{size.memory_gib}Gi"}
    limits: dict[str, Any] = {}
    if size.gpus_per_pod:
        requests["nvidia.com/gpu"] = str(size.gpus_per_pod)
        limits["nvidia.com/gpu"] = str(size.gpus_per_pod)
    container: dict[str, Any] = {"name": "vllm", "image": plan.docker_image}
    if command is None:
        container |= {"command": list(argv[:2]), "args": list(argv[2:])}
    else:
        container["command"] = list(command)
    container["env"] = _env(plan, opts)
    if serves_http:
        container["ports"] = [{"name": "http", "containerPort": plan.port, "protocol": "TCP"}]
        container["startupProbe"] = _probe(plan.port, PROBE_PERIOD_S, size.startup_failure_threshold)
        container["readinessProbe"] = _probe(plan.port, 10, 3)
        container["livenessProbe"] = _probe(plan.port, 30, 5)
    container["resources"] = {"requests": requests, **({"limits": limits} if limits else {})}
    container["volumeMounts"] = [{"name": "hf-cache", "mountPath": HF_CACHE}, {"name": "dshm", "mountPath": "/dev/shm"}]
    return container


def gpu_affinity(plan: LaunchPlan) -> dict[str, Any] | None:
    products = GPU_PRODUCTS.get(plan.hardware)
    if not products:
        return None
    term = {"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In", "values": list(products)}]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}


def pod_spec(plan: LaunchPlan, container: dict[str, Any], size: Sizing, cache_claim: str) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [container],
        "volumes": [
            {"name": "hf-cache", "persistentVolumeClaim": {"claimName": cache_claim}},
            {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{size.shm_gib}Gi"}},
        ],
        # vLLM finishes its requests on SIGTERM before exiting; give it time.
        "terminationGracePeriodSeconds": 60,
    }
    affinity = gpu_affinity(plan)
    if affinity:
        spec["affinity"] = affinity
    return spec


def labels(name: str, component: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": name, "app.kubernetes.io/component": component,
            "app.kubernetes.io/managed-by": "nemotron-vllm-workbench"}


def pod_annotations(plan: LaunchPlan, size: Sizing) -> dict[str, str]:
    """The plan's provenance, on every pod: what was picked, the command, each flag's layer, the known issues."""
    return {
        f"{ANNOTATION}/recipe": plan.recipe_id,
        f"{ANNOTATION}/selection": json.dumps({k: plan.selection.get(k) for k in (
            "hardware", "variant", "strategy", "nodes", "features", "spec", "preset")}, sort_keys=True),
        f"{ANNOTATION}/served-model-name": plan.served_model_name,
        f"{ANNOTATION}/port": str(plan.port),
        f"{ANNOTATION}/command": plan.shell_command(multiline=False),
        f"{ANNOTATION}/flag-layers": json.dumps(plan.provenance, sort_keys=True),
        f"{ANNOTATION}/known-issues": json.dumps([{"id": k.id, "title": k.title, "change": k.change,
                                                  "sources": k.sources} for k in plan.known_issues]),
        f"{ANNOTATION}/sizing": "; ".join(size.how),
    }


def header_lines(plan: LaunchPlan, size: Sizing, what: str) -> list[str]:
    """The comment block every file starts with: where it came from, and what to know before applying it."""
    lines = [f"{what}, rendered by the Nemotron vLLM Workbench from the same plan as:",
             f"  {plan.shell_command(multiline=False)}",
             f"recipe {plan.recipe_id}; " + ", ".join(
                 f"{k} {plan.selection.get(k)}" for k in ("hardware", "variant", "strategy", "nodes")),
             f"serves model {plan.served_model_name!r} on port {plan.port}; image {plan.docker_image}"]
    for issue in plan.known_issues:
        lines += [f"known issue: {issue.title} [{issue.matched}]", f"  change: {issue.change}",
                  f"  sources: {' '.join(issue.sources)}"]
    for f in plan.fallbacks:
        lines.append(f"fallback: {f.choice} {f.asked!r} -> {'(left out)' if f.used is None else f.used}: {f.reason}")
    lines += [f"note: {n}" for n in plan.notes]
    lines += [f"sizing: {h}" for h in size.how]
    if not gpu_affinity(plan) and size.gpus_per_pod:
        lines.append(f"no GPU product label is known for {plan.hardware}: add a node selector on "
                     "nvidia.com/gpu.product for your nodes")
    if IFACE_NAME in plan.env.values():
        lines.append(f"the nodes talk over the pod network ({POD_INTERFACE}); give the interface for a "
                     "secondary (RDMA) network instead")
    if any(t == HEAD_IP for t in plan.argv):
        lines.append("the head's address is the head pod's DNS name")
    return lines

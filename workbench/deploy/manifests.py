"""`render_manifests(plan, format)`: a LaunchPlan as Kubernetes YAML (pure, like `render`).

    k8s   Deployment + Service + PersistentVolumeClaim (one Deployment per node for a
          multi-node strategy, the head behind a headless Service)
    lws   a LeaderWorkerSet (leader = the head's command, workers = the workers') + Service + PVC
    helm  a values file for vLLM production-stack's chart (vllm-stack)
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

import yaml

from workbench.deploy import helm, kubernetes, lws
from workbench.deploy.pod import DeployOptions, Sizing, check_name, default_name, header_lines, require_nodes, sizing
from workbench.errors import SelectionError
from workbench.planner import MemoryPlan
from workbench.recipes import Catalog, LaunchPlan, load_catalog

__all__ = ["ManifestFormat", "Manifests", "check_manifest_inputs", "render_manifests"]


class _PlainDumper(yaml.SafeDumper):
    """Writes a shared dict in full each time: anchors and aliases (&id001) confuse readers of a manifest."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


class ManifestFormat(str, enum.Enum):
    K8S = "k8s"
    LWS = "lws"
    HELM = "helm"


@dataclass
class Manifests:
    """The documents of one format, the comment block they start with, and the sizing they used."""

    format: ManifestFormat
    documents: list[dict[str, Any]]
    comments: list[str]
    sizing: Sizing
    filename: str = ""
    notes: list[str] = field(default_factory=list)

    def to_yaml(self) -> str:
        head = "".join(f"# {line}\n" for line in self.comments)
        body = "---\n".join(yaml.dump(d, Dumper=_PlainDumper, sort_keys=False, width=100000) for d in self.documents)
        return head + body


def check_manifest_inputs(plan: LaunchPlan, options: DeployOptions) -> str:
    """The objects' name, once the plan and options are known to make manifests (else the error saying why)."""
    require_nodes(plan)
    name = check_name(options.name) if options.name else default_name(plan)
    if options.namespace:
        check_name(options.namespace, "namespace", 63)
    if options.replicas < 1:
        raise SelectionError(f"{options.replicas} replicas: at least one is needed.", settings={"replicas": 1})
    return name


def render_manifests(plan: LaunchPlan, fmt: ManifestFormat | str, *, memory: MemoryPlan | None = None,
                     options: DeployOptions | None = None, catalog: Catalog | None = None) -> Manifests:
    """The plan as manifests of `fmt`. `memory` (the planner's answer for this plan) sizes the pods from
    its weight figure; without it the recipe's minimum is used. No I/O beyond loading the catalog."""
    try:
        kind = ManifestFormat(fmt)
    except ValueError:
        raise SelectionError(f"No manifest format {fmt!r}.",
                             hint=f"Pick one of: {', '.join(f.value for f in ManifestFormat)}.") from None
    opts = options or DeployOptions()
    name = check_manifest_inputs(plan, opts)
    cat = catalog if catalog is not None else load_catalog()
    size = sizing(plan, cat, memory, opts)
    builder = {ManifestFormat.K8S: kubernetes.build, ManifestFormat.LWS: lws.build, ManifestFormat.HELM: helm.build}
    documents, what, notes = builder[kind](plan, name, size, opts)
    comments = header_lines(plan, size, what) + [f"note: {n}" for n in notes]
    suffix = "values.yaml" if kind is ManifestFormat.HELM else f"{kind.value}.yaml"
    return Manifests(kind, documents, comments, size, f"{name}-{suffix}", notes)

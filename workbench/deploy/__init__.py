"""Beyond one machine: a LaunchPlan as Kubernetes manifests, validated offline.

    pod.py         names, sizing and the vLLM pod every format shares (argv = the plan's command)
    kubernetes.py  --format k8s: Deployment + Service + PersistentVolumeClaim (a Deployment per node)
    lws.py         --format lws: a LeaderWorkerSet (leader = head, workers = the plan's workers)
    helm.py        --format helm: values for vLLM production-stack's chart
    manifests.py   render_manifests(plan, format) -> Manifests (pure, like render)
    validate.py    validate_manifests: the official Kubernetes schemas, the LWS CRD, the chart's schema
    schemas/       the LWS CRD and the chart's values.schema.json, as published (SOURCES.md says where)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from workbench.deploy.manifests import ManifestFormat, Manifests, check_manifest_inputs, render_manifests
from workbench.deploy.pod import DeployOptions, Sizing

if TYPE_CHECKING:
    from workbench.deploy.validate import Problem, ValidationReport, validate_manifests

# The validator is imported on first use: jsonschema and kubernetes-validate take about 2 s to import,
# which every command line would pay otherwise.
_VALIDATE = ("Problem", "ValidationReport", "validate_manifests")


def __getattr__(name: str) -> Any:
    if name in _VALIDATE:
        return getattr(importlib.import_module("workbench.deploy.validate"), name)
    raise AttributeError(f"module 'workbench.deploy' has no attribute {name!r}")


__all__ = ["DeployOptions", "ManifestFormat", "Manifests", "Problem", "Sizing", "ValidationReport",
           "check_manifest_inputs", "render_manifests", "validate_manifests"]

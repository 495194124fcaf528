"""The Recipe tab's Kubernetes manifests: the plan as a Deployment, a LeaderWorkerSet and Helm values,
a tab each (copy and download buttons on each), with what the offline validation found."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gradio as gr

from workbench import deploy
from workbench.deploy import ManifestFormat, render_manifests
from workbench.errors import WorkbenchError
from workbench.planner import MemoryPlan, plan_memory
from workbench.recipes import Catalog, LaunchPlan

__all__ = ["ManifestsPanel", "create_ui", "manifest_outputs"]

TITLES = {ManifestFormat.K8S: "Deployment (k8s)", ManifestFormat.LWS: "LeaderWorkerSet (lws)",
          ManifestFormat.HELM: "production-stack Helm values"}


@dataclass
class ManifestsPanel:
    status: gr.Markdown
    k8s: gr.Code
    lws: gr.Code
    helm: gr.Code

    @property
    def outputs(self) -> list[Any]:
        return [self.status, self.k8s, self.lws, self.helm]


def _memory(plan: LaunchPlan, catalog: Catalog, config_path: str | None) -> MemoryPlan | None:
    try:
        return plan_memory(plan, catalog, config_path=(config_path or "").strip() or None)
    except WorkbenchError:
        return None  # the planner box above says why; the manifests say what they sized from


def manifest_outputs(catalog: Catalog, plan_dict: dict[str, Any] | None,
                     config_path: str | None = None) -> tuple[str, str, str, str]:
    """(status, k8s, lws, helm): each format's YAML, or a comment saying why it cannot be made."""
    if not plan_dict:
        return "", "", "", ""
    plan = LaunchPlan.from_dict(plan_dict)
    memory = _memory(plan, catalog, config_path) if plan.engine == "vllm" else None
    texts, lines = [], []
    for fmt in ManifestFormat:
        try:
            manifests = render_manifests(plan, fmt, memory=memory, catalog=catalog)
        except WorkbenchError as exc:
            texts.append(f"# Cannot render: {exc.message}\n" + (f"# {exc.hint}\n" if exc.hint else ""))
            lines.append(f"- {TITLES[fmt]}: {exc.message}")
            continue
        report = deploy.validate_manifests(manifests)  # imports the validator on first use
        texts.append(manifests.to_yaml())
        verdict = "valid" if report.ok else f"**{len(report.problems)} problem(s)**: " + "; ".join(
            p.line() for p in report.problems[:3])
        lines.append(f"- {TITLES[fmt]} (`{manifests.filename}`): {len(report.checked)} checked offline, {verdict}")
    status = "**Kubernetes manifests** from the same plan (the container runs the command above):\n" + "\n".join(lines)
    return status, texts[0], texts[1], texts[2]


def create_ui() -> ManifestsPanel:
    with gr.Accordion("Kubernetes manifests", open=False, elem_id="recipe-manifests"):
        status = gr.Markdown(elem_id="recipe-manifests-status")
        codes = []
        with gr.Tabs():
            for fmt in ManifestFormat:
                with gr.Tab(TITLES[fmt]):
                    codes.append(gr.Code(language="yaml", label=TITLES[fmt], interactive=False,
                                         buttons=["copy", "download"], elem_id=f"recipe-manifest-{fmt.value}"))
    return ManifestsPanel(status, *codes)

"""`render --format k8s|lws|helm [--check]`: the plan as Kubernetes manifests, and their offline validation.

The manifests go to stdout (pipe them to `kubectl apply -f -`, or to a file); what was
checked and every problem found go to stderr, and `--check` exits 1 on a problem.
"""

from __future__ import annotations

import argparse
import sys

from workbench import deploy
from workbench.deploy import DeployOptions, ManifestFormat, check_manifest_inputs, render_manifests
from workbench.errors import PlannerError
from workbench.planner import MemoryPlan, plan_memory
from workbench.recipes import Catalog, LaunchPlan

__all__ = ["MANIFEST_FORMATS", "add_manifest_arguments", "manifest_command"]

MANIFEST_FORMATS = tuple(f.value for f in ManifestFormat)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"at least 1, got {value}")
    return value


def add_manifest_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("Kubernetes (--format k8s, lws or helm)")
    g.add_argument("--check", action="store_true",
                   help="validate the manifests offline (Kubernetes' schemas, the LWS CRD, the chart's schema); "
                   "exit 1 on a problem")
    g.add_argument("--name", metavar="NAME", help="the objects' name (default: from the served model name)")
    g.add_argument("--namespace", metavar="NS", help="the namespace (default: none, kubectl's)")
    g.add_argument("--replicas", type=_positive, default=1, help="copies of the deployment (default 1)")
    g.add_argument("--hf-token-secret", default="hf-token", metavar="SECRET",
                   help="the Secret holding the Hugging Face token, key HF_TOKEN (default hf-token)")
    g.add_argument("--storage-class", metavar="CLASS", help="the cache volume's storage class (default: the cluster's)")
    g.add_argument("--startup-seconds", type=_positive, metavar="S",
                   help="the startup probe's budget (default: from the weights' size)")
    g.add_argument("--config", metavar="PATH",
                   help="the checkpoint's config.json, for the memory planner's weight figure (else the HF cache)")


def _memory(plan: LaunchPlan, catalog: Catalog, config: str | None) -> MemoryPlan | None:
    try:
        return plan_memory(plan, catalog, config_path=config)
    except PlannerError as exc:
        print(f"planner: {exc.message} Sizing from the recipe's minimum instead.", file=sys.stderr)
        return None


def manifest_command(args: argparse.Namespace, plan: LaunchPlan, catalog: Catalog) -> int:
    options = DeployOptions(name=args.name, namespace=args.namespace, hf_token_secret=args.hf_token_secret,
                            storage_class=args.storage_class, replicas=args.replicas, startup_s=args.startup_seconds)
    check_manifest_inputs(plan, options)  # before the planner: a bad name or a missing --nodes says so first
    memory = _memory(plan, catalog, args.config)
    manifests = render_manifests(plan, args.format, memory=memory, options=options, catalog=catalog)
    print(manifests.to_yaml(), end="")
    if not args.check:
        return 0
    report = deploy.validate_manifests(manifests)  # imports the validator on first use
    for item in report.checked:
        print(f"checked: {item}", file=sys.stderr)
    for problem in report.problems:
        print(f"problem: {problem.line()}", file=sys.stderr)
    print(f"{len(report.checked)} checked, {len(report.problems)} problem(s)", file=sys.stderr)
    return 0 if report.ok else 1

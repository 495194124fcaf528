"""`python -m workbench render`: print the vllm serve / docker run command for a selection.

stdout carries only the command (or JSON), so it can be pasted or piped;
fallbacks and notes go to stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from workbench.cli.checks import DeprecatedSpelling, at_least, check_extra_quoting, port_number
from workbench.cli.manifests import MANIFEST_FORMATS, add_manifest_arguments, manifest_command
from workbench.server import hardware
from workbench.server.machine import machine_facts
from workbench.errors import SelectionError
from workbench.recipes import DEFAULT_PORT, Catalog, LaunchPlan, Selection, load_catalog, render

__all__ = ["add_selection_arguments", "register", "selection_from_args", "format_plan", "list_catalog"]


def _csv(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def add_selection_arguments(parser: argparse.ArgumentParser, *, port: str | None = "deprecated") -> None:
    """The options that pick a deployment; shared by `render`, `plan`, `serve` and `workshop`.

    The vLLM server's port is --server-port everywhere. `port` says what --port is here:
    "same" (the command serves vLLM itself: `serve`), "deprecated" (the old spelling of
    --server-port, said so on stderr) or None (the command's own --port means something else)."""
    g = parser.add_argument_group("selection")
    g.add_argument("--recipe", help="recipe id or a unique part of it (default: from the hardware)")
    g.add_argument("--hardware", help="hardware id (default: detected; see --list)")
    g.add_argument("--variant", help="checkpoint variant, e.g. default (NVFP4) or bf16")
    g.add_argument("--strategy", help="parallelism strategy, e.g. single_node_tp")
    g.add_argument("--nodes", type=at_least(1), help="nodes for a multi_node_* strategy (>= 2)")
    g.add_argument("--features", type=_csv, metavar="A,B",
                   help="comma-separated features (replaces the recipe's defaults)")
    g.add_argument("--spec", metavar="MODE", help="speculative decoding mode (implies spec_decoding)")
    g.add_argument("--preset", help="a named command from the model card")
    g.add_argument("--server-port", type=port_number, dest="server_port", metavar="PORT",
                   help=f"the vLLM server's port (default {DEFAULT_PORT})")
    if port == "same":
        g.add_argument("--port", type=port_number, dest="server_port", metavar="PORT", help="same as --server-port")
    elif port == "deprecated":
        g.add_argument("--port", type=port_number, dest="server_port", action=DeprecatedSpelling,
                       new="--server-port", help=argparse.SUPPRESS)
    g.add_argument("--served-model-name", help="the name clients use as `model`")
    g.add_argument("--max-model-len", type=at_least(1), help="longest context a request may use")
    g.add_argument("--head-address", metavar="IP",
                   help="multi-node: the head node's address on the interconnect (fills $HEAD_IP)")
    g.add_argument("--iface", metavar="NAME",
                   help="multi-node: the interconnect's network interface, e.g. enp1s0f1np1 "
                   "(GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME; `ip -br addr` lists them)")
    g.add_argument("--rehearsal", action="store_true",
                   help="serve the recipe's command with its tiny local stand-in model (Nemotron: a random-weight "
                   "Nemotron-H built here in seconds), swapping only the flags that need the real checkpoint or a "
                   "kernel this machine lacks (each swap and its reason in the flag table)")
    g.add_argument("--ignore-known-issue", action="append", default=[], dest="ignore_known_issues", metavar="ID",
                   help="render a command even though the known problem ID makes its failure certain (may repeat)")
    g.add_argument("--extra", action="append", default=[], metavar='"FLAGS"',
                   help="extra vllm serve flags, last and winning (may repeat); split like shell words, so "
                   "JSON needs single quotes inside: --extra \"--speculative-config '{\\\"method\\\": ...}'\"; "
                   "a single flag needs the = form: --extra=--enforce-eager")
    g.add_argument("--apply-fix", action="append", default=[], metavar="ID", dest="apply_fixes",
                   help="apply the change of a known problem the command meets (its id, as `render` prints it; "
                   "repeatable; `all` for every one with a mechanical change): the command's last layer")


def selection_from_args(args: argparse.Namespace, *, detect: Any = None) -> Selection:
    """Build a Selection; with neither --recipe, --preset nor --hardware, use the detected hardware."""
    hw, detected = args.hardware, None
    if hw is None and not args.recipe and not args.preset:
        hw = (detect or hardware.detect)()
    elif hw is None and not args.preset:
        detected = (detect or hardware.detect)()  # used when the recipe runs on this machine
    rehearsal = bool(getattr(args, "rehearsal", False))
    if args.nodes is not None and args.nodes < 1:
        raise SelectionError(f"--nodes must be at least 1, got {args.nodes}")
    check_extra_quoting(args.extra or [])
    return Selection(
        recipe=args.recipe,
        hardware=hw,
        variant=args.variant,
        strategy=args.strategy,
        nodes=args.nodes,
        features=args.features,
        spec=args.spec,
        port=args.server_port or DEFAULT_PORT,
        served_model_name=args.served_model_name,
        max_model_len=args.max_model_len,
        extra=list(args.extra or []),
        preset=args.preset,
        head_address=args.head_address,
        iface=args.iface,
        detected_hardware=detected,
        rehearsal=rehearsal,
        # What this machine's vLLM has decides a rehearsal's swaps (read once per vLLM version).
        machine=machine_facts(progress=lambda line: print(line, file=sys.stderr)) if rehearsal else None,
        ignore_known_issues=list(getattr(args, "ignore_known_issues", None) or []),
        apply_fixes=list(getattr(args, "apply_fixes", None) or []),
    )


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "render",
        help="print the vllm serve (or docker run) command for your hardware",
        description="Render a recipe into a ready-to-paste command. The command goes to "
        "stdout; notes and fallbacks go to stderr.",
    )
    add_selection_arguments(p)
    p.add_argument("--format", choices=("text", "docker", "json", "shell", *MANIFEST_FORMATS), default="text",
                   help="text: one flag per line; docker: docker run; json: the whole plan; shell: one line; "
                   "k8s: Deployment + Service + cache volume; lws: a LeaderWorkerSet; helm: production-stack values")
    p.add_argument("--list", action="store_true", help="list recipes, hardware, variants, strategies, "
                   "features, spec modes and presets")
    add_manifest_arguments(p)
    p.set_defaults(func=render_command)


def format_plan(plan: LaunchPlan, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(plan.to_dict(), indent=2)
    if fmt == "shell":
        return plan.shell_command(multiline=False)
    if fmt == "docker":
        parts = [plan.docker_command()]
        for i in range(len(plan.worker_docker_argvs)):
            parts.append(f"# worker node {i + 1}\n" + plan.docker_command(worker=i))
        return "\n\n".join(parts)
    parts = [plan.shell_command()]
    for i in range(len(plan.worker_argvs)):
        parts.append(f"# worker node {i + 1}\n" + plan.shell_command(worker=i))
    return "\n\n".join(parts)


def _explain(plan: LaunchPlan, *, docker: bool = False) -> str:
    lines = []
    for f in plan.fallbacks:
        used = "(left out)" if f.used is None else f.used
        lines.append(f"fallback: {f.choice} {f.asked!r} -> {used}: {f.reason}")
    for n in plan.notes:
        lines.append(f"note: {n}")
    for swap in plan.rehearsal_swaps:
        lines.append(f"rehearsal: {swap.line()}")
    for fix in plan.applied_fixes:
        lines.append(f"applied: known problem {fix.id} ({fix.title}): {fix.describe()}")
    for issue in plan.known_issues:
        offer = (f" One flag away: --apply-fix {issue.id} ({issue.fix_summary()})." if issue.fix else "")
        lines.append(f"known issue: {issue.title} [{issue.matched}]. {issue.change} "
                     f"Sources: {' '.join(issue.sources)}{offer}")
    extras = [s for s in plan.install_steps[3:] if s.startswith("uv pip install")]
    if docker and plan.engine == "vllm":
        if extras:  # the host needs only docker; what the command imports must be in the image
            lines.append(f"in the image: {plan.docker_image} lacks what this command needs; build FROM it "
                         f"and RUN: {' && '.join(extras)}")
    elif plan.install_steps:
        lines.append("install: " + " && ".join(plan.install_steps))
    for name, text in plan.config_files.items():
        lines.append(f"config file {name}:\n{text.rstrip()}")
    return "\n".join(lines)


def list_catalog(catalog: Catalog, recipe_name: str | None = None) -> str:
    out = ["Recipes:"]
    for rid, r in catalog.recipes.items():
        out.append(f"  {rid}  {r.description}")
    out.append("Hardware:")
    for hid, h in catalog.hardware.items():
        out.append(f"  {hid:<18} {h.display_name}: {h.description}")
    out.append("Strategies:")
    for sid, s in catalog.strategies.items():
        out.append(f"  {sid:<18} {s.display_name}: {s.description}")
    recipes = [catalog.recipe(recipe_name)] if recipe_name else list(catalog.recipes.values())
    for r in recipes:
        out.append(f"\n{r.title} ({r.id})")
        out.append("  Variants:")
        for v, vd in r.variants.items():
            out.append(f"    {v:<16} {vd.get('description', '')}")
        out.append(f"  Strategies: {', '.join(r.compatible_strategies)}")
        if r.features:
            out.append("  Features (default on unless marked opt-in):")
            for f, fd in r.features.items():
                tag = " [opt-in]" if f in r.opt_in_features else ""
                out.append(f"    {f:<16} {fd.get('description', '')}{tag}")
        if r.spec_modes:
            out.append("  Spec modes (--spec):")
            for m, md in r.spec_modes.items():
                out.append(f"    {m:<16} {md.get('description', '')}")
        if r.presets:
            out.append("  Presets (--preset):")
            for name, pr in r.presets.items():
                out.append(f"    {name:<22} {pr.description}")
    return "\n".join(out)


def render_command(args: argparse.Namespace) -> int:
    catalog = load_catalog()
    if args.list:
        print(list_catalog(catalog, args.recipe))
        return 0
    if args.check and args.format not in MANIFEST_FORMATS:
        raise SelectionError("--check validates Kubernetes manifests; the command formats have nothing to check.",
                             hint=f"Add --format with one of {', '.join(MANIFEST_FORMATS)}.")
    plan = render(selection_from_args(args), catalog)
    if args.format in MANIFEST_FORMATS:  # notes, fallbacks and known issues are the YAML's comments
        return manifest_command(args, plan, catalog)
    print(format_plan(plan, args.format))
    if args.format != "json":
        text = _explain(plan, docker=args.format == "docker")
        if text:
            print(text, file=sys.stderr)
    return 0

"""`python -m workbench plan`: how many sequences fit at what context for a selection.

Takes render's selection flags, renders the plan, reads the model's config.json
(--config, else the local build, the Hugging Face cache, the Hub) and prints the
memory plan; --format json carries it all (kv_cache_tokens, max_concurrency, ...).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from workbench.cli.render import add_selection_arguments, selection_from_args
from workbench.errors import InputError
from workbench.planner import plan_memory
from workbench.recipes import load_catalog, render

__all__ = ["plan_command", "register"]


def _positive(kind: type) -> Any:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from exc
        if value <= 0:
            raise argparse.ArgumentTypeError(f"{text!r} must be above 0")
        return value
    return parse


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "plan",
        help="memory planner: KV cache, Mamba state and concurrency against context for a selection",
        description="Plan the memory of a rendered command: weights, KV bytes per token (attention layers "
        "only), the Mamba state per sequence, vLLM's hybrid block alignment, the KV budget, and how many "
        "sequences fit at each context. Reads the checkpoint's config.json (--config PATH, else the "
        "Hugging Face cache, else the Hub).",
    )
    add_selection_arguments(p)
    g = p.add_argument_group("planner")
    g.add_argument("--memory-gb", type=_positive(float), metavar="GiB",
                   help="memory per GPU in GiB (default: the GPU's measured CUDA-visible total for h100 and "
                   "h200, else the hardware profile's)")
    g.add_argument("--gpu-memory-utilization", type=_positive(float), metavar="FRACTION",
                   help="share of that memory vLLM may take (default: the command's, else 0.92)")
    g.add_argument("--max-num-seqs", type=_positive(int), metavar="N",
                   help="sequences decoded at once (default: the command's, else vLLM's default)")
    g.add_argument("--config", metavar="PATH", help="the checkpoint's config.json (or its folder)")
    g.add_argument("--overhead-gb", type=float, metavar="GiB",
                   help="memory vLLM holds back besides the weights, replacing the planner's estimate "
                   "(take it from a real start-up: requested - weights - 'Available KV cache memory')")
    g.add_argument("--vllm-version", metavar="X.Y.Z",
                   help="the vLLM release that serves it (default 0.32.0; the lent GPUs run 0.26.0)")
    g.add_argument("--format", choices=("text", "json"), default="text")
    p.set_defaults(func=plan_command)


def plan_command(args: argparse.Namespace) -> int:
    if args.gpu_memory_utilization is not None and args.gpu_memory_utilization > 1:
        raise InputError(f"--gpu-memory-utilization {args.gpu_memory_utilization} is above 1.",
                         hint="Give a fraction such as 0.85.")
    catalog = load_catalog()
    plan = render(selection_from_args(args), catalog)
    memory = plan_memory(plan, catalog, config_path=args.config, memory_gib=args.memory_gb,
                         gpu_memory_utilization=args.gpu_memory_utilization,
                         max_model_len=args.max_model_len, max_num_seqs=args.max_num_seqs,
                         overhead_gib=args.overhead_gb, vllm_version=args.vllm_version)
    print(json.dumps(memory.to_dict(), indent=2) if args.format == "json" else memory.describe())
    return 0

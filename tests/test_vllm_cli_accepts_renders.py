"""Real-vLLM tier: vLLM's own `vllm serve` parser accepts every argv the renderer makes.

Every combination the renderer can produce (recipe x hardware x variant x strategy
(multi-node at 2 nodes: head and worker) x feature subset x spec mode, plus every
preset and the user options) is rendered here; the argvs are then checked in ONE
subprocess against the installed vLLM (the CPU build, 0.32.0): its parser
(`make_arg_parser` on a `FlexibleArgumentParser`), `validate_parsed_serve_args`, the
reasoning- and tool-parser registries, the quantization methods and the speculative
methods. No server is started.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys

import pytest

from workbench.recipes import Selection, load_catalog, render

pytestmark = pytest.mark.vllm

# (flag, value) pairs the renderer emits on purpose although vLLM 0.32.0 rejects
# them, each with the reason. Anything failing that is not listed here fails the
# test. 0.32.0 accepts every flag and choice of the seed and the model card
# (--moe-backend humming, --linear-backend, --mamba-ssu-algorithm, the dotted
# --speculative_config.* args, ...); so the list holds only the newer-than-0.32
# allowance the spec asked for:
ALLOWED_NEWER_THAN_0_32 = {
    # DSpark drafting is newer than some vLLM builds; allow exactly this method
    # to be unknown. (0.32.0's SpeculativeMethod does list "dspark", so this
    # allowance is not used today; the check reports whether it was.)
    ("speculative_method", "dspark"): "DSpark speculative decoding landed after older 0.3x releases",
}

CHECKER = r"""
import argparse, contextlib, io, json, sys, typing
from vllm.utils.argparse_utils import FlexibleArgumentParser
from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
from vllm.reasoning import ReasoningParserManager
from vllm.tool_parsers import ToolParserManager
from vllm.model_executor.layers.quantization import QUANTIZATION_METHODS
from vllm.config.speculative import SpeculativeMethod

def flat(t):
    out = set()
    for a in typing.get_args(t):
        if isinstance(a, str):
            out.add(a)
        else:
            out |= flat(a)
    return out

SPEC_METHODS = flat(SpeculativeMethod)
parser = make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
cases = json.load(sys.stdin)
results = []
for argv in cases:
    problems = []
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            args = parser.parse_args(argv)
        validate_parsed_serve_args(args)
    except SystemExit:
        results.append({"argv": argv, "problems": [["parse", err.getvalue().strip().splitlines()[-1:]]]})
        continue
    except Exception as exc:
        results.append({"argv": argv, "problems": [["validate", repr(exc)]]})
        continue
    if args.reasoning_parser:
        try:
            ReasoningParserManager.get_reasoning_parser(args.reasoning_parser)
        except Exception as exc:
            problems.append(["reasoning_parser", args.reasoning_parser])
    if args.tool_call_parser:
        try:
            ToolParserManager.get_tool_parser(args.tool_call_parser)
        except Exception as exc:
            problems.append(["tool_call_parser", args.tool_call_parser])
    if args.quantization and args.quantization not in QUANTIZATION_METHODS:
        problems.append(["quantization", args.quantization])
    sc = args.speculative_config
    if sc:
        method = sc.get("method")
        if method is not None and method not in SPEC_METHODS:
            problems.append(["speculative_method", method])
    results.append({"argv": argv, "problems": problems})
print(json.dumps({"results": results, "spec_methods": sorted(SPEC_METHODS)}))
"""


def _combinations():
    """Yield (label, plan) for every combination the renderer can produce."""
    catalog = load_catalog()
    for recipe in catalog.recipes.values():
        feats = [f for f in recipe.features if f != "spec_decoding"]
        subsets = [list(s) for n in range(len(feats) + 1) for s in itertools.combinations(feats, n)]
        specs = [None, *recipe.spec_modes]
        for hw, variant, strategy in itertools.product(catalog.hardware, recipe.variants, catalog.strategies):
            nodes = 2 if catalog.strategies[strategy].multi_node else None
            for subset, spec in itertools.product(subsets, specs):
                sel = Selection(recipe=recipe.id, hardware=hw, variant=variant, strategy=strategy,
                                nodes=nodes, features=subset, spec=spec)
                yield f"{recipe.id} {hw} {variant} {strategy} {subset} {spec}", render(sel, catalog)
        # The user's options and --extra, on the default render.
        yield f"{recipe.id} user options", render(Selection(
            recipe=recipe.id, port=8123, served_model_name="nemo", max_model_len=32768,
            extra=["--gpu-memory-utilization 0.9 --max-num-seqs 64"]), catalog)
        for name, preset in recipe.presets.items():
            if preset.engine != "vllm":
                continue  # trtllm_mtp is TensorRT-LLM's trtllm-serve, not a vLLM argv
            yield f"{recipe.id} preset {name}", render(Selection(recipe=recipe.id, preset=name), catalog)
            yield f"{recipe.id} preset {name} fixed", render(
                Selection(recipe=recipe.id, preset=name, apply_fixes=["all"]), catalog)
        # Every known problem's fix applied (the Recipe tab's "Apply the change"), where one is met.
        for hw, spec in itertools.product(catalog.hardware, specs):
            yield f"{recipe.id} {hw} {spec} fixed", render(Selection(
                recipe=recipe.id, hardware=hw, spec=spec, apply_fixes=["all"],
                extra=["--no-enable-chunked-prefill --mamba-ssm-cache-dtype float16"]), catalog)


def test_vllm_parser_accepts_every_rendered_argv():
    pytest.importorskip("vllm", reason="needs the real vLLM CPU build")
    combos = 0
    argvs: dict[tuple[str, ...], str] = {}
    for label, plan in _combinations():
        combos += 1
        assert plan.engine == "vllm"
        for argv in [plan.argv, *plan.worker_argvs]:
            assert argv[:2] == ["vllm", "serve"], label
            argvs.setdefault(tuple(argv[2:]), label)
    # Negative controls: the checker must flag each of these, or it proves nothing.
    controls = [
        ["m", "--moe-backend", "no_such_backend"],
        ["m", "--reasoning-parser", "no_such_parser"],
        ["m", "--enable-auto-tool-choice", "--tool-call-parser", "no_such_parser"],
        ["m", "--quantization", "no_such_quant"],
        ["m", "--speculative-config", '{"method":"no_such_method","num_speculative_tokens":3}'],
        ["m", "--enable-auto-tool-choice"],
    ]
    proc = subprocess.run(
        [sys.executable, "-c", CHECKER], input=json.dumps([list(a) for a in argvs] + controls),
        capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    results = report["results"]
    results, control_results = results[: len(argvs)], results[len(argvs) :]
    assert [bool(r["problems"]) for r in control_results] == [True] * len(controls), control_results
    failures, allowed_used = [], set()
    for res in results:
        for kind, value in res["problems"]:
            key = (kind, value if isinstance(value, str) else json.dumps(value))
            if key in ALLOWED_NEWER_THAN_0_32:
                allowed_used.add(key)
            else:
                failures.append((argvs[tuple(res["argv"])], kind, value, res["argv"]))
    print(f"checked {combos} combinations -> {len(argvs)} distinct vllm serve argvs "
          f"(head and worker commands) against vLLM's parser; allowances used: {sorted(allowed_used)}; "
          f"dspark known to this vLLM: {'dspark' in report['spec_methods']}")
    assert not failures, "\n".join(f"{label}: {kind} {value}" for label, kind, value, _ in failures[:20])
    assert combos > 5000
    assert len(argvs) > 100

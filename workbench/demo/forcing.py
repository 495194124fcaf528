"""Make a random-weight model say exactly a given text, through vLLM's real parsers.

A request carries `structured_outputs.regex` matching the exact text and a
`logit_bias` that lifts the special tokens, so `</think>` and `<tool_call>` come
out as their single special-token ids (vLLM's streaming parsers match by id, not
by spelling). The server must run with
`--structured-outputs-config '{"enable_in_reasoning": true}'` so the regex also
holds inside the reasoning section. Used by tests and the tool-calling notebook
on the CPU engine; never for a real model.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
from collections.abc import Callable, Mapping
from typing import Any

from workbench.demo.models import FORCING_MODEL_NAME, cache_dir, special_token_ids
from workbench.errors import WorkbenchError
from workbench.recipes import Catalog, LaunchPlan, Selection, load_catalog, render
from workbench.recipes.multinode import node_parallel_args

# Characters with a meaning in the regex dialects vLLM's structured-output
# backends accept; everything else stands for itself.
_REGEX_META = set(r".^$*+?()[]{}|\/")


def regex_for_exact_text(text: str) -> str:
    out = []
    for ch in text:
        if ch == "\n":
            out.append(r"\n")
        elif ch == "\t":
            out.append(r"\t")
        elif ch in _REGEX_META:
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


def reasoning_then_answer(reasoning: str, answer: str) -> str:
    """The text after the template's opening `<think>`: reasoning, then the answer."""
    return f"{reasoning}\n</think>\n\n{answer}"


def reasoning_then_tool_call(reasoning: str, name: str, arguments: Mapping[str, object]) -> str:
    """Reasoning, then one call in qwen3_coder's XML form."""
    params = "".join(
        f"<parameter={key}>\n{value if isinstance(value, str) else json.dumps(value)}\n</parameter>\n"
        for key, value in arguments.items()
    )
    return (
        f"{reasoning}\n</think>\n\n<tool_call>\n<function={name}>\n{params}</function>\n</tool_call>"
    )


def forcing_extra_body(text: str, special_token_ids: Mapping[str, int]) -> dict[str, Any]:
    """Request fields that force `text` (pass as the OpenAI SDK's `extra_body`)."""
    return {
        "structured_outputs": {"regex": regex_for_exact_text(text)},
        "logit_bias": {str(i): 100 for i in special_token_ids.values()},
    }


# Server flags the forcing model is served with (beyond the model path).
FORCING_SERVER_FLAGS = (
    "--enable-per-request-metrics",  # the server's own queue/prefill/decode times per response
    "--reasoning-parser",
    "nemotron_v3",
    "--enable-auto-tool-choice",
    "--tool-call-parser",
    "qwen3_coder",
    "--structured-outputs-config",
    '{"enable_in_reasoning": true}',
)


def forcing_plan(catalog: Catalog | None = None, *, port: int | None = None, nodes: int = 1) -> LaunchPlan:
    """The CPU demo recipe's plan, serving the tiny forcing model with Nemotron's parsers.

    The forcing model (workbench.demo.models.build_forcing_model) has random weights:
    every word it says is forced by the request. It exists so the reasoning and
    tool-call parsers can be shown on a CPU; it is not a recipe of its own.

    With `nodes` > 1 it is a `multi_node_tp` plan (tensor parallel across the nodes,
    one CPU "GPU" each): its 2 attention heads split over 2 ranks, where SmolLM2's 9
    cannot, which is why the demo recipe itself offers only multi_node_tp_dp.
    """
    if nodes > 1:
        return _multi_node_tp(forcing_plan(catalog, port=port), catalog or load_catalog(), nodes)
    catalog = catalog or load_catalog()
    selection = Selection(hardware="cpu", served_model_name=FORCING_MODEL_NAME, extra=[shlex.join(FORCING_SERVER_FLAGS)])
    if port:
        selection = dataclasses.replace(selection, port=port)
    plan = render(selection, catalog)
    argv = [plan.argv[0], plan.argv[1], FORCING_MODEL_NAME, *plan.argv[3:]]
    return dataclasses.replace(
        plan, argv=argv, model_id=FORCING_MODEL_NAME, local_build=FORCING_MODEL_NAME,
        notes=[*plan.notes, "The model is the tiny random-weight forcing model, built locally: "
               "its text is forced by each request, and vLLM's real parsers split it."])


def _multi_node_tp(plan: LaunchPlan, catalog: Catalog, nodes: int) -> LaunchPlan:
    strategy = catalog.strategies["multi_node_tp"]
    rest = list(plan.argv[3:])
    if "--tensor-parallel-size" in rest:  # the single-node TP 1 gives way to the strategy's
        i = rest.index("--tensor-parallel-size")
        del rest[i:i + 2]
    argvs = [[*plan.argv[:3], *rest, *node_parallel_args(strategy, 1, nodes, rank)] for rank in range(nodes)]
    # The docker form is the single-node one's head; the workers' are not rendered (CPU rehearsal).
    head_docker = plan.docker_argv[:plan.docker_argv.index(plan.docker_image) + 1] + argvs[0][2:]
    return dataclasses.replace(
        plan, argv=argvs[0], worker_argvs=argvs[1:], strategy="multi_node_tp", nodes=nodes, tensor_parallel_size=nodes,
        deploy_type="multi_node", docker_argv=head_docker, worker_docker_argvs=[],
        notes=[*plan.notes, f"Tensor parallel {nodes} across {nodes} nodes (multi_node_tp)."])


def reasoning_then_hermes_call(reasoning: str, name: str, arguments: Mapping[str, object]) -> str:
    """Reasoning, then one call in the hermes JSON form Qwen3 writes."""
    call = json.dumps({"name": name, "arguments": dict(arguments)}, ensure_ascii=False)
    return f"{reasoning}\n</think>\n\n<tool_call>\n{call}\n</tool_call>"


def verify_request_fields(special_token_ids: Mapping[str, int], *, call_format: str = "qwen3_coder",
                          model_opens_think: bool = False) -> Callable[[str], dict[str, Any]]:
    """Forced replies for `workbench.agents.verify` checks, so a random-weight model passes
    them through vLLM's real parsers: an answer after reasoning, an answer with reasoning
    off, a get_weather(city=Paris) call, an answer to the tool's result.

    call_format: "qwen3_coder" (XML, the Nemotron forcing model) or "hermes" (JSON, Qwen3).
    model_opens_think: the model writes `<think>` itself (Qwen3's template does not open it).
    """
    opening = "<think>\n" if model_opens_think else ""
    tool_call = reasoning_then_hermes_call if call_format == "hermes" else reasoning_then_tool_call
    texts = {
        "stream": opening + reasoning_then_answer("The user asks for 2 + 3, which is 5.", "2 + 3 = 5."),
        "reasoning_off": "2 + 3 = 5.",
        "tool_call": opening + tool_call("The user wants the weather in Paris: call the tool.",
                                         "get_weather", {"city": "Paris"}),
        "multi_step": opening + reasoning_then_answer("The tool answered 21 degrees.", "It is 21 °C in Paris."),
    }

    def fields(check: str) -> dict[str, Any]:
        text = texts.get(check)
        return forcing_extra_body(text, special_token_ids) if text is not None else {}

    return fields


def verify_fields_for_served_model(model: str | None) -> Callable[[str], dict[str, Any]] | None:
    """The forced replies when `model` is the workbench's built forcing model; None otherwise
    (a real model answers the verifier's prompts freely)."""
    if model != FORCING_MODEL_NAME:
        return None
    try:
        return verify_request_fields(special_token_ids(cache_dir() / FORCING_MODEL_NAME))
    except WorkbenchError:
        return None

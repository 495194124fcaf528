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

import json
from collections.abc import Mapping

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


def forcing_extra_body(text: str, special_token_ids: Mapping[str, int]) -> dict:
    """Request fields that force `text` (pass as the OpenAI SDK's `extra_body`)."""
    return {
        "structured_outputs": {"regex": regex_for_exact_text(text)},
        "logit_bias": {str(i): 100 for i in special_token_ids.values()},
    }


# Server flags the forcing model is served with (beyond the model path).
FORCING_SERVER_FLAGS = (
    "--reasoning-parser",
    "nemotron_v3",
    "--enable-auto-tool-choice",
    "--tool-call-parser",
    "qwen3_coder",
    "--structured-outputs-config",
    '{"enable_in_reasoning": true}',
)

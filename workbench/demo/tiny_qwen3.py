"""A tiny random-weight Qwen3 (Qwen3ForCausalLM), built locally, to run vLLM's real `qwen3`
reasoning parser and `hermes` tool parser on a CPU with no network.

It stands in for the Qwen3-0.6B recipe (recipes/models/Qwen/Qwen3-0.6B.yaml), which
needs a download: same architecture class, a chat template written after Qwen3's
(hermes JSON tool calls in `<tool_call>`, tool results in `<tool_response>`, and
`enable_thinking=false` closing an empty `<think></think>` in the prompt, so with
thinking on the model itself writes `<think>`). Qwen3's own tokenizer cannot be built
offline, so the tokenizer is SmolLM2's with `<think>`, `</think>`, `<tool_call>`,
`</tool_call>`, `<tool_response>`, `</tool_response>` added as special tokens (vLLM's
parsers match them by id). Random weights say nothing useful: requests force the text
(workbench.demo.forcing, call_format="hermes", model_opens_think=True).
"""

from __future__ import annotations

from pathlib import Path

from workbench.demo.models import BuiltModel, Progress, build_tiny_random_model, print_progress

__all__ = ["TINY_QWEN3_NAME", "TINY_QWEN3_SERVER_FLAGS", "TINY_QWEN3_TEMPLATE", "build_tiny_qwen3"]

TINY_QWEN3_NAME = "qwen3-tiny-forcing"

# The Qwen3-0.6B recipe's parsers, plus what forcing needs (the regex also inside reasoning).
TINY_QWEN3_SERVER_FLAGS = (
    "--reasoning-parser", "qwen3",
    "--enable-auto-tool-choice", "--tool-call-parser", "hermes",
    "--structured-outputs-config", '{"enable_in_reasoning": true}',
    "--enable-per-request-metrics",
)

TINY_QWEN3_TEMPLATE = r"""
{%- if tools %}
<|im_start|>system
{% if messages[0].role == 'system' %}{{ messages[0].content }}

{% endif -%}
# Tools

You may call one or more functions to assist with the user query.

You are provided with function signatures within <tools></tools> XML tags:
<tools>
{%- for tool in tools %}
{{ tool | tojson }}
{%- endfor %}
</tools>

For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:
<tool_call>
{"name": <function-name>, "arguments": <args-json-object>}
</tool_call><|im_end|>
{% elif messages[0].role == 'system' -%}
<|im_start|>system
{{ messages[0].content }}<|im_end|>
{% endif -%}
{%- for m in messages -%}
{%- if m.role == 'user' -%}
<|im_start|>user
{{ m.content }}<|im_end|>
{% elif m.role == 'assistant' -%}
<|im_start|>assistant
{% if m.content %}{{ m.content }}{% endif %}
{%- for tc in m.tool_calls or [] %}
<tool_call>
{"name": "{{ tc.function.name }}", "arguments": {% if tc.function.arguments is string %}{{ tc.function.arguments }}{% else %}{{ tc.function.arguments | tojson }}{% endif %}}
</tool_call>
{%- endfor %}<|im_end|>
{% elif m.role == 'tool' -%}
<|im_start|>user
<tool_response>
{{ m.content }}
</tool_response><|im_end|>
{% endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
<|im_start|>assistant
{% if enable_thinking is defined and enable_thinking is false %}<think>

</think>

{% endif %}
{%- endif -%}
""".strip()


def build_tiny_qwen3(dest: Path | None = None, *, force: bool = False, progress: Progress | None = None) -> BuiltModel:
    """Build the tiny Qwen3ForCausalLM once into the cache folder (about 10 s)."""
    return build_tiny_random_model(TINY_QWEN3_NAME, TINY_QWEN3_TEMPLATE, architecture="qwen3",
                                   description="random weights, SmolLM2 tokenizer + Qwen3's tags",
                                   dest=dest, force=force, progress=progress or print_progress)

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

import json
import shutil
import time
from pathlib import Path
from typing import Any

from workbench.demo.models import (
    BUILD_VERSION,
    FORCING_SPECIAL_TOKENS,
    MARKER,
    BuiltModel,
    Progress,
    cache_dir,
    find_gguf,
    special_token_ids,
)
from workbench.errors import WorkbenchError

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


def _print(message: str) -> None:
    print(message, flush=True)


def _import_torch_transformers() -> tuple[Any, Any]:
    try:
        import torch
        import transformers
    except ImportError as exc:
        raise WorkbenchError(f"Building the tiny Qwen3 needs torch and transformers ({exc}).",
                             hint="Install the CPU engine: pip install -e '.[cpu]'") from exc
    return torch, transformers


def build_tiny_qwen3(dest: Path | None = None, *, force: bool = False, progress: Progress = _print) -> BuiltModel:
    """Build the tiny Qwen3ForCausalLM once into the cache folder (about 10 s)."""
    started = time.monotonic()
    dest = Path(dest) if dest else cache_dir() / TINY_QWEN3_NAME
    if not force:
        try:
            special_token_ids(dest)
            if json.loads((dest / MARKER).read_text()).get("build_version") == BUILD_VERSION:
                return BuiltModel(TINY_QWEN3_NAME, dest, TINY_QWEN3_NAME, False, 0.0)
        except (WorkbenchError, OSError, ValueError):
            pass
    torch, transformers = _import_torch_transformers()
    gguf = find_gguf()
    tmp = dest.with_name(dest.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    progress("Building the tiny Qwen3 (Qwen3ForCausalLM, random weights, SmolLM2 tokenizer + Qwen3's tags)")
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    tokenizer.add_special_tokens({"additional_special_tokens": list(FORCING_SPECIAL_TOKENS)})
    tokenizer.chat_template = TINY_QWEN3_TEMPLATE
    config = transformers.Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,  # vLLM's CPU attention needs head_dim >= 32
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        torch_dtype="float32",
    )
    torch.manual_seed(0)
    model = transformers.Qwen3ForCausalLM(config)
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    (tmp / MARKER).write_text(json.dumps({
        "build_version": BUILD_VERSION,
        "model_id": TINY_QWEN3_NAME,
        "architecture": "Qwen3ForCausalLM",
        "special_token_ids": {t: tokenizer.convert_tokens_to_ids(t) for t in FORCING_SPECIAL_TOKENS},
    }, indent=2))
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    seconds = time.monotonic() - started
    progress(f"Tiny Qwen3 ready in {seconds:.0f} s: {dest}")
    return BuiltModel(TINY_QWEN3_NAME, dest, TINY_QWEN3_NAME, True, seconds)

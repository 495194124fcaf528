"""What vLLM itself says about its KV cache at start-up, read from a server's log.

vLLM 0.32.0 logs one line (v1/core/kv_cache_utils.py, update_kv_cache_capacity):

    CPU KV cache size: 46,592 tokens, Maximum concurrency for 4,096 tokens per request: 11.38x

("GPU" on CUDA); older builds (0.26.0) split it into two lines, which are read too.
`startup_memory` reads the rest of what a GPU start-up says about memory (0.26.0's
wording): the release, the KV memory the profile left, the hybrid block alignment, the
CUDA graphs and the profile's breakdown, and the command's non-default arguments.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["StartupCapacity", "StartupMemory", "flags_from_log", "startup_capacity", "startup_memory"]

_SIZE = re.compile(r"(?P<device>[A-Z]+(?: \+ host)?) KV cache size: (?P<tokens>[\d,]+) tokens")
_CONCURRENCY = re.compile(r"Maximum concurrency for (?P<len>[\d,]+) tokens per request: (?P<x>[\d.]+)x")


@dataclass(frozen=True)
class StartupCapacity:
    device: str
    kv_cache_tokens: int
    max_model_len: int
    max_concurrency: float  # as logged: two decimals
    line: str  # the whole log line (with vLLM's prefix, maybe colour codes)
    message: str  # just "CPU KV cache size: ... x", in vLLM's words

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def startup_capacity(log_text: str) -> StartupCapacity | None:
    """The last KV-capacity report in a vLLM log, or None when it has none (yet)."""
    sizes = list(_SIZE.finditer(log_text))
    if not sizes:
        return None
    size = sizes[-1]
    conc = _CONCURRENCY.search(log_text, size.end())
    if conc is None:
        return None
    start = log_text.rfind("\n", 0, size.start()) + 1
    end = log_text.find("\n", conc.end())
    return StartupCapacity(
        device=size.group("device"),
        kv_cache_tokens=int(size.group("tokens").replace(",", "")),
        max_model_len=int(conc.group("len").replace(",", "")),
        max_concurrency=float(conc.group("x")),
        line=log_text[start: end if end != -1 else None].strip(),
        message=f"{size.group(0)}, {conc.group(0)}",
    )


_VERSION_LINES = (re.compile(r"Initializing a V1 LLM engine \(v(?P<v>[\w.+-]+)\)"),
                  re.compile(r"█\s+version (?P<v>\d[\w.+-]*)"))
_GIB = r"(?P<gib>[\d.]+) GiB"
_AVAILABLE = re.compile(r"Available KV cache memory: " + _GIB)
_WEIGHTS = re.compile(r"Model loading took " + _GIB + " memory")
_BLOCK = re.compile(r"Setting attention block size to (?P<n>\d+) tokens")
_PADDING = re.compile(r"Padding mamba page size by (?P<pct>[\d.]+)%")
_GRAPHS = re.compile(r"Profiling CUDA graph memory: (?P<list>[A-Z]+=\d+.*)")
_GRAPH_KIND = re.compile(r"([A-Z]+)=(\d+)")
_GRAPH_ESTIMATE = re.compile(r"Estimated CUDA graph memory: " + _GIB + " total")
_BREAKDOWN = re.compile(
    r"Free memory on device \((?P<free>[\d.]+)/(?P<total>[\d.]+) GiB\) on startup\. Desired GPU memory "
    r"utilization is \((?P<util>[\d.]+), (?P<requested>[\d.]+) GiB\)\. Actual usage is (?P<weights>[\d.]+) GiB "
    r"for weight, (?P<activation>[\d.]+) GiB for peak activation, (?P<non_torch>[\d.]+) GiB for non-torch "
    r"memory, and (?P<graphs>[\d.]+) GiB for CUDAGraph memory")
_ARGS = re.compile(r"non-default args: (?P<args>\{.*\})\s*$", re.MULTILINE)
# Positional or not a serve flag: the model is given apart.
_NOT_FLAGS = {"model_tag", "model"}


@dataclass(frozen=True)
class StartupMemory:
    """What one vLLM start-up logged about memory. GiB figures as logged (0.01 GiB steps);
    None where the log has no such line."""

    vllm_version: str | None = None
    available_kv_gib: float | None = None  # "Available KV cache memory"
    weights_gib: float | None = None  # "Model loading took"
    block_size: int | None = None  # "Setting attention block size to N tokens" (hybrids)
    mamba_padding_pct: float | None = None  # "Padding mamba page size by X%"
    cuda_graphs: dict[str, int] = field(default_factory=dict)  # {"PIECEWISE": 51, "FULL": 35}
    cuda_graph_estimate_gib: float | None = None  # what the budget holds back for them
    total_gib: float | None = None  # the breakdown line: CUDA-visible total
    free_gib: float | None = None
    gpu_memory_utilization: float | None = None
    requested_gib: float | None = None
    activation_gib: float | None = None
    non_torch_gib: float | None = None
    cuda_graph_actual_gib: float | None = None  # after capture
    args: dict[str, Any] = field(default_factory=dict)  # the non-default arguments, as logged

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _last(pattern: re.Pattern[str], text: str) -> re.Match[str] | None:
    found = list(pattern.finditer(text))
    return found[-1] if found else None


def _gib(pattern: re.Pattern[str], text: str) -> float | None:
    m = _last(pattern, text)
    return float(m.group("gib")) if m else None


def _args(text: str) -> dict[str, Any]:
    m = _ARGS.search(text)
    if not m:
        return {}
    try:
        value = ast.literal_eval(m.group("args"))
    except (ValueError, SyntaxError):
        return {}
    return value if isinstance(value, dict) else {}


def startup_memory(log_text: str) -> StartupMemory:
    """Every memory figure a vLLM start-up log holds (the last of each)."""
    version = None
    for pattern in _VERSION_LINES:
        m = _last(pattern, log_text)
        if m:
            version = m.group("v")
            break
    block, padding = _last(_BLOCK, log_text), _last(_PADDING, log_text)
    graphs = _last(_GRAPHS, log_text)
    counts = {kind: int(n) for kind, n in _GRAPH_KIND.findall(graphs.group("list"))} if graphs else {}
    b = _last(_BREAKDOWN, log_text)

    def part(name: str) -> float | None:
        return float(b.group(name)) if b else None

    return StartupMemory(
        vllm_version=version,
        available_kv_gib=_gib(_AVAILABLE, log_text),
        weights_gib=_gib(_WEIGHTS, log_text),
        block_size=int(block.group("n")) if block else None,
        mamba_padding_pct=float(padding.group("pct")) if padding else None,
        cuda_graphs=counts,
        cuda_graph_estimate_gib=_gib(_GRAPH_ESTIMATE, log_text),
        total_gib=part("total"), free_gib=part("free"), gpu_memory_utilization=part("util"),
        requested_gib=part("requested"), activation_gib=part("activation"), non_torch_gib=part("non_torch"),
        cuda_graph_actual_gib=part("graphs"),
        args=_args(log_text),
    )


def flags_from_log(log_text: str) -> list[str]:
    """The `vllm serve` flags of a start-up, rebuilt from its "non-default args" line
    (the model itself, positional, left out). Empty when the log has no such line."""
    out: list[str] = []
    for key, value in _args(log_text).items():
        if key in _NOT_FLAGS or value is None:
            continue
        flag = "--" + key.replace("_", "-")
        if value is True:
            out.append(flag)
        elif value is False:
            out.append("--no-" + key.replace("_", "-"))
        elif isinstance(value, (dict, list)) and not (isinstance(value, list) and all(
                isinstance(v, str) for v in value)):
            out += [flag, json.dumps(value)]
        elif isinstance(value, list):
            out += [flag, *value]
        else:
            out += [flag, str(value)]
    return out

"""What vLLM itself says about its KV cache at start-up, read from a server's log.

vLLM 0.32.0 logs one line (v1/core/kv_cache_utils.py, update_kv_cache_capacity):

    CPU KV cache size: 46,592 tokens, Maximum concurrency for 4,096 tokens per request: 11.38x

("GPU" on CUDA); older builds split it into two lines, which are read too.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["StartupCapacity", "startup_capacity"]

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

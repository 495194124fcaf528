"""Goodput as aiperf defines it: requests that meet every SLO, per second.

    --goodput "ttft:500 tpot:30"        vLLM bench's names (ms)
    --goodput "time_to_first_token:500 inter_token_latency:30"   aiperf's tags (ms)

A request is good when it succeeded and every figure named meets its objective
(times at most the value, per-user rates at least the value); a figure the
request lacks (e.g. TPOT of a one-token answer) makes it not good, as in aiperf.
good fraction = good requests / all requests sent (failures count against it, as
aiperf's good_request_fraction); goodput = good requests / the run's duration
(requests/s, aiperf's `goodput`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from workbench.bench.records import NS_PER_MS, RequestRecord
from workbench.errors import InputError

__all__ = ["SLO_NAMES", "Goodput", "compute_goodput", "describe_slos", "parse_goodput"]


@dataclass(frozen=True)
class _Slo:
    tag: str  # aiperf's metric tag: the name kept in results
    unit: str
    larger_is_better: bool
    value: Callable[[RequestRecord], float | None]


def _ms(get: Callable[[RequestRecord], float | None]) -> Callable[[RequestRecord], float | None]:
    def value(record: RequestRecord) -> float | None:
        ns = get(record)
        return None if ns is None else ns / NS_PER_MS

    return value


_SLOS = (
    _Slo("time_to_first_token", "ms", False, _ms(lambda r: r.ttft_ns)),
    _Slo("time_to_first_output_token", "ms", False, _ms(lambda r: r.ttfo_ns)),
    _Slo("inter_token_latency", "ms", False, _ms(lambda r: r.tpot_ns)),
    _Slo("request_latency", "ms", False, _ms(lambda r: r.e2e_ns)),
    _Slo("output_token_throughput_per_user", "tok/s", True, lambda r: r.decode_tok_s),
    _Slo("prefill_throughput_per_user", "tok/s", True, lambda r: r.prefill_tok_s),
)
_BY_TAG = {s.tag: s for s in _SLOS}
# Accepted spellings -> aiperf's tag. vLLM bench's ttft/tpot/e2el, and our own figure names.
_ALIASES = {
    **{s.tag: s.tag for s in _SLOS},
    "ttft": "time_to_first_token",
    "ttfo": "time_to_first_output_token",
    "tpot": "inter_token_latency",
    "itl": "inter_token_latency",
    "e2el": "request_latency",
    "e2e": "request_latency",
    "decode_tok_s_per_user": "output_token_throughput_per_user",
    "prefill_tok_s_per_user": "prefill_throughput_per_user",
}
SLO_NAMES = tuple(_ALIASES)


def parse_goodput(spec: str | Sequence[str] | dict[str, float] | None) -> dict[str, float] | None:
    """`"ttft:500 tpot:30"` (or a list of such pairs, or a dict) -> {aiperf tag: value}."""
    if spec is None or spec == "" or spec == []:
        return None
    pairs: Iterable[tuple[str, Any]]
    if isinstance(spec, dict):
        pairs = spec.items()
    else:
        words = spec.split() if isinstance(spec, str) else [w for item in spec for w in item.split()]
        pairs = [tuple(w.split(":", 1)) if ":" in w else (w, None) for w in words]  # type: ignore[misc]
    slos: dict[str, float] = {}
    for key, raw in pairs:
        tag = _ALIASES.get(str(key).strip().lower())
        if tag is None:
            raise InputError(f"Unknown goodput metric {key!r}.",
                             hint="Use ttft, ttfo, tpot, e2el (ms), or aiperf's tags: " + ", ".join(_BY_TAG) + ".")
        try:
            value = float(raw)
        except (TypeError, ValueError):
            raise InputError(f"Goodput objective {key!r} needs a number, as in {key}:500 (got {raw!r}).",
                             hint='Write the objectives as "ttft:500 tpot:30" (times in ms, rates in tok/s).',
                             settings=("goodput",)) from None
        if value < 0:
            raise InputError(f"Goodput objective {key}:{raw} is negative.", hint="Objectives are 0 or more.")
        slos[tag] = value
    return slos


def describe_slos(slos: dict[str, float]) -> str:
    parts = []
    for tag, value in slos.items():
        slo = _BY_TAG[tag]
        parts.append(f"{tag} {'>=' if slo.larger_is_better else '<='} {value:g} {slo.unit}")
    return ", ".join(parts)


@dataclass
class Goodput:
    slos: dict[str, float]  # aiperf tag -> objective (ms, or tok/s for the per-user rates)
    good_requests: int
    requests: int  # all requests sent, failed ones included
    good_fraction: float | None
    goodput_req_s: float | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Goodput:
        fields: dict[str, Any] = {k: data.get(k) for k in cls.__dataclass_fields__}
        return cls(**fields)


def _is_good(record: RequestRecord, slos: dict[str, float]) -> bool:
    if not record.ok:
        return False
    for tag, objective in slos.items():
        slo = _BY_TAG[tag]
        value = slo.value(record)
        if value is None:
            return False
        if (value < objective) if slo.larger_is_better else (value > objective):
            return False
    return True


def compute_goodput(records: Sequence[RequestRecord], slos: dict[str, float], duration_s: float | None) -> Goodput:
    good = sum(1 for r in records if _is_good(r, slos))
    fraction = good / len(records) if records else None
    rate = good / duration_s if duration_s else None
    return Goodput(dict(slos), good, len(records), fraction, rate)

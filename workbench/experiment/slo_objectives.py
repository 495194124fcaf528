"""An SLO search's objectives: FIGURE_STAT:BOUND, and how a probe's requests are judged against one.

Figures: ttft, ttfo, tpot, e2e, itl (ms, at most the bound) and decode (per-user decode tok/s, at
least the bound). STAT is pNN, NN % of requests meeting it (the NNth percentile of a time; for
decode, the (100 - NN)th percentile of the rate), or mean. A request that failed meets no objective.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from workbench.bench.records import NS_PER_MS, RequestRecord
from workbench.bench.summary import percentile
from workbench.errors import InputError

__all__ = ["FIGURES", "Figure", "Slo", "parse_slos"]


@dataclass(frozen=True)
class Figure:
    title: str
    unit: str
    at_least: bool  # True: a rate, the objective is a floor; False: a time, a ceiling
    values: Callable[[RequestRecord], list[float]]  # one request's values (itl: one per chunk gap)


def _ms(ns: float | None) -> list[float]:
    return [] if ns is None else [ns / NS_PER_MS]


FIGURES: dict[str, Figure] = {
    "ttft": Figure("TTFT", "ms", False, lambda r: _ms(r.ttft_ns)),
    "ttfo": Figure("time to first output", "ms", False, lambda r: _ms(r.ttfo_ns)),
    "tpot": Figure("TPOT", "ms", False, lambda r: _ms(r.tpot_ns)),
    "e2e": Figure("E2E", "ms", False, lambda r: _ms(r.e2e_ns)),
    "itl": Figure("ITL (per chunk)", "ms", False, lambda r: [g / NS_PER_MS for g in r.chunk_gaps_ns()]),
    "decode": Figure("per-user decode", "tok/s", True, lambda r: [] if r.decode_tok_s is None else [r.decode_tok_s]),
}
_ALIASES = {"e2el": "e2e", "decode_tok_s_per_user": "decode", "tps": "decode"}
_SPEC = re.compile(r"^(?P<figure>[a-z0-9_]+?)_(?P<stat>p\d+(?:\.\d+)?|mean)$")
_HINT = ("Write each objective as FIGURE_STAT:BOUND, e.g. ttft_p90:500 tpot_p90:25 decode_p50:20; figures: "
         + ", ".join(f"{k} ({f.unit}, {'at least' if f.at_least else 'at most'})" for k, f in FIGURES.items())
         + "; STAT is pNN (NN % of requests meet it) or mean.")


@dataclass(frozen=True)
class Slo:
    """One objective: `stat` of `figure` at most (a time) or at least (decode) `bound`."""

    figure: str
    stat: str  # "p90", "p99.9", "mean"
    bound: float

    @property
    def key(self) -> str:
        return f"{self.figure}_{self.stat}"

    @property
    def at_least(self) -> bool:
        return FIGURES[self.figure].at_least

    @property
    def unit(self) -> str:
        return FIGURES[self.figure].unit

    def describe(self) -> str:
        """"TPOT p90 <= 25 ms" (for decode: "per-user decode p90 >= 20 tok/s")."""
        return f"{FIGURES[self.figure].title} {self.stat} {'>=' if self.at_least else '<='} {self.bound:g} {self.unit}"

    def measure(self, records: Sequence[RequestRecord]) -> float | None:
        """The figure over a probe's requests; a failed request counts as missing it."""
        worst = 0.0 if self.at_least else math.inf
        values: list[float] = []
        for record in records:
            got = FIGURES[self.figure].values(record) if record.ok else []
            values.extend(got or [worst])
        if not values:
            return None
        if self.stat == "mean":
            return math.fsum(values) / len(values)
        share = float(self.stat[1:])
        return percentile(sorted(values), 100 - share if self.at_least else share)

    def holds(self, value: float | None) -> bool:
        if value is None:
            return False
        return value >= self.bound if self.at_least else value <= self.bound

    def text(self) -> str:
        return f"{self.key}:{self.bound:g}"


def parse_slos(spec: str | Sequence[str]) -> list[Slo]:
    """`"ttft_p90:500 tpot_p90:25"` (or a list of such words) -> the objectives, each checked."""
    words = spec.split() if isinstance(spec, str) else [w for item in spec for w in item.split()]
    if not words:
        raise InputError("No objective given.", hint=_HINT, settings=("slo",))
    slos: list[Slo] = []
    for word in words:
        name, _, raw = word.partition(":")
        match = _SPEC.match(name.strip().lower())
        figure = match and _ALIASES.get(match["figure"], match["figure"])
        if not match or figure not in FIGURES:
            raise InputError(f"{word!r} is not an objective.", hint=_HINT, settings=("slo",))
        stat = match["stat"]
        if stat != "mean" and not 0 < float(stat[1:]) <= 100:
            raise InputError(f"{word!r}: the percentile must be above 0 and at most 100.", hint=_HINT,
                             settings=("slo",))
        try:
            bound = float(raw)
        except ValueError:
            raise InputError(f"{word!r} needs a bound after the colon, as in {name}:500.", hint=_HINT,
                             settings=("slo",)) from None
        if not bound > 0 or math.isinf(bound):
            raise InputError(f"{word!r}: the bound must be a positive number.", hint=_HINT, settings=("slo",))
        slo = Slo(str(figure), stat, bound)
        if any(s.key == slo.key for s in slos):
            raise InputError(f"{slo.key} is given twice.", hint="Give each objective once.", settings=("slo",))
        slos.append(slo)
    return slos

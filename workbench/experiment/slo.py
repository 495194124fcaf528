"""How many users each configuration serves within the latency objectives: the SLO search.

    python -m workbench experiment --hardware cpu --spec off,ngram --slo ttft_p90:500 tpot_p90:25

For each configuration, on its running server: the highest concurrency (with `by="rate"`, the
highest request rate) at which every objective holds. Found adaptively: double from 1 until an
objective is missed or the bound is reached, then bisect between the last level that met them
and the first that missed, until the two are within `resolution` of each other (an eighth) or
the probe budget is spent. Every probe is a measured level (a warm-up, then the measured
requests, through workbench.bench.run_benchmark) and is kept with its figures; the next level is
a function of the probes so far (`next_step`), so a search cut short resumes where it stopped.

An objective is FIGURE_STAT:BOUND, e.g. ttft_p90:500 (workbench.experiment.slo_objectives).

The edges, said plainly: a configuration that misses even at concurrency 1 says so; one that
still meets them at the bound (--max-concurrency) says "at least N"; a probe whose client was
the bottleneck (the benchmark's client-lag check, workbench.bench.lag) is marked, kept out of
the answer, and nothing above it is probed (the client would fall further behind there). That
check's fixed 10 ms is 5 % of a 200 ms TTFT; here the same 5 % is taken of the shortest time an
objective judges (a TTFT, E2E or ITL bound; a TPOT bound times the decode tokens), so a 10 ms lag
does not void a 3 s TTFT, and a client using a whole core is client-bound whatever the objectives.

The search by rate first measures one user at a time (concurrency 1, closed loop): its request
rate is where the rates start, halving while they miss, doubling while they meet; a rate is met
only if the server also completed it (RATE_WINDOW_E2E).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Literal

from workbench.bench.lag import CLIENT_BOUND_CPU_PERCENT, CLIENT_BOUND_LAG_MS, ClientLag
from workbench.bench.records import RequestRecord
from workbench.bench.results import BenchResult
from workbench.errors import InputError, WorkbenchError
from workbench.experiment.slo_objectives import FIGURES, Slo, parse_slos

__all__ = ["FIGURES", "RATE_WINDOW_E2E", "Capacity", "CapacityKind", "Probe", "SearchBy", "Slo", "SloAnswer",
           "SloSearch", "Step", "Verdict", "compare", "capacity_of", "evaluate", "next_step", "parse_slos",
           "probes_left", "run_search"]

SearchBy = Literal["concurrency", "rate"]
# A rate probe's arrivals span this many times one request's E2E (as one user at a time saw it),
# so a queue builds when the rate is past what the server sustains, and the rate the server
# completed can be told from the rate offered (a completed rate below (1 - resolution) of the
# offered one is a miss: the server, or the in-flight cap, did not keep up).
RATE_WINDOW_E2E = 10
_RATE_DIGITS = 3  # rates are probed at 3 significant figures
_LOWEST_RATE = 0.001  # req/s: halving stops here


@dataclass
class SloSearch:
    """What to search: the objectives, by concurrency or request rate, the bound and the budget."""

    slos: list[Slo]
    by: SearchBy = "concurrency"
    max_concurrency: int = 256  # the highest concurrency probed; with by="rate", the cap on requests in flight
    max_rate: float | None = None  # req/s; None: doubling goes on until a rate misses (or the budget ends)
    max_probes: int = 16
    resolution: float = 0.125  # bisect until the level that missed is within this share of the one that met

    def __post_init__(self) -> None:
        problems = {}
        if self.by not in ("concurrency", "rate"):
            problems["slo_by"] = f"the search goes by concurrency or rate, not {self.by!r}"
        if self.max_concurrency < 1:
            problems["max_concurrency"] = "the highest concurrency must be at least 1"
        if self.max_rate is not None and not self.max_rate > 0:
            problems["max_rate"] = "the highest rate must be positive"
        if self.max_probes < 1:
            problems["max_probes"] = "the search needs at least one probe"
        if not 0 < self.resolution < 1:
            problems["resolution"] = "the resolution is a share between 0 and 1"
        if problems:
            raise InputError("Invalid SLO search: " + "; ".join(problems.values()) + ".",
                             settings=tuple(k for k in problems if k != "resolution"))

    def describe(self) -> str:
        bound = (f"concurrency 1 to {self.max_concurrency}" if self.by == "concurrency" else
                 f"request rate{'' if self.max_rate is None else f' up to {self.max_rate:g} req/s'}, at most "
                 f"{self.max_concurrency} in flight")
        return (f"SLO: {', '.join(s.describe() for s in self.slos)}; the search goes by {bound}, at most "
                f"{self.max_probes} probes, to within {self.resolution:.1%}.")

    def to_dict(self) -> dict[str, Any]:
        return {"slos": [{"figure": s.figure, "stat": s.stat, "bound": s.bound} for s in self.slos], "by": self.by,
                "max_concurrency": self.max_concurrency, "max_rate": self.max_rate, "max_probes": self.max_probes,
                "resolution": self.resolution}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SloSearch:
        slos = [Slo(str(s["figure"]), str(s["stat"]), float(s["bound"])) for s in data["slos"]]
        return cls(slos, data.get("by", "concurrency"), int(data.get("max_concurrency", 256)), data.get("max_rate"),
                   int(data.get("max_probes", 16)), float(data.get("resolution", 0.125)))


class Verdict(str, Enum):
    MET = "met"  # every objective held
    MISSED = "missed"  # at least one did not
    FAILED = "failed"  # the level could not be measured (the server failed it): a miss
    CLIENT_BOUND = "client-bound"  # the client was the bottleneck: not trusted either way
    PARTIAL = "partial"  # cut short (Ctrl-C, the server gone): not used; measured again on resume

    @property
    def trusted(self) -> bool:
        return self in (Verdict.MET, Verdict.MISSED, Verdict.FAILED)


@dataclass
class Probe:
    """One measured level: closed loop at `concurrency`, or Poisson arrivals at `rate` (at most
    `concurrency` in flight)."""

    by: SearchBy
    concurrency: int
    rate: float | None
    verdict: Verdict
    figures: dict[str, float | None] = field(default_factory=dict)  # Slo.key -> measured
    missed: list[str] = field(default_factory=list)  # the keys that did not hold
    request_rate: float | None = None  # requests/s the server completed
    note: str | None = None  # why not trusted, or what failed
    result: BenchResult | None = None
    reused: bool = False  # a level the experiment's sweep had measured already

    @property
    def level(self) -> float:
        return self.rate if self.by == "rate" and self.rate is not None else float(self.concurrency)

    def load(self) -> str:
        if self.by == "rate":
            return f"{self.rate:g} req/s (at most {self.concurrency} in flight)"
        return f"concurrency {self.concurrency}"

    def to_dict(self, records: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {"by": self.by, "concurrency": self.concurrency, "rate": self.rate,
                               "verdict": self.verdict.value, "figures": self.figures, "missed": self.missed,
                               "request_rate": self.request_rate, "note": self.note, "reused": self.reused}
        if self.result is not None:
            lag = self.result.client_lag
            out["client_lag_p99_ms"] = None if lag is None else lag.p99_ms
            out["duration_s"] = self.result.summary.duration_s
            out["requests"] = self.result.summary.requests
            out["errors"] = self.result.summary.errors
            if records:
                out["result"] = self.result.to_dict()
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Probe:
        result = data.get("result")
        return cls(data["by"], int(data["concurrency"]), data.get("rate"), Verdict(data["verdict"]),
                   dict(data.get("figures") or {}), list(data.get("missed") or []), data.get("request_rate"),
                   data.get("note"), None if result is None else BenchResult.from_dict(result),
                   bool(data.get("reused")))


def evaluate(search: SloSearch, by: SearchBy, concurrency: int, rate: float | None, result: BenchResult,
             reused: bool = False) -> Probe:
    """A measured level against the objectives (and, for a rate, whether the server completed it)."""
    figures = {s.key: s.measure(result.records) for s in search.slos}
    missed = [s.key for s in search.slos if not s.holds(figures[s.key])]
    completed = result.summary.request_throughput
    note = None
    if rate is not None and (completed or 0.0) < rate * (1 - search.resolution):
        missed.append("completed_rate")
        figures["completed_rate"] = completed
        note = f"the server completed {completed or 0:.3g} req/s of the {rate:g} offered"
    probe = Probe(by, concurrency, rate, Verdict.MISSED if missed else Verdict.MET, figures, missed,
                  completed, note, result, reused)
    lag = result.client_lag
    if result.partial is not None:
        probe.verdict, probe.note = Verdict.PARTIAL, result.partial
    elif lag is not None and lag.client_bound:
        window = _judged_window_ms(search, result.records)
        if _client_bound_for(lag, window):
            probe.verdict, probe.note = Verdict.CLIENT_BOUND, lag.describe()
        else:
            trusted = (f"client lag p99 {lag.p99_ms:.1f} ms, under {CLIENT_SHARE:.0%} of the {window:,.0f} ms "
                       "the objectives judge: trusted")
            probe.note = trusted if probe.note is None else f"{probe.note}; {trusted}"
    return probe


# The share of what an objective judges that the client's lag may take (the benchmark's own check: 10 ms of 200).
CLIENT_SHARE = 0.05


def _judged_window_ms(search: SloSearch, records: Sequence[RequestRecord]) -> float:
    """The shortest time the objectives judge: a TTFT, TTFO, E2E or ITL bound; a TPOT (or per-user decode)
    bound spread over a request's decode tokens (TPOT is (last - first token) / tokens: a late read of
    either moves it by lag / tokens)."""
    tokens = [r.decode_tokens for r in records if r.ok and r.decode_tokens]
    decode = max(1.0, min(tokens)) if tokens else 1.0
    windows = []
    for slo in search.slos:
        if slo.figure == "tpot":
            windows.append(slo.bound * decode)
        elif slo.figure == "decode":
            windows.append(1000 / slo.bound * decode)
        else:
            windows.append(slo.bound)
    return min(windows)


def _client_bound_for(lag: ClientLag, window_ms: float) -> bool:
    busy = lag.cpu_percent is not None and lag.cpu_percent >= CLIENT_BOUND_CPU_PERCENT
    lagging = lag.p99_ms is not None and lag.p99_ms > max(CLIENT_BOUND_LAG_MS, CLIENT_SHARE * window_ms)
    return busy or lagging


@dataclass(frozen=True)
class Step:
    """The next level to probe, and why."""

    by: SearchBy
    concurrency: int
    rate: float | None
    why: str  # "one user at a time", "doubling", "halving", "bisecting"
    window_s: float | None = None  # a rate probe's arrivals span at least this long (RATE_WINDOW_E2E)

    def rate_requests(self, requests_per_level: int | None, prompts: int) -> int:
        """How many requests a rate probe sends: enough arrivals to span window_s (or more, as asked).
        (A closed-loop probe sends what the experiment's levels do: ExperimentSettings.requests_at.)"""
        return max(prompts, requests_per_level or 0, math.ceil((self.rate or 0.0) * (self.window_s or 0.0)))

    def load(self) -> str:
        return (f"{self.rate:g} req/s" if self.by == "rate" else f"concurrency {self.concurrency}") + f" ({self.why})"


class CapacityKind(str, Enum):
    FOUND = "found"  # met at N, missed at the next level tried above
    AT_LEAST = "at-least"  # still met at the bound
    CLIENT_LIMITED = "client-limited"  # met at N; above it the client was the bottleneck
    NONE = "none"  # missed at the lowest level tried
    UNKNOWN = "unknown"  # nothing trusted measured (yet)


@dataclass
class _State:
    met: float | None  # the highest level that met, below the lowest that missed
    missed: float | None  # the lowest level that missed (or failed)
    client_bound: float | None  # the lowest client-bound level above `met`
    floor: float | None  # the lowest level probed


def _state(probes: Sequence[Probe], by: SearchBy) -> _State:
    mine = [p for p in probes if p.by == by]
    missed = min((p.level for p in mine if p.verdict in (Verdict.MISSED, Verdict.FAILED)), default=None)
    met = max((p.level for p in mine if p.verdict is Verdict.MET and (missed is None or p.level < missed)),
              default=None)
    bound = min((p.level for p in mine if p.verdict is Verdict.CLIENT_BOUND and (met is None or p.level > met)),
                default=None)
    floor = min((p.level for p in mine if p.verdict is not Verdict.PARTIAL), default=None)
    return _State(met, missed, bound, floor)


def _calibration(probes: Sequence[Probe]) -> Probe | None:
    """The rate search's first probe: one user at a time."""
    return next((p for p in probes if p.by == "concurrency" and p.concurrency == 1
                 and p.verdict is not Verdict.PARTIAL), None)


def _round_rate(rate: float) -> float:
    return float(f"{rate:.{_RATE_DIGITS}g}")


def _close(search: SloSearch, low: float, high: float) -> bool:
    if search.by == "concurrency":
        return high - low <= max(1, round(low * search.resolution))
    return (high - low) / low <= search.resolution


def next_step(search: SloSearch, probes: Sequence[Probe]) -> Step | None:
    """The level to probe next, or None when the search is over (answer: `capacity_of`)."""
    done = [p for p in probes if p.verdict is not Verdict.PARTIAL]
    if len(done) >= search.max_probes:
        return None
    if search.by == "rate":
        first = _calibration(done)
        if first is None:
            return Step("concurrency", 1, None, "one user at a time")
        if first.verdict is not Verdict.MET or not first.request_rate:
            return None  # misses (or cannot tell) even one at a time
    state = _state(done, search.by)
    ceiling = min((x for x in (state.missed, state.client_bound) if x is not None), default=None)
    if state.met is None:
        if ceiling is None:  # nothing measured yet at this kind of level
            if search.by == "concurrency":
                return Step("concurrency", 1, None, "doubling")
            start = _calibration(done)
            assert start is not None and start.request_rate
            return _rate_step(search, done, start.request_rate, "doubling")
        if search.by == "concurrency" or state.missed is None or (state.floor or 0) < _LOWEST_RATE:
            return None  # missed at 1; or the client could not measure the lowest level
        return _rate_step(search, done, (state.floor or 0) / 2, "halving")
    if ceiling is None:
        if search.by == "concurrency":
            if state.met >= search.max_concurrency:
                return None
            return Step("concurrency", min(int(state.met) * 2, search.max_concurrency), None, "doubling")
        if search.max_rate is not None and state.met >= search.max_rate:
            return None
        return _rate_step(search, done, state.met * 2, "doubling")
    if _close(search, state.met, ceiling):
        return None
    if search.by == "concurrency":
        return Step("concurrency", (int(state.met) + int(ceiling)) // 2, None, "bisecting")
    middle = _round_rate((state.met + ceiling) / 2)
    return None if not state.met < middle < ceiling else _rate_step(search, done, middle, "bisecting")


def _rate_step(search: SloSearch, probes: Sequence[Probe], rate: float, why: str) -> Step:
    rate = _round_rate(rate if search.max_rate is None else min(rate, search.max_rate))
    first = _calibration(probes)
    e2e_ms = None if first is None or first.result is None else first.result.summary.e2e_ms.mean
    return Step("rate", search.max_concurrency, rate, why, RATE_WINDOW_E2E * (e2e_ms or 0.0) / 1000)


def probes_left(search: SloSearch, probes: Sequence[Probe]) -> int:
    """About how many probes the search still needs (for the estimate; the budget caps it)."""
    done = [p for p in probes if p.verdict is not Verdict.PARTIAL]
    if next_step(search, done) is None:
        return 0
    bisections = max(1, math.ceil(math.log2(1 / search.resolution)))
    state = _state(done, search.by)
    ceiling = min((x for x in (state.missed, state.client_bound) if x is not None), default=None)
    if state.met is None:
        left = bisections + (1 if search.by == "concurrency" else 4)
    elif ceiling is None:
        doublings = (math.ceil(math.log2(search.max_concurrency / state.met)) if search.by == "concurrency" else 3)
        left = doublings + bisections
    else:
        step = max(1.0, state.met * search.resolution)
        left = max(1, math.ceil(math.log2(max(ceiling - state.met, 1) / step)))
    return min(left, search.max_probes - len(done))


@dataclass
class Capacity:
    """One configuration's answer."""

    label: str
    by: SearchBy
    kind: CapacityKind
    level: float | None  # users (or req/s) at which every objective held: the answer
    request_rate: float | None  # requests/s the server completed at that level
    above: Probe | None  # the probe just above it: the one that missed, or was client-bound
    probes: int  # probes run (reused sweep levels included)
    finished: bool  # False: the search was cut short (resume continues it)
    lowest: Probe | None = None  # with NONE: the lowest level tried, which missed
    at_bound: bool = False  # with AT_LEAST: it met them at the highest level allowed (else the budget ended)

    def _amount(self, value: float | None = None) -> str:
        value = self.level if value is None else value
        if value is None:
            return "-"
        return f"{value:g} req/s" if self.by == "rate" else f"{int(value)} user{'s' if value != 1 else ''}"

    def sentence(self) -> str:
        unfinished = "" if self.finished else " (so far: the search was cut short; --resume continues it)"
        rate = "" if self.request_rate is None or self.by == "rate" else f" ({self.request_rate:.3g} req/s)"
        if self.kind is CapacityKind.UNKNOWN:
            why = f": {self.above.note}" if self.above is not None and self.above.note else ""
            return f"{self.label}: no trusted probe yet{why}{unfinished}."
        if self.kind is CapacityKind.NONE:
            low = self.lowest
            where = "at concurrency 1" if self.by == "concurrency" else (
                "even one request at a time" if low is None or low.by == "concurrency" else f"even at {low.load()}")
            return f"{self.label} misses the SLO {where}{_missed(low)}{unfinished}."
        serves = f"{self.label} serves {self._amount()} within the SLO{rate}"
        if self.kind is CapacityKind.AT_LEAST:
            at_least = serves.replace(" serves ", " serves at least ")
            if not self.at_bound:
                ended = "so far" if not self.finished else f"the probe budget ({self.probes}) ran out first"
                return f"{at_least}: no level it was tried at missed ({ended}){unfinished}."
            bound = "concurrency" if self.by == "concurrency" else "rate"
            return f"{at_least}: it still met them at the highest {bound} allowed (raise it to look further)."
        above = self.above
        if self.kind is CapacityKind.CLIENT_LIMITED and above is not None:
            return (f"{serves.replace(' serves ', ' serves at least ')}; at {above.load()} the client was the "
                    f"bottleneck ({above.note}), so that probe is not trusted and nothing above it was "
                    f"measured{unfinished}.")
        if above is None:
            return f"{serves}{unfinished}."
        return f"{serves}; at {above.load()} it missed{_missed(above)}{unfinished}."

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "by": self.by, "kind": self.kind.value, "level": self.level,
                "request_rate": self.request_rate, "above": None if self.above is None else self.above.level,
                "probes": self.probes, "finished": self.finished, "sentence": self.sentence()}


def _missed(probe: Probe | None) -> str:
    if probe is None:
        return ""
    if probe.verdict is Verdict.FAILED:
        return f" (the level failed: {probe.note})"
    parts = []
    for key in probe.missed:
        value = probe.figures.get(key)
        parts.append(f"{key} {'-' if value is None else f'{value:,.1f}'}")
    return f" ({', '.join(parts)})" if parts else ""


def capacity_of(label: str, search: SloSearch, probes: Sequence[Probe]) -> Capacity:
    done = [p for p in probes if p.verdict is not Verdict.PARTIAL]
    finished = next_step(search, done) is None
    if search.by == "rate":
        first = _calibration(done)
        if first is not None and first.verdict in (Verdict.MISSED, Verdict.FAILED):
            return Capacity(label, "rate", CapacityKind.NONE, None, None, None, len(done), finished, first)
        if first is not None and first.verdict is Verdict.CLIENT_BOUND:
            return Capacity(label, "rate", CapacityKind.UNKNOWN, None, None, first, len(done), finished)
    state = _state(done, search.by)
    mine = {p.level: p for p in done if p.by == search.by}
    if state.met is None:
        if state.missed is not None:
            lowest = mine.get(state.floor) if state.floor is not None else None
            return Capacity(label, search.by, CapacityKind.NONE, None, None, None, len(done), finished, lowest)
        bound = mine.get(state.client_bound) if state.client_bound is not None else None
        return Capacity(label, search.by, CapacityKind.UNKNOWN, None, None, bound, len(done), finished)
    at = mine[state.met]
    rate = at.request_rate
    if state.missed is not None and (state.client_bound is None or state.missed < state.client_bound):
        return Capacity(label, search.by, CapacityKind.FOUND, state.met, rate, mine[state.missed], len(done), finished)
    if state.client_bound is not None:
        return Capacity(label, search.by, CapacityKind.CLIENT_LIMITED, state.met, rate, mine[state.client_bound],
                        len(done), finished)
    top = search.max_concurrency if search.by == "concurrency" else search.max_rate
    return Capacity(label, search.by, CapacityKind.AT_LEAST, state.met, rate, None, len(done), finished,
                    at_bound=top is not None and state.met >= top)


@dataclass
class SloAnswer:
    """The configurations compared on their capacity."""

    capacities: list[Capacity]
    winner: str | None
    runner_up: str | None
    lead: float | None  # winner's capacity / runner-up's
    sentence: str

    def to_dict(self) -> dict[str, Any]:
        return {"capacities": [c.to_dict() for c in self.capacities], "winner": self.winner,
                "runner_up": self.runner_up, "lead": self.lead, "sentence": self.sentence}


def compare(capacities: Sequence[Capacity]) -> SloAnswer:
    """The winner is the configuration that serves the most within the SLO."""
    ranked = sorted((c for c in capacities if c.level is not None), key=lambda c: c.level or 0.0, reverse=True)
    caps = list(capacities)
    if not ranked:
        return SloAnswer(caps, None, None, None, "No configuration met the SLO at any level measured.")
    best, rest = ranked[0], ranked[1:]
    unit = "req/s" if best.by == "rate" else "users"
    if not rest:
        others = [c.label for c in caps if c is not best]
        tail = f"; {', '.join(others)} did not meet it at any level measured" if others else ""
        if not others:
            return SloAnswer(caps, best.label, None, None, best.sentence())
        return SloAnswer(caps, best.label, None, None, f"Winner: {best.label} ({best._amount()}){tail}.")
    second = rest[0]
    assert best.level is not None and second.level is not None
    if best.level == second.level:
        both = " (each still met them at the bound)" if best.kind is CapacityKind.AT_LEAST else ""
        return SloAnswer(caps, None, None, 1.0, f"No winner: {best.label} and {second.label} both serve "
                         f"{best._amount()} within the SLO{both}.")
    lead = best.level / second.level
    gap = best.level - second.level
    gap_text = f"{gap:.3g} req/s" if unit == "req/s" else f"{int(gap)} more user{'s' if gap != 1 else ''}"
    floor = " at least" if best.kind in (CapacityKind.AT_LEAST, CapacityKind.CLIENT_LIMITED) else ""
    return SloAnswer(caps, best.label, second.label, lead,
                     f"Winner: {best.label}, serving{floor} {best._amount()} against {second.label}'s "
                     f"{second._amount()}: {lead:.2f}x, {gap_text}.")


def run_search(search: SloSearch, probes: list[Probe], measure: Callable[[Step, int], BenchResult],
               reuse: Callable[[int], BenchResult | None], saved: Callable[[], None]) -> str | None:
    """Probe until `next_step` says the search is over; `probes` grows in place (and `saved` is called
    after each). `measure(step, number)` runs one level (it raises to stop the whole experiment);
    `reuse(concurrency)` is a level already measured by the experiment's sweep, or None.

    Returns None when the search is over, or why it stopped early (a probe cut short).
    """
    while (step := next_step(search, probes)) is not None:
        probe = _probe(search, step, probes, measure, reuse)
        probes[:] = [p for p in probes if not (p.verdict is Verdict.PARTIAL and p.by == probe.by
                                                and p.level == probe.level)]
        probes.append(probe)
        saved()
        if probe.verdict is Verdict.PARTIAL:
            return probe.note
    return None


def _probe(search: SloSearch, step: Step, probes: Sequence[Probe], measure: Callable[[Step, int], BenchResult],
           reuse: Callable[[int], BenchResult | None]) -> Probe:
    earlier = reuse(step.concurrency) if step.by == "concurrency" else None
    if earlier is not None:
        return evaluate(search, step.by, step.concurrency, step.rate, earlier, reused=True)
    try:
        result = measure(step, len([p for p in probes if p.verdict is not Verdict.PARTIAL]) + 1)
    except WorkbenchError as exc:  # e.g. the server went away or every warm-up request failed at this level
        return Probe(step.by, step.concurrency, step.rate, Verdict.FAILED, note=exc.message)
    return evaluate(search, step.by, step.concurrency, step.rate, result)

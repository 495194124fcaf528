"""The answer an experiment gives: each level's figures, the winners, the crossover.

    level_figures(result)     one level of one configuration, from its BenchResult
    winners(figures)          per concurrency, who wins on each figure (and by how much)
    crossovers(figures, ...)  per speculative configuration: its lead over the baseline at
                              each level, and the concurrency where it stops paying

Acceptance is read two ways and both are kept: from the responses (vLLM's
`metrics.speculative_decoding`, per request, so a distribution) and from the
server's /metrics counter deltas over the same level. Both are token-weighted
(accepted draft tokens / draft tokens), so over the same requests they agree.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from workbench.bench.records import RequestRecord
from workbench.bench.results import BenchResult
from workbench.bench.summary import Distribution

__all__ = ["AGREEMENT_TOLERANCE", "WINNER_METRICS", "Crossover", "CrossoverVerdict", "LevelFigures", "Winner", "crossovers",
           "level_figures", "winners"]

# Acceptance from the responses and from /metrics must agree this closely (relative).
AGREEMENT_TOLERANCE = 0.05
# figure -> (title, larger is better)
WINNER_METRICS: dict[str, tuple[str, bool]] = {
    "decode_per_user_tps": ("per-user decode tok/s", True),
    "ttft_ms_mean": ("mean TTFT (ms)", False),
    "output_tps": ("total output tok/s", True),
    "goodput_req_s": ("goodput (req/s within the SLOs)", True),
}


@dataclass
class LevelFigures:
    label: str
    concurrency: int
    requests: int
    errors: int
    decode_per_user_tps: float | None
    output_tps: float | None
    ttft_ms_mean: float | None
    goodput_req_s: float | None = None
    good_fraction: float | None = None
    acceptance_rate: float | None = None  # from the responses
    acceptance_rate_metrics: float | None = None  # from the /metrics deltas
    acceptance_length: float | None = None  # responses: 1 + accepted / verify steps
    acceptance_length_metrics: float | None = None
    acceptance_rate_per_request: dict[str, Any] | None = None  # a Distribution's dict
    acceptance_length_per_request: dict[str, Any] | None = None
    acceptance_by_category: dict[str, float] = field(default_factory=dict)
    decode_by_category: dict[str, float] = field(default_factory=dict)
    acceptance_by_position: list[float] | None = None  # responses: share of verify steps accepting position i
    acceptance_by_position_metrics: list[float] | None = None
    partial: str | None = None

    @property
    def speculative(self) -> bool:
        return self.acceptance_rate is not None or self.acceptance_rate_metrics is not None

    @property
    def acceptance_agreement(self) -> float | None:
        """|responses - /metrics| / /metrics; None unless both were read."""
        if self.acceptance_rate is None or not self.acceptance_rate_metrics:
            return None
        return abs(self.acceptance_rate - self.acceptance_rate_metrics) / self.acceptance_rate_metrics

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "acceptance_agreement": self.acceptance_agreement}


def _spec_requests(records: Iterable[RequestRecord]) -> list[dict[str, Any]]:
    return [r.spec_decoding for r in records if r.ok and r.spec_decoding and r.spec_decoding.get("num_draft_tokens")]


def _rate(specs: Sequence[dict[str, Any]]) -> float | None:
    drafted = sum(s.get("num_draft_tokens") or 0 for s in specs)
    return None if not drafted else sum(s.get("num_accepted_draft_tokens") or 0 for s in specs) / drafted


def _positions(specs: Sequence[dict[str, Any]]) -> list[float] | None:
    """From each request's histogram (index j = verify steps accepting exactly j drafts):
    position i was accepted in every step that accepted more than i."""
    steps = sum(s.get("num_spec_steps") or 0 for s in specs)
    width = max((len(s.get("acceptance_histogram") or []) for s in specs), default=0) - 1
    if not steps or width < 1:
        return None
    accepted = [0] * width
    for s in specs:
        for j, count in enumerate(s.get("acceptance_histogram") or []):
            for i in range(min(j, width)):
                accepted[i] += count
    return [a / steps for a in accepted]


def level_figures(label: str, result: BenchResult) -> LevelFigures:
    s = result.summary
    good = [r for r in result.records if r.ok]
    specs = _spec_requests(good)
    steps = sum(x.get("num_spec_steps") or 0 for x in specs)
    counters = result.server_counters
    metrics_rate = metrics_length = None
    metrics_positions = None
    if counters is not None and counters.spec_draft_tokens:
        metrics_rate = counters.spec_acceptance_rate
        metrics_length = counters.spec_mean_acceptance_length
        if counters.spec_accepted_per_position and counters.spec_drafts:
            metrics_positions = [a / counters.spec_drafts for a in counters.spec_accepted_per_position]
    by_category: dict[str, list[RequestRecord]] = {}
    for r in good:
        by_category.setdefault(r.category or "uncategorised", []).append(r)
    acceptance_by_category = {}
    decode_by_category = {}
    for category, records in sorted(by_category.items()):
        rate = _rate(_spec_requests(records))
        if rate is not None:
            acceptance_by_category[category] = rate
        decode = Distribution.of((r.decode_tok_s for r in records), "tok/s").mean
        if decode is not None:
            decode_by_category[category] = decode
    return LevelFigures(
        label=label,
        concurrency=result.config.concurrency,
        requests=s.requests,
        errors=s.errors,
        decode_per_user_tps=s.decode_tok_s_per_user.mean,
        output_tps=s.output_tok_s,
        ttft_ms_mean=s.ttft_ms.mean,
        goodput_req_s=None if s.goodput is None else s.goodput.goodput_req_s,
        good_fraction=None if s.goodput is None else s.goodput.good_fraction,
        acceptance_rate=_rate(specs),
        acceptance_rate_metrics=metrics_rate,
        acceptance_length=None if not steps else 1 + sum(x.get("num_accepted_draft_tokens") or 0 for x in specs) / steps,
        acceptance_length_metrics=metrics_length,
        acceptance_rate_per_request=None if not specs else Distribution.of(
            (x.get("draft_acceptance_rate") for x in specs), "fraction").to_dict(),
        acceptance_length_per_request=None if not specs else Distribution.of(
            (x.get("mean_acceptance_length") for x in specs), "tokens/step").to_dict(),
        acceptance_by_category=acceptance_by_category,
        decode_by_category=decode_by_category,
        acceptance_by_position=_positions(specs),
        acceptance_by_position_metrics=metrics_positions,
        partial=result.partial,
    )


@dataclass
class Winner:
    concurrency: int
    metric: str
    label: str
    value: float
    runner_up: str | None
    runner_up_value: float | None

    @property
    def lead(self) -> float | None:
        """How many times better than the runner-up (for TTFT: runner-up / winner)."""
        if self.runner_up_value is None or not self.value or not self.runner_up_value:
            return None
        better_larger = WINNER_METRICS[self.metric][1]
        return self.value / self.runner_up_value if better_larger else self.runner_up_value / self.value

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "lead": self.lead}


def winners(figures: Sequence[LevelFigures]) -> list[Winner]:
    """Per concurrency and figure, the best configuration (levels cut short by an interruption are left out)."""
    out: list[Winner] = []
    for concurrency in sorted({f.concurrency for f in figures}):
        at = [f for f in figures if f.concurrency == concurrency and f.partial is None]
        for metric, (_, larger) in WINNER_METRICS.items():
            scored = [(getattr(f, metric), f.label) for f in at if getattr(f, metric) is not None]
            if not scored:
                continue
            scored.sort(key=lambda vl: vl[0], reverse=larger)
            (value, label), rest = scored[0], scored[1:]
            out.append(Winner(concurrency, metric, label, value, rest[0][1] if rest else None,
                              rest[0][0] if rest else None))
    return out


class CrossoverVerdict(str, enum.Enum):
    """How a speculative configuration fared against the baseline over the levels measured."""

    AHEAD = "ahead"  # ahead at every level
    STOPS_PAYING = "stops_paying"  # ahead at the lowest level, behind from some level on
    NEVER_PAYS = "never_pays"  # behind at every level
    PAYS_LATER = "pays_later"  # behind at the lowest level, ahead at a higher one
    NOT_MEASURED = "not_measured"


@dataclass
class Crossover:
    """A speculative configuration against the baseline, level by level."""

    label: str
    baseline: str
    speedups: list[tuple[int, float]]  # (concurrency, per-user decode tok/s of label / baseline)
    throughput_ratios: list[tuple[int, float]]  # (concurrency, total output tok/s of label / baseline)
    stops_paying_at: int | None  # the first concurrency where its per-user decode falls behind

    @property
    def verdict(self) -> CrossoverVerdict:
        """How the lead went over the levels measured (per-user decode against the baseline)."""
        if not self.speedups:
            return CrossoverVerdict.NOT_MEASURED
        ahead = [r >= 1.0 for _, r in self.speedups]
        if all(ahead):
            return CrossoverVerdict.AHEAD
        if not any(ahead):
            return CrossoverVerdict.NEVER_PAYS
        return CrossoverVerdict.STOPS_PAYING if ahead[0] else CrossoverVerdict.PAYS_LATER

    @property
    def summary(self) -> str:
        if not self.speedups:
            return f"{self.label}: no level measured beside {self.baseline}."
        lead = ", ".join(f"{r:.2f}x at {c}" for c, r in self.speedups)
        levels = f"concurrency {self.speedups[0][0]}" + (
            f" to {self.speedups[-1][0]}" if len(self.speedups) > 1 else "")
        verdict = self.verdict
        if verdict is CrossoverVerdict.NEVER_PAYS:
            return (f"{self.label} never pays at the levels measured ({levels}): per-user decode against "
                    f"{self.baseline} {lead}.")
        if verdict is CrossoverVerdict.PAYS_LATER:
            ahead_from = next(c for c, r in self.speedups if r >= 1.0)
            return (f"{self.label} is behind {self.baseline} at concurrency {self.speedups[0][0]} and ahead from "
                    f"concurrency {ahead_from}: per-user decode {lead}.")
        if self.stops_paying_at is not None:
            return (f"{self.label} stops paying at concurrency {self.stops_paying_at}: per-user decode against "
                    f"{self.baseline} {lead}.")
        (c0, first), (cl, last) = self.speedups[0], self.speedups[-1]
        cmin, least = min(self.speedups, key=lambda cr: cr[1])
        head = f"{self.label} is ahead of {self.baseline} on per-user decode at every level measured ({lead})"
        if least >= first:
            return f"{head}; its lead holds from concurrency {c0} to {cl}."
        again = f", then {last:.2f}x at {cl}" if cmin != cl else ""
        return f"{head}; its lead shrinks from {first:.2f}x at concurrency {c0} to {least:.2f}x at {cmin}{again}."

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "verdict": self.verdict.value, "summary": self.summary}


def crossovers(figures: Sequence[LevelFigures], speculative: Sequence[str], baseline: str | None) -> list[Crossover]:
    """Each configuration in `speculative` against `baseline` (the first one without spec decoding)."""
    if baseline is None:
        return []
    base = {f.concurrency: f for f in figures if f.label == baseline and f.partial is None}
    out = []
    for label in speculative:
        speedups: list[tuple[int, float]] = []
        ratios: list[tuple[int, float]] = []
        for f in sorted((f for f in figures if f.label == label and f.partial is None), key=lambda f: f.concurrency):
            b = base.get(f.concurrency)
            if b is None:
                continue
            if f.decode_per_user_tps and b.decode_per_user_tps:
                speedups.append((f.concurrency, f.decode_per_user_tps / b.decode_per_user_tps))
            if f.output_tps and b.output_tps:
                ratios.append((f.concurrency, f.output_tps / b.output_tps))
        stops = next((c for c, r in speedups if r < 1.0), None)
        out.append(Crossover(label, baseline, speedups, ratios, stops))
    return out

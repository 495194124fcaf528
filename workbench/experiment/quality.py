"""Quality beside speed: what each configuration answered, and how it compares with a reference.

Two figures per configuration, measured on its own server after its sweep (quality_run.py):

    agreement   at temperature 0, its answer to each workload prompt against the reference
                configuration's answer to the same prompt: the share identical, and the mean
                length of the common prefix in tokens (the token ids vLLM returns)
    accuracy    a task with checkable answers, through lm-eval's local-chat-completions model:
                right answers / items, with a 95 % Wilson interval

This module is the data and the judgement, without I/O. The reference is the first
configuration unless QualitySettings.reference names another. A configuration whose
accuracy interval lies wholly below the reference's lost quality (Verdict.LOSS): it is
flagged, and `no_loss_winners` crowns the fastest among those that did not.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, cast

from workbench.errors import InputError
from workbench.experiment.analysis import LevelFigures, Winner, winners

__all__ = ["BUILTIN_TASK", "QUALITY_MODES", "Accuracy", "Agreement", "Answer", "ConfigQuality", "ProblemKind",
           "QualityMode", "QualityProblem", "QualityRow", "QualitySettings", "Verdict", "agreement",
           "no_loss_winners", "quality_rows", "verdict", "wilson_interval"]

QualityMode = Literal["off", "quick", "full"]
QUALITY_MODES: tuple[QualityMode, ...] = ("off", "quick", "full")
BUILTIN_TASK = "workbench_basics"  # shipped in workbench/experiment/quality_tasks
# quick: about a minute per configuration on the CPU engine (SmolLM2-135M on 2 cores answers
# one task item in 1-2 s and decodes about 20 tok/s); full: every prompt and item.
QUICK_AGREEMENT_PROMPTS = 5
QUICK_AGREEMENT_TOKENS = 64
QUICK_ACCURACY_ITEMS = 24
_Z95 = 1.959963984540054


@dataclass
class QualitySettings:
    """The quality pass: its size (`mode`), the lm-eval task, and the reference configuration."""

    mode: QualityMode = "off"
    task: str = BUILTIN_TASK
    reference: str | None = None  # a configuration's label; None: the first configuration
    agreement_prompts: int | None = None  # None: the mode's size (quick 5, full every workload prompt)
    agreement_tokens: int | None = None  # None: quick 64, full the experiment's output tokens
    accuracy_items: int | None = None  # None: quick 24 (4 of each kind), full the whole task
    accuracy_concurrency: int = 4  # the harness's requests in flight

    def __post_init__(self) -> None:
        if self.mode not in QUALITY_MODES:
            raise InputError(f"Quality {self.mode!r} is not one of {', '.join(QUALITY_MODES)}.",
                             hint="off: speed only; quick: a subset (about a minute per configuration on the CPU "
                             "engine); full: every prompt and task item.", settings=("quality",))
        for name in ("agreement_prompts", "agreement_tokens", "accuracy_items", "accuracy_concurrency"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise InputError(f"The quality pass's {name.replace('_', ' ')} must be a whole number of at least 1, "
                                 f"not {value!r}.", hint="Leave it unset for the mode's size.", settings=(name,))
        if not self.task.strip():
            raise InputError("The quality task is empty.", hint=f"Name an lm-eval task, e.g. {BUILTIN_TASK}.",
                             settings=("quality_task",))

    @property
    def on(self) -> bool:
        return self.mode != "off"

    def prompts_for(self, available: int) -> int:
        """How many workload prompts the agreement sends."""
        if self.agreement_prompts is not None:
            return min(self.agreement_prompts, available)
        return min(QUICK_AGREEMENT_PROMPTS, available) if self.mode == "quick" else available

    def tokens_for(self, output_tokens: int) -> int:
        """The most tokens each agreement answer may have."""
        if self.agreement_tokens is not None:
            return self.agreement_tokens
        return min(QUICK_AGREEMENT_TOKENS, output_tokens) if self.mode == "quick" else output_tokens

    def items_limit(self) -> int | None:
        """Task items to ask (lm-eval's limit); None: all."""
        if self.accuracy_items is not None:
            return self.accuracy_items
        return QUICK_ACCURACY_ITEMS if self.mode == "quick" else None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> QualitySettings:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


def wilson_interval(successes: int, n: int, z: float = _Z95) -> tuple[float, float] | None:
    """The Wilson score interval for a proportion (95 % by default); None without trials."""
    if n <= 0:
        return None
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass
class Answer:
    """One answer to an agreement prompt, as the server sent it."""

    text: str
    token_ids: list[int] | None  # None when the server gave no token ids
    finish_reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Answer:
        return cls(str(data.get("text") or ""), data.get("token_ids"), data.get("finish_reason"))


class ProblemKind(str, enum.Enum):
    """Why (part of) a quality pass has no figure."""

    UNKNOWN_TASK = "unknown_task"  # lm-eval has no task by that name
    TASK_DATA_MISSING = "task_data_missing"  # the task's data is not here and cannot be fetched
    TASK_UNSUPPORTED = "task_unsupported"  # not a generation task with right/wrong answers
    HARNESS_MISSING = "harness_missing"  # lm-eval is not installed
    SERVER_REFUSED = "server_refused"  # the server answered the requests with an error
    SERVER_UNREACHABLE = "server_unreachable"  # the server could not be reached
    HARNESS_FAILED = "harness_failed"  # anything else lm-eval raised (its log says what)
    INTERRUPTED = "interrupted"  # stopped by the user


@dataclass
class QualityProblem:
    kind: ProblemKind
    part: Literal["agreement", "accuracy"]
    message: str
    hint: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind.value, "part": self.part, "message": self.message, "hint": self.hint}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> QualityProblem:
        return cls(ProblemKind(data["kind"]), data["part"], str(data["message"]), data.get("hint"))


@dataclass
class Accuracy:
    """Right answers on a task, as lm-eval scored them (one binary metric per item)."""

    task: str
    metric: str  # lm-eval's metric and filter, e.g. "acc" or "exact_match,strict-match"
    correct: int
    n: int
    items_in_task: int | None = None
    by_kind: dict[str, list[int]] = field(default_factory=dict)  # item kind -> [correct, n]
    samples_file: str | None = None  # every item's prompt, answer and score (JSONL), beside the results

    @property
    def value(self) -> float | None:
        return self.correct / self.n if self.n else None

    @property
    def interval(self) -> tuple[float, float] | None:
        return wilson_interval(self.correct, self.n)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "accuracy": self.value, "interval_95": self.interval}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Accuracy:
        return cls(str(data["task"]), str(data["metric"]), int(data["correct"]), int(data["n"]),
                   data.get("items_in_task"), {k: list(v) for k, v in (data.get("by_kind") or {}).items()},
                   data.get("samples_file"))


@dataclass
class ConfigQuality:
    """What one configuration's quality pass measured (and what stopped it)."""

    status: Literal["done", "partial", "failed"] = "done"
    answers: list[Answer] | None = None  # the first agreement prompts of the workload, in order
    answer_tokens: int | None = None  # max_tokens of each agreement answer
    accuracy: Accuracy | None = None
    problems: list[QualityProblem] = field(default_factory=list)
    seconds: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "answers": None if self.answers is None else [a.to_dict() for a in self.answers],
                "answer_tokens": self.answer_tokens,
                "accuracy": None if self.accuracy is None else self.accuracy.to_dict(),
                "problems": [p.to_dict() for p in self.problems], "seconds": self.seconds}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ConfigQuality:
        answers = data.get("answers")
        accuracy = data.get("accuracy")
        return cls(status=data.get("status", "done"),
                   answers=None if answers is None else [Answer.from_dict(a) for a in answers],
                   answer_tokens=data.get("answer_tokens"),
                   accuracy=None if accuracy is None else Accuracy.from_dict(accuracy),
                   problems=[QualityProblem.from_dict(p) for p in data.get("problems") or []],
                   seconds=data.get("seconds"))


def _common_prefix(a: Sequence[Any], b: Sequence[Any]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


@dataclass(frozen=True)
class Agreement:
    """One configuration's answers against the reference's, prompt by prompt."""

    reference: str
    compared: int
    identical: int
    mean_common_prefix: float  # in `unit`
    mean_reference_length: float  # in `unit`
    unit: Literal["tokens", "characters"]
    common_prefix: tuple[int, ...]  # per prompt

    @property
    def identical_share(self) -> float | None:
        return self.identical / self.compared if self.compared else None

    @property
    def interval(self) -> tuple[float, float] | None:
        return wilson_interval(self.identical, self.compared)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "identical_share": self.identical_share, "interval_95": self.interval}


def agreement(answers: Sequence[Answer], reference: Sequence[Answer], reference_label: str) -> Agreement | None:
    """Answers to the same prompts, compared in order; None when there is nothing to compare.
    Token ids when both sides have them, characters otherwise (the unit says which)."""
    pairs = list(zip(answers, reference))
    if not pairs:
        return None
    by_tokens = all(a.token_ids is not None and r.token_ids is not None for a, r in pairs)
    prefixes: list[int] = []
    lengths: list[int] = []
    for a, r in pairs:
        mine = cast("list[int]", a.token_ids) if by_tokens else a.text
        theirs = cast("list[int]", r.token_ids) if by_tokens else r.text
        prefixes.append(_common_prefix(mine, theirs))
        lengths.append(len(theirs))
    identical = sum(1 for a, r in pairs if (a.token_ids == r.token_ids if by_tokens else a.text == r.text))
    return Agreement(reference_label, len(pairs), identical, sum(prefixes) / len(pairs), sum(lengths) / len(pairs),
                     "tokens" if by_tokens else "characters", tuple(prefixes))


class Verdict(str, enum.Enum):
    """A configuration's accuracy against the reference's, judged by their 95 % intervals."""

    REFERENCE = "reference"
    NO_LOSS = "no loss"  # the intervals overlap
    BETTER = "better"  # wholly above the reference's interval
    LOSS = "loss"  # wholly below: faster or not, not crowned
    UNKNOWN = "not measured"  # no accuracy on one side

    @property
    def kept_quality(self) -> bool:
        return self in (Verdict.REFERENCE, Verdict.NO_LOSS, Verdict.BETTER)


def verdict(accuracy: Accuracy | None, reference: Accuracy | None) -> Verdict:
    mine = None if accuracy is None else accuracy.interval
    theirs = None if reference is None else reference.interval
    if mine is None or theirs is None or accuracy is None or reference is None or accuracy.task != reference.task:
        return Verdict.UNKNOWN
    if mine[1] < theirs[0]:
        return Verdict.LOSS
    if mine[0] > theirs[1]:
        return Verdict.BETTER
    return Verdict.NO_LOSS


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.0f} %"


def _interval(bounds: tuple[float, float] | None) -> str:
    return "" if bounds is None else f"{bounds[0] * 100:.0f}-{bounds[1] * 100:.0f} %"


@dataclass(frozen=True)
class QualityRow:
    """One configuration's quality, judged against the reference."""

    label: str
    reference: str
    agreement: Agreement | None
    accuracy: Accuracy | None
    verdict: Verdict
    problems: tuple[QualityProblem, ...] = ()

    @property
    def is_reference(self) -> bool:
        return self.verdict is Verdict.REFERENCE

    def agreement_text(self) -> str:
        if self.is_reference:
            return "reference"
        a = self.agreement
        if a is None:
            return "-"
        return (f"{_pct(a.identical_share)} identical ({a.identical}/{a.compared}); common prefix "
                f"{a.mean_common_prefix:.1f} of {a.mean_reference_length:.1f} {a.unit}")

    def accuracy_text(self) -> str:
        a = self.accuracy
        if a is None or a.value is None:
            return "-"
        return f"{_pct(a.value)} ({_interval(a.interval)}, n={a.n})"

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "reference": self.reference,
                "agreement": None if self.agreement is None else self.agreement.to_dict(),
                "accuracy": None if self.accuracy is None else self.accuracy.to_dict(),
                "verdict": self.verdict.value, "problems": [p.to_dict() for p in self.problems]}

    def summary(self, reference_accuracy: Accuracy | None, speed: str = "") -> str:
        """One sentence: how this configuration's answers compare with the reference's, and
        whether its speed (`speed`, e.g. "per-user decode 1.21x off's at concurrency 1") came with a loss."""
        if self.is_reference:
            return f"{self.label} is the reference: accuracy {self.accuracy_text()}."
        parts = [speed] if speed else []
        if self.agreement is not None:
            parts.append(f"answers {self.agreement_text()} against {self.reference}'s")
        if self.accuracy is not None and self.accuracy.value is not None:
            against = "" if reference_accuracy is None else f" against {_pct(reference_accuracy.value)} " \
                f"({_interval(reference_accuracy.interval)})"
            parts.append(f"accuracy {self.accuracy_text()}{against}")
        its = "at that speed, " if speed else ""
        said = {
            Verdict.LOSS: f"{its}a LOSS of quality: worse than {self.reference} beyond the 95 % intervals (flagged)",
            Verdict.NO_LOSS: f"{its}no loss of quality measured (the accuracy intervals overlap)",
            Verdict.BETTER: f"better than {self.reference} beyond the 95 % intervals",
            Verdict.UNKNOWN: "quality not judged (no accuracy on one side)",
            Verdict.REFERENCE: "",
        }[self.verdict]
        return f"{self.label}: " + "; ".join([*parts, said]) + "."


def _reference_label(labels: Sequence[str], asked: str | None) -> str | None:
    if asked is not None:
        return asked if asked in labels else None
    return labels[0] if labels else None


def quality_rows(measured: Sequence[tuple[str, ConfigQuality | None]], reference: str | None) -> list[QualityRow]:
    """Each configuration with a quality pass, judged against the reference (the first
    configuration, or the one named); empty when no configuration was checked."""
    labels = [label for label, _ in measured]
    ref = _reference_label(labels, reference)
    by_label = dict(measured)
    if ref is None or all(q is None for q in by_label.values()):
        return []
    ref_quality = by_label.get(ref)
    ref_answers = None if ref_quality is None else ref_quality.answers
    ref_accuracy = None if ref_quality is None else ref_quality.accuracy
    rows = []
    for label, quality in measured:
        if quality is None:
            continue
        if label == ref:
            rows.append(QualityRow(label, ref, None, quality.accuracy, Verdict.REFERENCE, tuple(quality.problems)))
            continue
        agreed = None if quality.answers is None or ref_answers is None else agreement(quality.answers, ref_answers, ref)
        rows.append(QualityRow(label, ref, agreed, quality.accuracy, verdict(quality.accuracy, ref_accuracy),
                               tuple(quality.problems)))
    return rows


def no_loss_winners(figures: Sequence[LevelFigures], rows: Sequence[QualityRow]) -> list[Winner]:
    """The winners among the configurations that kept quality (the reference, and those whose
    accuracy did not fall below it beyond the intervals); unchecked configurations are left out."""
    if not any(r.accuracy is not None and r.is_reference for r in rows):
        return []  # nothing to judge against
    kept = {r.label for r in rows if r.verdict.kept_quality}
    return winners([f for f in figures if f.label in kept])

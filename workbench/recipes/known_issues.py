"""Known problems as recipe data: which entries of `workbench.known_issues` a plan meets.

Each entry says what triggers it (`when`: hardware, flags, docker images, vLLM
versions), what the user sees (`symptom`, and `log_pattern` for a failed start),
the change to make and its public `sources`. Matching is pure: it reads the
rendered argv, the hardware and the image, nothing else.

`when` conditions, all of which must hold:

    hardware: [ids or generations]     the plan's hardware id, generation or brand
    flags: {flag: condition}           on the rendered argv (canonical flag spelling):
        true / false                   present / absent
        "regex"                        the value matches in full ("" for a switch)
        {other_than: "regex"}          absent, or a value that does not match in full
        {above|below|at_least|at_most: number, default: value}
                                       a number; `default` is vLLM's value when absent
    images: [glob patterns]            the plan's docker image
    vllm: "specifier"                  the version in the image tag (`v0.28.0`); an
                                       image whose tag names none may be affected

An entry that says `certain: true` is no risk but a certain failure wherever its `when`
holds: render refuses the command with the change to make (as SGLang refuses a server
argument it knows will fail), unless the selection names the entry in `ignore_known_issues`.

An entry with `check: <name>` is decided by the memory planner (it needs numbers a
render does not have); render leaves it out, the planner and the diagnosis use it.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from workbench.recipes.argv import canonical_flag, flag_values
from workbench.recipes.catalog import HardwareProfile, Recipe

__all__ = ["NUMERIC_TESTS", "OTHER_THAN", "PLANNER_CHECKS", "KnownIssue", "known_issue_entries", "log_known_issue",
           "matching_known_issues"]

NUMERIC_TESTS = ("above", "below", "at_least", "at_most")
OTHER_THAN = "other_than"
# Checks decided outside a render: the memory planner's (workbench.planner), and the
# benchmark's session workloads (workbench.bench.cache_check, from the server's /metrics).
PLANNER_CHECKS = ("mamba_cache_blocks", "session_prefix_cache")
_IMAGE_VERSION_RE = re.compile(r":v?(\d+\.\d+(?:\.\d+)?)(?:$|[^\w.])")


@dataclass(frozen=True)
class KnownIssue:
    """One known problem, as the recipe records it; `matched` says why it applies to a plan."""

    id: str
    title: str
    symptom: str
    change: str
    sources: list[str]
    log_pattern: str | None = None
    reported: str = ""
    check: str | None = None
    matched: str = ""
    certain: bool = False  # the plan cannot start: render refuses it unless told to ignore this entry

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "KnownIssue":
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    def line(self) -> str:
        """One line for a CLI or a status box: the problem, the change, the first source."""
        source = f" ({self.sources[0]})" if self.sources else ""
        return f"{self.title}: {self.change}{source}"


def _entry(raw: Mapping[str, Any], matched: str = "") -> KnownIssue:
    return KnownIssue(
        id=str(raw["id"]),
        title=str(raw["title"]),
        symptom=str(raw.get("symptom", "")),
        change=str(raw["change"]),
        sources=[str(s) for s in raw.get("sources") or []],
        log_pattern=raw.get("log_pattern"),
        reported=str(raw.get("reported", "")),
        check=raw.get("check"),
        matched=matched,
        certain=bool(raw.get("certain", False)),
    )


def known_issue_entries(recipe: Recipe) -> list[KnownIssue]:
    """Every entry of the recipe, matched or not (for the diagnosis and the planner)."""
    return [_entry(raw) for raw in recipe.workbench.get("known_issues") or []]


def _hardware_ok(wanted: Sequence[str], hw: HardwareProfile) -> bool:
    return bool({hw.id, hw.generation, hw.brand.lower()} & set(wanted))


def _number(text: Any) -> float | None:
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def _flag_ok(flags: Mapping[str, str | None], flag: str, cond: Any) -> bool:
    present = flag in flags
    if isinstance(cond, bool):
        return present is cond
    value = flags.get(flag)
    if isinstance(cond, str):
        return present and re.fullmatch(cond, value or "") is not None
    if isinstance(cond, Mapping) and OTHER_THAN in cond:
        return not present or re.fullmatch(str(cond[OTHER_THAN]), value or "") is None
    if isinstance(cond, Mapping):
        number = _number(value) if present else _number(cond.get("default"))
        if number is None:
            return False
        limits = {k: float(cond[k]) for k in NUMERIC_TESTS if k in cond}
        return (number > limits.get("above", float("-inf")) and number < limits.get("below", float("inf"))
                and number >= limits.get("at_least", float("-inf")) and number <= limits.get("at_most", float("inf")))
    return False


def _describe_flag(flag: str, cond: Any, flags: Mapping[str, str | None]) -> str:
    if cond is False:
        return f"no {flag}"
    value = flags.get(flag)
    if isinstance(cond, Mapping) and OTHER_THAN in cond:
        shown = re.sub(r"^\(\?\w+\)", "", str(cond[OTHER_THAN]))  # the regex's inline flags say nothing to a reader
        return f"{flag} {value}" if flag in flags and value else f"no {flag} {shown}"
    if flag not in flags:
        return f"{flag} at vLLM's default {cond.get('default')}" if isinstance(cond, Mapping) else flag
    return f"{flag} {value}" if value else flag


def _image_version(image: str) -> Version | None:
    m = _IMAGE_VERSION_RE.search(image)
    if not m:
        return None
    try:
        return Version(m.group(1))
    except InvalidVersion:
        return None


def _versions_ok(spec: str, image: str) -> tuple[bool, str]:
    version = _image_version(image)
    if version is None:
        return True, f"image {image} names no version (affected: vLLM {spec})"
    try:
        return version in SpecifierSet(spec), f"vLLM {version}"
    except InvalidSpecifier:
        return False, ""


def _why(raw_when: Mapping[str, Any], hw: HardwareProfile, flags: Mapping[str, str | None],
         image: str) -> str | None:
    """What of the plan meets the entry's `when`, or None when something does not."""
    parts: list[str] = []
    if "hardware" in raw_when:
        if not _hardware_ok(raw_when["hardware"], hw):
            return None
        parts.append(f"on {hw.display_name}")
    for flag, cond in (raw_when.get("flags") or {}).items():
        name = canonical_flag(flag)
        if not _flag_ok(flags, name, cond):
            return None
        parts.append(_describe_flag(name, cond, flags))
    if "images" in raw_when:
        if not any(fnmatch.fnmatchcase(image, pattern) for pattern in raw_when["images"]):
            return None
        parts.append(f"image {image}")
    if "vllm" in raw_when:
        ok, said = _versions_ok(str(raw_when["vllm"]), image)
        if not ok:
            return None
        parts.append(said)
    return ", ".join(parts) or "always"


def matching_known_issues(recipe: Recipe, hw: HardwareProfile, argv: Sequence[str],
                          docker_image: str, check: str | None = None) -> list[KnownIssue]:
    """The recipe's entries whose `when` the rendered plan meets. Entries with a planner
    `check` are left out, unless `check` names it (the planner asks for its own)."""
    flags = flag_values(argv)
    out = []
    for raw in recipe.workbench.get("known_issues") or []:
        if raw.get("check") != check:
            continue
        why = _why(raw.get("when") or {}, hw, flags, docker_image)
        if why is not None:
            out.append(_entry(raw, why))
    return out


def log_known_issue(issues: Iterable[KnownIssue], log_text: str) -> tuple[KnownIssue, str] | None:
    """The first entry whose `log_pattern` occurs in the log, with the log line it matched."""
    for issue in issues:
        if not issue.log_pattern:
            continue
        m = re.search(issue.log_pattern, log_text, re.MULTILINE)
        if m:
            start = log_text.rfind("\n", 0, m.start()) + 1
            end = log_text.find("\n", m.end())
            return issue, log_text[start: end if end != -1 else None].strip()
    return None


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

An entry whose change is mechanical says it as data, `fix`, which render applies on
request (`Selection.apply_fixes`) as the command's last layer, "known problem <id>":

    fix:
      set: {flag: value}                 the flag's value (true: a switch); replaces the
                                         flag, or its --no- pair, where it stands
      drop: [flags]                      removed from the command
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

from workbench.recipes.argv import Unit, canonical_flag, flag_values
from workbench.recipes.catalog import HardwareProfile, Recipe

__all__ = ["ALL_FIXES", "NUMERIC_TESTS", "OTHER_THAN", "PLANNER_CHECKS", "AppliedFix", "FlagChange", "KnownIssue",
           "apply_fix", "fix_layer", "known_issue_entries", "log_known_issue", "matching_known_issues"]

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
    fix: Mapping[str, Any] | None = None  # the change as data (`set`, `drop`), when it is mechanical

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "KnownIssue":
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    def fix_summary(self) -> str:
        """The mechanical change in a few words ("--kv-cache-dtype bfloat16"), or "" when there is none."""
        if not self.fix:
            return ""
        words = [flag if value is True else f"{flag} {value}" for flag, value in (self.fix.get("set") or {}).items()]
        words += [f"without {flag}" for flag in self.fix.get("drop") or []]
        return ", ".join(words)

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
        fix=raw.get("fix"),
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



# `Selection.apply_fixes` may name this instead of ids: every fix the command meets.
ALL_FIXES = "all"


def fix_layer(issue_id: str) -> str:
    """The provenance layer of a flag a known problem's fix set."""
    return f"known problem {issue_id}"


@dataclass(frozen=True)
class FlagChange:
    """One flag a fix changed: its tokens before and after (None: absent)."""

    flag: str
    before: str | None
    after: str | None

    def describe(self) -> str:
        if self.before is None:
            return f"added {self.after}"
        if self.after is None:
            return f"removed {self.before}"
        return f"{self.before} -> {self.after}"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class AppliedFix:
    """A known problem's change applied to a command: which problem, and each flag it changed."""

    id: str
    title: str
    changes: tuple[FlagChange, ...]

    def describe(self) -> str:
        return "; ".join(c.describe() for c in self.changes) or "nothing to change"

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "title": self.title, "changes": [c.to_dict() for c in self.changes]}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "AppliedFix":
        return cls(str(d["id"]), str(d.get("title", "")), tuple(FlagChange(**c) for c in d.get("changes") or []))


def _switch_pair(name: str) -> str:
    return "--" + name[5:] if name.startswith("--no-") else "--no-" + name[2:]


def apply_fix(kept: list[Unit], fix: Mapping[str, Any], layer: str) -> tuple[list[Unit], list[FlagChange]]:
    """`kept` (a de-duplicated command's units) with the fix's `set` and `drop` applied. A set
    flag takes the place of the flag it replaces (or of its --no- pair), so the rest of the
    command stays as it was; one the command lacks is appended."""
    out = list(kept)
    changes: list[FlagChange] = []

    def spelled(u: Unit) -> str:
        return " ".join(u.tokens())

    for flag, value in (fix.get("set") or {}).items():
        new = Unit(flag, None if value is True else str(value), layer)
        names = {canonical_flag(flag), canonical_flag(_switch_pair(flag))}
        at = next((i for i, u in enumerate(out) if u.name and canonical_flag(u.name) in names), None)
        if at is None:
            out.append(new)
            changes.append(FlagChange(flag, None, spelled(new)))
        elif out[at].tokens() != new.tokens():
            changes.append(FlagChange(flag, spelled(out[at]), spelled(new)))
            out[at] = new
    for flag in fix.get("drop") or []:
        gone = [u for u in out if u.name and canonical_flag(u.name) == canonical_flag(flag)]
        out = [u for u in out if all(u is not g for g in gone)]
        changes += [FlagChange(flag, spelled(u), None) for u in gone]
    return out, changes

"""What the user picked (`Selection`) and what it renders to (`LaunchPlan`).

A LaunchPlan holds argv lists only; its shell strings are for display and copy.
"""

from __future__ import annotations

import dataclasses
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from workbench.errors import InputError
from workbench.recipes.argv import env_word, join_lines, shell_quote, units
from workbench.recipes.catalog import Catalog, Engine
from workbench.recipes.known_issues import AppliedFix, KnownIssue, fix_layer
from workbench.recipes.rehearsal import MachineFacts, Swap

__all__ = ["DEFAULT_PORT", "Fallback", "LaunchPlan", "Selection",
           "provenance_rows", "split_extra_flags"]

DEFAULT_PORT = 8000


@dataclass
class Selection:
    """What the user picked. None means "the recipe's default".

    `extra` holds shell-word strings (each is split like a shell would), so one
    item may carry several flags: ["--max-num-seqs 8 --enforce-eager"].
    """

    recipe: str | None = None
    hardware: str | None = None
    variant: str | None = None
    strategy: str | None = None
    nodes: int | None = None
    features: list[str] | None = None
    spec: str | None = None
    port: int = DEFAULT_PORT
    served_model_name: str | None = None
    max_model_len: int | None = None
    extra: list[str] = field(default_factory=list)
    preset: str | None = None
    head_address: str | None = None  # multi-node: the head's address on the interconnect ($HEAD_IP)
    iface: str | None = None  # multi-node: that interconnect's network interface ($IFACE_NAME)
    # The machine's own hardware id: used when `hardware` is None and the recipe runs on it.
    detected_hardware: str | None = None
    # Serve the recipe's command with its local stand-in checkpoint (workbench.recipes.rehearsal);
    # `machine` says what the serving machine has (None: nothing optional, every flag known).
    rehearsal: bool = False
    machine: MachineFacts | None = None
    # Known problems (ids) whose certain failure should not stop the render.
    ignore_known_issues: list[str] = field(default_factory=list)
    # Known problems whose change (their `fix`) to apply, by id, or ["all"]: the command's last layer.
    apply_fixes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Selection:
        """The selection `to_dict` wrote (unknown keys, from newer or older versions, are left out)."""
        names = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in data.items() if k in names}
        if isinstance(kw.get("machine"), Mapping):
            machine = dict(kw["machine"])
            flags = machine.get("vllm_flags")
            kw["machine"] = MachineFacts(vllm_version=machine.get("vllm_version"),
                                         vllm_flags=None if flags is None else tuple(flags),
                                         packages=tuple(machine.get("packages") or ()))
        return cls(**kw)


def split_extra_flags(extra: Sequence[str]) -> list[str]:
    """The tokens of `Selection.extra`, or an InputError naming the bad text."""
    out: list[str] = []
    for item in extra:
        try:
            out += shlex.split(item)
        except ValueError as exc:
            raise InputError(
                f"The extra flags {item!r} are not valid shell words ({exc}).",
                hint="Close the quote, or remove the stray character.",
            ) from exc
    return out


@dataclass
class Fallback:
    """A choice that could not be honoured here, what was used instead, and why."""

    choice: str
    asked: Any
    used: Any
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class LaunchPlan:
    """Everything needed to start (or show) one deployment. argv lists only."""

    recipe_id: str
    model_id: str
    argv: list[str]
    env: dict[str, str]
    docker_argv: list[str]
    docker_image: str
    install_steps: list[str]
    min_vllm_version: str | None
    notes: list[str]
    fallbacks: list[Fallback]
    provenance: dict[str, str]
    port: int
    served_model_name: str
    engine: Engine
    hardware: str
    selection: dict[str, Any]
    variant: str | None = None
    strategy: str | None = None
    nodes: int = 1
    features: list[str] = field(default_factory=list)
    spec_mode: str | None = None
    preset: str | None = None
    local_build: str | None = None
    deploy_type: str = "single_node"
    tensor_parallel_size: int | None = None
    worker_argvs: list[list[str]] = field(default_factory=list)
    worker_docker_argvs: list[list[str]] = field(default_factory=list)
    config_files: dict[str, str] = field(default_factory=dict)
    known_issues: list[KnownIssue] = field(default_factory=list)
    rehearsal_swaps: list[Swap] = field(default_factory=list)
    applied_fixes: list[AppliedFix] = field(default_factory=list)  # known problems' changes made to argv

    @property
    def rehearsal(self) -> bool:
        return bool(self.selection.get("rehearsal"))

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["fallbacks"] = [f.to_dict() for f in self.fallbacks]
        d["known_issues"] = [k.to_dict() for k in self.known_issues]
        d["applied_fixes"] = [a.to_dict() for a in self.applied_fixes]
        d["shell_command"] = self.shell_command(multiline=False)
        d["docker_command"] = self.docker_command(multiline=False)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "LaunchPlan":
        names = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in d.items() if k in names}
        kw["fallbacks"] = [Fallback(**f) for f in kw.get("fallbacks", [])]
        kw["known_issues"] = [KnownIssue.from_dict(k) for k in kw.get("known_issues", [])]
        kw["rehearsal_swaps"] = [Swap(**s) for s in kw.get("rehearsal_swaps", [])]
        kw["applied_fixes"] = [AppliedFix.from_dict(a) for a in kw.get("applied_fixes", [])]
        return cls(**kw)

    def _argv_for(self, worker: int | None) -> list[str]:
        return self.argv if worker is None else self.worker_argvs[worker]

    @property
    def command_head_length(self) -> int:
        """Tokens before the flags: binary (+ `serve`) and the model."""
        return 3 if self.argv[:2] == ["vllm", "serve"] else 2

    def shell_command(self, multiline: bool = True, *, worker: int | None = None, env: bool = True) -> str:
        """The command as a paste-ready shell string (display only).

        One flag and its value per line with ` \\` continuations; env vars, if
        any, lead the first line as `NAME=value`. `worker` picks a worker
        node's command (index into worker_argvs) of a multi-node plan.
        """
        argv = self._argv_for(worker)
        n_head = self.command_head_length
        prefix = " ".join(env_word(k, v) for k, v in self.env.items()) if env else ""
        first = " ".join(shell_quote(t) for t in argv[:n_head])
        if prefix:
            first = f"{prefix} {first}"
        rest = [u.tokens() for u in units(argv[n_head:])]
        if not rest:
            return first
        return first + (" \\\n  " if multiline else " ") + join_lines(rest, multiline)

    def docker_command(self, multiline: bool = True, *, worker: int | None = None) -> str:
        """The `docker run` equivalent as a shell string, laid out like upstream."""
        dargv = self.docker_argv if worker is None else self.worker_docker_argvs[worker]
        idx = dargv.index(self.docker_image, 2)
        opts, cmd = dargv[2:idx], dargv[idx + 1 :]
        p = opts.index("--privileged")
        lines = [["docker", "run", *opts[:p]], opts[p : p + 4]]
        lines += [u.tokens() for u in units(opts[p + 4 :])]
        n_model = 1 if self.engine == "vllm" else 2  # trtllm: binary + model
        lines.append([self.docker_image, *cmd[:n_model]])
        lines += [u.tokens() for u in units(cmd[n_model:])]
        sep = " \\\n  " if multiline else " "
        return sep.join(" ".join(_docker_word(t, line) for t in line) for line in lines)


def _docker_word(t: str, line: list[str]) -> str:
    if line[0] == "-e" and t != "-e" and "=" in t:
        k, v = t.split("=", 1)
        return env_word(k, v)
    if t.startswith("~/"):
        return t  # the shell expands ~ only when it is left bare
    return shell_quote(t)


def provenance_rows(plan: LaunchPlan, catalog: Catalog) -> list[list[str]]:
    """[flag or env var, value, layer it came from, why] for every flag and env var of a plan."""
    recipe = catalog.recipe(plan.recipe_id)
    env_help = recipe.workbench.get("env") or {}
    rows = [[name, value, "env", env_help.get(name, "")] for name, value in plan.env.items()]
    swapped = {s.flag: s for s in plan.rehearsal_swaps}
    for u in units(plan.argv[plan.command_head_length:]):
        if u.flag is not None:
            why = swapped[u.flag].reason if u.flag in swapped else recipe.flag_help(u.flag) or ""
            rows.append([u.flag, u.value or "", plan.provenance.get(u.flag, ""), why])
    # What a rehearsal took out of the recipe's command, each with its reason.
    rows += [[s.flag, f"{s.was or ''} (removed)".strip(), "rehearsal", s.reason]
             for s in plan.rehearsal_swaps if s.now is None]
    # What a known problem's fix took out: shown too, so the table says what changed.
    for fix in plan.applied_fixes:
        rows += [[c.flag, f"(removed: {c.before})", fix_layer(fix.id), fix.title]
                 for c in fix.changes if c.after is None]
    return rows



"""Why a `vllm serve` failed, and the change that fixes it, read from its log.

`diagnose(log_text, exit_code=...)` tries the rules below in order and returns
the first that matches as a `Diagnosis` (cause, what happened, what to change,
the log line that gave it away). Root causes come before the generic "engine
died" rule because vLLM logs its EngineDeadError *after* the real error. With no
rule matching, the diagnosis says so and carries the last log lines.

The patterns are vLLM 0.32's (and torch's / huggingface_hub's) own messages, as
captured from real failing launches in tests/fixtures/launch-logs/.

A recipe's known issues (`workbench.known_issues`) with a `log_pattern` are matched
too: the diagnosis then names the issue, its change and its source
(`known_issues_for_plan` collects the candidates of a launched plan).
"""

from __future__ import annotations

import logging
import re
import signal
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

from packaging.version import InvalidVersion, Version

from workbench.recipes import load_catalog
from workbench.recipes.known_issues import KnownIssue, known_issue_entries, log_known_issue

__all__ = ["Cause", "Diagnosis", "diagnose", "known_issues_for_plan", "last_lines", "RULES"]

Cause = Literal[
    "out_of_memory",
    "kv_cache_too_small",
    "gpu_memory_taken",
    "address_in_use",
    "model_not_found",
    "model_gated",
    "model_not_cached",
    "hub_unreachable",
    "unrecognized_argument",
    "invalid_argument",
    "invalid_config",
    "missing_dependency",
    "no_gpu",
    "engine_died",
    "killed",
    "known_issue",
    "unknown",
    # a node of a multi-node deployment (workbench.server.node_diagnosis)
    "host_unreachable",
    "head_unreachable",
    "wrong_interface",
    "vllm_version_mismatch",
]

log = logging.getLogger("workbench.server")

TAIL_LINES = 40


@dataclass(frozen=True)
class Diagnosis:
    cause: Cause
    summary: str  # what went wrong, one sentence
    fix: str  # the change to make
    evidence: str = ""  # the log line the rule matched
    exit_code: int | None = None
    log_tail: list[str] = field(default_factory=list)
    known_issue: dict[str, Any] | None = None  # the recipe's known issue the log shows (KnownIssue.to_dict())
    settings: dict[str, Any] = field(default_factory=dict)  # the workbench settings the fix changes (see errors)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Diagnosis:
        return cls(**d)

    def describe(self) -> str:
        """Summary and fix as a short paragraph, for a CLI or a status box."""
        text = f"{self.summary}\nFix: {self.fix}"
        if self.known_issue:
            ki = self.known_issue
            text += f"\nKnown issue: {ki['title']} ({', '.join(ki['sources'])})"
        if self.cause == "unknown" and self.log_tail:
            text += "\nLast log lines:\n" + "\n".join(self.log_tail)
        return text


@dataclass(frozen=True)
class Rule:
    cause: Cause
    pattern: re.Pattern[str]
    summary: Callable[[re.Match[str]], str]
    fix: Callable[[re.Match[str]], str]
    settings: tuple[str, ...] = ()  # the workbench settings the fix changes


MatchText = Callable[[re.Match[str]], str]


def _as_fn(value: str | MatchText) -> MatchText:
    if callable(value):
        return value
    return lambda match: value


def _rule(cause: Cause, pattern: str, summary: str | MatchText, fix: str | MatchText,
          settings: tuple[str, ...] = ()) -> Rule:
    return Rule(cause, re.compile(pattern, re.MULTILINE), _as_fn(summary), _as_fn(fix), settings)


_MEMORY_DOCS = "https://docs.vllm.ai/en/latest/configuration/conserving_memory/"


def _kv_fix(m: re.Match[str]) -> str:
    estimate = m.group("estimate")
    lower = f"--max-model-len {estimate} or less" if estimate else "a smaller --max-model-len"
    return (
        f"Use {lower}, or give the KV cache more memory: a higher --gpu-memory-utilization "
        f"on a GPU, a larger VLLM_CPU_KVCACHE_SPACE (GiB) on the CPU engine."
    )


RULES: tuple[Rule, ...] = (
    _rule(
        "unrecognized_argument",
        r"error: unrecognized arguments: (?P<args>.+)$",
        lambda m: f"vllm serve does not know the argument(s) {m.group('args').strip()}.",
        lambda m: f"Remove or correct {m.group('args').split()[0]}: `vllm serve --help=all` lists "
        "every flag of the installed vLLM (flags differ between versions).",
    ),
    _rule(
        "invalid_argument",
        r"error: argument (?P<flag>--?[\w-]+)(?:/[^:]*)?: (?P<why>.+)$",
        lambda m: f"vllm serve rejected the value of {m.group('flag')}: {m.group('why').strip()}.",
        lambda m: f"Change {m.group('flag')} to one of the values vLLM lists"
        if "choose from" in m.group("why")
        else f"Change the value given to {m.group('flag')}.",
    ),
    _rule(
        "gpu_memory_taken",
        r"Free memory on device (?:(?P<device>[^\s(]+) )?\((?P<free>[\d.]+)/(?P<total>[\d.]+) GiB\) on startup is less "
        r"than desired GPU memory utilization \((?P<util>[\d.]+), (?P<want>[\d.]+) GiB\)",
        lambda m: (f"Another process holds the GPU's memory: {m.group('free')} of {m.group('total')} GiB were free"
                   + (f" on {m.group('device')}" if m.group("device") else "")
                   + f", and this server asks for {m.group('want')} GiB (--gpu-memory-utilization "
                   f"{m.group('util')} of the whole GPU)."),
        lambda m: ("Stop the server already on this GPU (`python -m workbench status` lists the ones the workbench "
                   "started; `nvidia-smi` lists every process), or give each server its share: a "
                   f"--gpu-memory-utilization below {float(m.group('free')) / float(m.group('total')):.2f} "
                   "for this one (the fraction is of the whole GPU, not of what is free)."),
        ("extra",),
    ),
    _rule(
        "missing_dependency",
        r"FlashInfer is required for the flashinfer (?P<what>[\w ]+?) backend",
        lambda m: f"The command asks for FlashInfer's {m.group('what')} kernels, and FlashInfer is not installed here.",
        "Install FlashInfer into vLLM's environment (pip install flashinfer-python; vLLM's images have it), or "
        "leave out --mamba-backend flashinfer for vLLM's Triton kernels (then the fast SSM cache's stochastic "
        "rounding needs an sm_100 Blackwell GPU: on others drop it for the float32 SSM cache).",
        ("extra",),
    ),
    _rule(
        "address_in_use",
        r"\[Errno 98\] (?:error while attempting to bind on address .*: )?[Aa]ddress already in use",
        "The port is already taken by another process, so vLLM could not listen on it.",
        "Stop the process holding the port (the workbench's server list shows those it started) "
        "or choose another port for the server.",
        ("server_port",),
    ),
    _rule(
        "missing_dependency",
        r"The '(?P<pkg>[\w.-]+)' package \((?P<ver>[^)]*)\) is required(?: when (?P<when>[^.]+))?",
        lambda m: f"vLLM needs the '{m.group('pkg')}' package, which is not installed"
        + (f" (because {m.group('when')})." if m.group("when") else "."),
        lambda m: f'Install it in the server\'s environment: pip install "{m.group("pkg")}'
        f'{m.group("ver").replace(" ", "")}"',
    ),
    _rule(
        "missing_dependency",
        r"^(?:ModuleNotFoundError|ImportError): No module named '(?P<pkg>[\w.]+)'",
        lambda m: f"A Python module vLLM imports is missing: {m.group('pkg')}.",
        lambda m: f"Install the package that provides {m.group('pkg').split('.')[0]} in the "
        "server's environment (for a recipe, run its install steps first).",
    ),
    _rule(
        "out_of_memory",
        r"(?:torch\.OutOfMemoryError|torch\.cuda\.OutOfMemoryError|CUDA out of memory|"
        r"CUDA error: out of memory)",
        "The GPU ran out of memory while vLLM was loading or warming up the model.",
        "Lower --gpu-memory-utilization (e.g. 0.85, leaving room for other processes), "
        "then lower --max-model-len; a smaller --max-num-seqs also helps.",
    ),
    _rule(
        "out_of_memory",
        r"Available memory on node (?P<node>\d+) \((?P<free>[\d.]+)/(?P<total>[\d.]+) GiB\) on kv "
        r"cache allocation is less than requested memory",
        lambda m: f"The host ran short of RAM for the CPU engine's KV cache (node {m.group('node')}: "
        f"{m.group('free')} of {m.group('total')} GiB free).",
        "Set VLLM_CPU_KVCACHE_SPACE to a whole number of GiB that fits (1 is plenty for the demo), "
        "leave --gpu-memory-utilization at its default, or free memory used by other processes.",
    ),
    _rule(
        "kv_cache_too_small",
        r"(?:To serve at least one request with the model's max seq len \((?P<len>\d+)\).*?"
        r"larger than the available KV cache memory \((?P<avail>[\d.]+) GiB\)\."
        r"(?: Based on the available memory, the estimated maximum model length is "
        r"(?P<estimate>\d+)\.)?|No available memory for the cache blocks)",
        lambda m: "There is not enough memory left for the KV cache"
        + (f" at --max-model-len {m.group('len')} (only {m.group('avail')} GiB free for it)."
           if m.group("len") else "."),
        _kv_fix,
    ),
    _rule(
        "model_gated",
        r"(?:GatedRepoError|Access to model (?P<repo>\S+) is restricted|401 Client Error)",
        "The model is gated on Hugging Face: downloading it needs an accepted licence and a token.",
        "Accept the model's licence on huggingface.co, then export HF_TOKEN=<your token> "
        "(or run `hf auth login`) before launching.",
    ),
    _rule(
        "model_not_found",
        r"(?:HFValidationError: Repo id must be in the form .*?: '(?P<path>[^']+)'|"
        r"RepositoryNotFoundError|404 Client Error.*huggingface)",
        lambda m: (
            f"The model {m.group('path')!r} is neither a local directory nor a Hugging Face repo id."
            if m.group("path")
            else "The model repo was not found on Hugging Face."
        ),
        lambda m: (
            "Check the path exists (for the CPU demo: python -m workbench demo-model builds it) "
            "or give a Hugging Face repo id like org/name."
            if m.group("path")
            else "Check the model id's spelling (org/name), and that your HF_TOKEN can see it."
        ),
    ),
    _rule(
        "model_not_cached",
        r"LocalEntryNotFoundError: Cannot find an appropriate cached snapshot folder",
        "The model is not in the local Hugging Face cache and downloads are disabled (HF_HUB_OFFLINE=1).",
        "Download it once where there is network (hf download <model id>) into the cache, "
        "or unset HF_HUB_OFFLINE so vLLM can fetch it.",
    ),
    _rule(
        "hub_unreachable",
        r"couldn't connect to 'https://huggingface\.co'",
        "The model is not cached locally and huggingface.co cannot be reached from this machine.",
        "Download the model where there is network (hf download <model id>) and copy the cache "
        "(~/.cache/huggingface) here, or serve a local directory.",
    ),
    _rule(
        "no_gpu",
        r"(?:Failed to infer device type|No CUDA GPUs are available|Found no NVIDIA driver|"
        r"NVIDIA driver on your system is too old|Torch not compiled with CUDA enabled)",
        "This vLLM build needs an NVIDIA GPU, and none is usable here.",
        "Run the command on the GPU machine (copy the rendered command), or serve the CPU demo engine "
        "here: hardware `cpu`.",
    ),
    _rule(
        "invalid_config",
        r"Unknown quantization method: gguf",
        "The model's config.json names a GGUF quantization_config, which vLLM cannot load from "
        "a safetensors directory.",
        "Remove the quantization_config entry from the model's config.json (for the CPU demo, "
        "rebuild the demo model).",
    ),
    _rule(
        "invalid_config",
        r"Value error, (?P<why>.+?)(?: \[type=value_error|$)",
        lambda m: f"vLLM rejected the configuration: {m.group('why').strip()}",
        "Change the flag, model config or environment variable the message names.",
    ),
    _rule(
        "engine_died",
        r"(?:EngineDeadError|engine core exited unexpectedly|Engine core initialization failed)",
        "vLLM's engine process died.",
        "Look for the first error above the EngineDeadError in the log; with none, it was killed "
        "from outside or by the kernel's out-of-memory killer (check `dmesg`), so give it more "
        "host memory or lower --max-model-len / --max-num-seqs.",
    ),
)


def last_lines(text: str, n: int = TAIL_LINES) -> list[str]:
    return text.splitlines()[-n:]


def _signal_name(exit_code: int) -> str | None:
    # Popen reports death by signal N as -N; a shell or docker as 128+N.
    number = -exit_code if exit_code < 0 else exit_code - 128 if 128 < exit_code < 160 else None
    if number is None:
        return None
    try:
        return signal.Signals(number).name
    except ValueError:
        return None


# Causes too general to beat a known issue's own change.
_GENERIC = ("engine_died", "unknown", "killed", "invalid_config")


def known_issues_for_plan(plan: Mapping[str, Any] | None) -> list[KnownIssue]:
    """The known issues a failed launch of `plan` (LaunchPlan.to_dict()) may show: those the
    render matched, then every entry of its recipe with a log pattern (the log decides)."""
    if not plan:
        return []
    issues = [KnownIssue.from_dict(k) for k in plan.get("known_issues") or []]
    try:
        issues += known_issue_entries(load_catalog().recipe(str(plan.get("recipe_id"))))
    except Exception as exc:  # noqa: BLE001 - a broken recipe folder must not hide the diagnosis
        log.warning("known issues of recipe %s not read (%s: %s); diagnosing without them",
                    plan.get("recipe_id"), exc.__class__.__name__, exc)
    return issues


def diagnose(log_text: str, *, exit_code: int | None = None, known_issues: Iterable[KnownIssue] = (),
             installed_vllm: str | None = None, min_vllm: str | None = None) -> Diagnosis:
    """The first rule that matches the log, else "killed" (by a signal) or "unknown";
    named with the first of `known_issues` whose log pattern the log shows. With the
    installed vLLM's version and the plan's minimum, a flag vLLM does not know says whether
    the vLLM is older than the recipe asks."""
    found = _with_version_advice(_diagnose_by_rules(log_text, exit_code), installed_vllm, min_vllm)
    hit = log_known_issue(known_issues, log_text)
    if hit is None:
        return found
    issue, line = hit
    named = {**issue.to_dict(), "evidence": line}
    if found.cause not in _GENERIC:
        return replace(found, known_issue=named)
    return replace(found, cause="known_issue" if found.cause == "unknown" else found.cause,
                   summary=f"{issue.title} (a known issue).", fix=issue.change, evidence=line, known_issue=named)


def _with_version_advice(found: Diagnosis, installed: str | None, wanted: str | None) -> Diagnosis:
    if found.cause != "unrecognized_argument" or not installed:
        return found
    try:
        older = bool(wanted) and Version(installed.split("+")[0]) < Version(str(wanted))
    except InvalidVersion:
        older = False
    if not older:
        return replace(found, fix=f"{found.fix} (This is vLLM {installed}.)")
    return replace(found, summary=f"{found.summary} This is vLLM {installed}; the recipe asks for vLLM >= {wanted}.",
                   fix=f"Upgrade vLLM to {wanted} or later, or remove the flag vLLM {installed} does not know "
                   f"({found.fix})")


def _diagnose_by_rules(log_text: str, exit_code: int | None) -> Diagnosis:
    tail = last_lines(log_text)
    for rule in RULES:
        match = rule.pattern.search(log_text)
        if match:
            line_start = log_text.rfind("\n", 0, match.start()) + 1
            line_end = log_text.find("\n", match.end())
            evidence = log_text[line_start : line_end if line_end != -1 else None].strip()
            return Diagnosis(rule.cause, rule.summary(match), rule.fix(match), evidence, exit_code, tail,
                             settings=dict.fromkeys(rule.settings))
    signal_name = _signal_name(exit_code) if exit_code is not None else None
    if signal_name:
        return Diagnosis(
            "killed",
            f"vllm serve was killed by {signal_name} with nothing in its log to say why.",
            "Something outside the workbench ended it (another user, a job scheduler, or the "
            "kernel's out-of-memory killer: check `dmesg`). Launch it again; if memory is short, "
            "lower --max-model-len or --max-num-seqs.",
            "",
            exit_code,
            tail,
        )
    return Diagnosis(
        "unknown",
        "vllm serve stopped" + (f" with exit code {exit_code}" if exit_code is not None else "")
        + " for a reason the workbench does not recognise.",
        "Read the last log lines below (the first error is usually the cause).",
        "",
        exit_code,
        tail,
    )

"""Where a setting named by a library error lives on the command line.

The library says a setting in words and names it in `WorkbenchError.settings`
("input_tokens", "workers"); this table gives its flag, and `command_line_hint`
the line the CLI prints under the error: the flags to change, or, where the
library knows every value, the whole command again with them changed.
"""

from __future__ import annotations

import argparse
import re
import shlex
from collections.abc import Mapping, Sequence

__all__ = ["FLAG_FOR_SETTING", "FLAG_IN_COMMANDS", "SECRET_FLAGS", "command_line_hint", "flag_for", "flags_of",
           "rewrite_argv"]

# Setting (a BenchConfig field, a serve or workshop option) -> its flag, in every command that has it.
FLAG_FOR_SETTING: dict[str, str] = {
    # bench (BenchConfig's field names)
    "input_tokens": "--isl",
    "output_tokens": "--osl",
    "concurrency": "--concurrency",
    "request_rate": "--request-rate",
    "requests": "--requests",
    "duration_s": "--duration",
    "warmup_requests": "--warmup",
    "workload": "--workload",
    "trace_file": "--trace",
    "sessions": "--sessions",
    "turns": "--turns",
    "turn_input_tokens": "--turn-isl",
    "turn_output_tokens": "--turn-osl",
    "think_time_s": "--think-time",
    "tool_call_tokens": "--tool-call-osl",
    "max_concurrency": "--max-concurrency",
    "slo": "--slo",
    "slo_by": "--slo-by",
    "max_rate": "--max-rate",
    "max_probes": "--max-probes",
    "tokenizer": "--tokenizer",
    "dataset": "--dataset",
    "goodput": "--goodput",
    "output_dir": "--output-dir",
    "spec": "--spec",
    "variant": "--variant",
    "features": "--features",
    "preset": "--preset",
    "resume": "--resume",
    # experiment
    "vary": "--vary",
    "reference": "--reference",
    "quality": "--quality",
    "quality_task": "--quality-task",
    "download": "--download",
    # which server, and how it is launched
    "url": "--url",
    "hardware": "--hardware",
    "mode": "--mode",
    "python": "--python",
    "host": "--host",
    "server_port": "--server-port",
    "extra": "--extra",
    "rehearsal": "--rehearsal",
    "ignore_known_issues": "--ignore-known-issue",
    "model": "--model",
    "context_length": "--context-length",
    "apply_fixes": "--apply-fix",
    # multi-node
    "nodes": "--nodes",
    "strategy": "--strategy",
    "workers": "--workers",
    "head_address": "--head-address",
    "iface": "--iface",
    "worker_vllm": "--worker-vllm",
    # Kubernetes manifests (render --format k8s|lws|helm)
    "k8s_name": "--name",
    "k8s_namespace": "--namespace",
    "replicas": "--replicas",
    # the web apps
    "auth": "--auth",
    "room_code": "--room-code",
    "presenter_auth": "--presenter-auth",
    "trusted_proxy": "--trusted-proxy",
}

# Never typed back out: the hint would copy a password into a terminal's scrollback or a CI log.
SECRET_FLAGS = ("--auth", "--api-key", "--presenter-auth", "--room-code")
# Settings whose flag is spelled alike elsewhere with another meaning: only these commands.
FLAG_IN_COMMANDS: dict[str, dict[str, str]] = {
    "app_port": {"ui": "--port", "workshop": "--port"},  # `serve --port` is the old spelling of --server-port
    # the checkpoint's config.json; `experiment --config` is a configuration
    "config": {"plan": "--config", "render": "--config"},
}
_FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")


def flags_of(parser: argparse.ArgumentParser) -> set[str]:
    """The flags a (sub)command's usage line lists: those a user can type there (not the
    old spellings it hides, not flags its help texts merely mention)."""
    return set(_FLAG.findall(parser.format_usage()))


def flag_for(setting: str, command: str) -> str | None:
    """The flag that sets `setting` in `command`, if the tables know one (the parser may still lack it)."""
    if setting in FLAG_IN_COMMANDS:
        return FLAG_IN_COMMANDS[setting].get(command)
    return FLAG_FOR_SETTING.get(setting)


def rewrite_argv(argv: Sequence[str], changes: Mapping[str, str]) -> list[str]:
    """`argv` with each flag's value replaced (`--flag V` or `--flag=V`), or the flag added."""
    out = list(argv)
    for flag, value in changes.items():
        for i, word in enumerate(out):
            if word == flag and i + 1 < len(out):
                out[i + 1] = value
                break
            if word.startswith(flag + "="):
                out[i] = f"{flag}={value}"
                break
        else:
            out += [flag, value]
    return out


def command_line_hint(settings: Mapping[str, object], parser: argparse.ArgumentParser | None,
                      argv: Sequence[str]) -> str | None:
    """The line under an error naming these settings: their flags in this command (argv[0]),
    or the whole command with them changed when every value is known. None if none applies."""
    if not settings or parser is None or not argv:
        return None
    known = flags_of(parser)
    found = {name: flag_for(name, argv[0]) for name in settings}
    flags = {name: flag for name, flag in found.items() if flag is not None and flag in known}
    if not flags:
        return None
    values = {flags[name]: settings[name] for name in flags}
    secret = any(word.split("=", 1)[0] in SECRET_FLAGS for word in argv)
    if all(value is not None for value in values.values()) and not secret:
        changed = rewrite_argv(argv, {flag: str(value) for flag, value in values.items()})
        return "On the command line: " + shlex.join(["python", "-m", "workbench", *changed])
    return "On the command line: " + ", ".join(
        flag if value is None else f"{flag} {value}" for flag, value in values.items()) + "."

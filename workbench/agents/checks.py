"""`python -m workbench verify`'s checks as a room's day-of checks (EnvironmentCheck): what
attendees' agents depend on, each ok, missing or not applicable (with the reason)."""

from __future__ import annotations

from workbench.agents.verify import ExpectedParsers, verify_endpoint
from workbench.server.checks import CheckStatus, EnvironmentCheck

__all__ = ["agent_endpoint_checks"]


def agent_endpoint_checks(base_url: str, model: str | None = None, *, plan_argv: list[str] | None = None,
                          api_key: str | None = None) -> list[EnvironmentCheck]:
    """The day-of form of `python -m workbench verify`: what attendees' agents depend on
    (reasoning apart from the answer, native tool calls, a multi-step call), each as a check.
    Not applicable is "ok" with its reason: a server without a parser is not broken."""
    expected = ExpectedParsers.from_argv(plan_argv) if plan_argv else None
    report = verify_endpoint(base_url, model=model, api_key=api_key, expected=expected)
    status: dict[str, CheckStatus] = {"pass": "ok", "fail": "missing", "not_applicable": "ok"}
    return [EnvironmentCheck(f"agents: {c.title}", status[c.outcome],
                             ("not applicable: " if c.outcome == "not_applicable" else "") + c.found, c.change)
            for c in report.checks]

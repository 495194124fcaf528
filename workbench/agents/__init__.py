"""Agent-readiness of a served model: the endpoint verifier and agent-harness configurations.

    verify.py     `python -m workbench verify URL`: the checks an agent harness depends on
    sse.py        one streamed chat completion read as raw SSE (the exact field names)
    harnesses.py  `python -m workbench connect --harness NAME`: configs for agent harnesses
"""

from workbench.agents.verify import EndpointCheck, ExpectedParsers, VerifyReport, verify_endpoint

__all__ = ["EndpointCheck", "ExpectedParsers", "VerifyReport", "verify_endpoint"]

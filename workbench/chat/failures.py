"""One place that turns SDK and server failures into a message and a hint."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from workbench.chat.events import ErrorEvent
from workbench.errors import WorkbenchError

__all__ = ["error_event"]


def error_event(exc: Exception, base_url: str) -> ErrorEvent:
    """One place that turns SDK and server failures into a message and a hint."""
    import openai  # 1 s to load: with the first chat, not with every command

    if isinstance(exc, WorkbenchError):
        return ErrorEvent(exc.message, exc.hint)
    if isinstance(exc, openai.APITimeoutError):
        return ErrorEvent(f"The server at {base_url} did not answer in time.",
                          "It may still be loading or overloaded; check its log, then retry.")
    if isinstance(exc, openai.APIConnectionError):
        return ErrorEvent(f"Cannot reach the server at {base_url} ({exc.__cause__ or exc}).",
                          "Is it running? Start it with `python -m workbench serve`, or check the URL.")
    if isinstance(exc, openai.APIStatusError):
        detail = _server_message(exc)
        status = exc.status_code
        hint = "Check the request options; the server's log has details."
        lowered = detail.lower()
        if "thinking_token_budget" in lowered or "reasoning_config" in lowered:
            hint = ("This server has no reasoning parser, so it cannot enforce a reasoning "
                    "budget. Set reasoning_budget_mode='client', or restart it with --reasoning-parser.")
        elif "tool" in lowered and ("enable-auto-tool-choice" in lowered or "tool-call-parser" in lowered):
            hint = ("This server was started without tool calling. Turn tools off, or restart "
                    "it with --enable-auto-tool-choice --tool-call-parser <parser>.")
        elif status == 404:
            hint = "The model name may be wrong: GET /v1/models lists what the server serves."
        elif status == 401:
            hint = "The server wants an API key: pass --api-key (or set it in the options)."
        elif "maximum context length" in lowered or "max_tokens" in lowered:
            hint = "Lower max_tokens, or start a new conversation to shorten the prompt."
        return ErrorEvent(f"The server refused the request ({status}): {detail}", hint, status)
    return ErrorEvent(f"The turn failed: {type(exc).__name__}: {exc}",
                      "The conversation so far is kept; retry, or check the server's log.")


def _server_message(exc: Any) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, Mapping):
        error = body.get("error", body)
        if isinstance(error, Mapping) and error.get("message"):
            return str(error["message"])
        if body.get("message"):
            return str(body["message"])
    return str(getattr(exc, "message", exc))

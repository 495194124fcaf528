"""The Chat tab's rendering of a TurnTranscript: chatbot messages and side-panel text.

An assistant turn becomes, in order: a collapsible "Thinking" block per run of
reasoning (pending while it streams, then done with its duration), one block per
tool call (name, arguments, result, pending -> done, time) and the answer;
notices and errors as plain messages the user must see.
"""

from __future__ import annotations

import json
from typing import Any

from workbench.chat import TurnTranscript, server_stats_rows, stats_rows
from workbench.chat.transcript import Answer, ErrorPart, NoticePart, Part, Thinking, ToolCallPart

__all__ = ["error_message", "stats_markdown", "tools_text", "turn_messages"]

_TOOL_LOG = {"pending": "calling…", "awaiting_approval": "waiting for your approval", "running": "running…",
             "done": "done", "error": "error", "not_run": "not run"}


def _json(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, indent=2, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(value)


def _block(title: str, content: str, **metadata: Any) -> dict:
    return {"role": "assistant", "content": content, "metadata": {"title": title, **metadata}}


def error_message(message: str, hint: str | None) -> dict:
    return {"role": "assistant", "content": f"⚠ **Error:** {message}" + (f"\n\n{hint}" if hint else "")}


def _part_message(part: Part) -> dict:
    if isinstance(part, Thinking):
        meta: dict[str, Any] = {"status": "pending" if part.open else "done"}
        if part.duration_s is not None:
            meta["duration"] = part.duration_s
        return _block("Thinking", part.text, **meta)
    if isinstance(part, ToolCallPart):
        content = ""
        if part.status != "pending":
            content = "**Arguments**\n```json\n" + _json(part.arguments) + "\n```"
            if part.parse_error:
                content += f"\n⚠ arguments did not parse: {part.parse_error}"
        if part.source:
            content += f"\n**MCP server** `{part.source}`" + (f" · {part.approval}" if part.approval else "")
        if part.status == "awaiting_approval":
            content += "\n**Waiting for your approval**: Approve once, Always for this tool, or Deny."
        if part.status in ("done", "error"):
            outcome = f"⚠ error: {part.error}" if part.error else _json(part.result)
            content += "\n**Result**\n```\n" + outcome + "\n```"
        meta = {"status": "pending" if part.status in ("pending", "running", "awaiting_approval") else "done",
                "id": f"tool-{part.step}-{part.index}", "log": _TOOL_LOG[part.status]}
        if part.seconds is not None:
            meta["duration"] = round(part.seconds, 3)
        return _block(f"Tool call · {part.name}", content, **meta)
    if isinstance(part, Answer):
        return {"role": "assistant", "content": part.text}
    if isinstance(part, NoticePart):
        return {"role": "assistant", "content": f"**Note:** {part.message}" + (f" {part.hint}" if part.hint else "")}
    assert isinstance(part, ErrorPart)
    return error_message(part.message, part.hint)


def turn_messages(transcript: TurnTranscript) -> list[dict]:
    """The user's message and the assistant's parts, as chatbot messages."""
    return [{"role": "user", "content": transcript.user_text}, *(_part_message(p) for p in transcript.parts)]


def tools_text(transcript: TurnTranscript) -> str:
    trace = transcript.tool_trace()
    return _json(trace) if trace else ""


def stats_markdown(transcript: TurnTranscript) -> str:
    if transcript.finished is None:
        return ""
    rows = stats_rows(transcript.finished.finish_reason, transcript.finished.stats)
    # The finish reason closes the list, after what was measured.
    ordered = [*rows[1:], rows[0]]
    client = "**This turn (measured by the client)**\n\n" + "\n".join(f"- {r.label}: **{r.value}**" for r in ordered)
    return client + server_stats_markdown(transcript)


def server_stats_markdown(transcript: TurnTranscript) -> str:
    """The server's own queue / prefill / decode times and spec-decode acceptance, when it sent them."""
    if transcript.finished is None:
        return ""
    rows = server_stats_rows(transcript.finished.stats)
    if not rows:
        return ("\n\n*The server sent no per-request figures (start it with "
                "`--enable-per-request-metrics` to see its queue, prefill and decode times).*")
    return "\n\n**This turn (measured by the server)**\n\n" + "\n".join(f"- {r.label}: **{r.value}**" for r in rows)

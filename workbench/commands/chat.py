"""`python -m workbench chat`: one turn in the terminal, rendered from ChatSession events.

The answer goes to stdout; reasoning (dim), tool calls, notices and stats go to
stderr, so `... chat "question" > answer.txt` keeps only the answer.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TextIO

from workbench.errors import WorkbenchError

DIM, RESET = "\x1b[2m", "\x1b[0m"


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "chat",
        help="send one message to a vLLM server and stream the answer",
        description="Send MESSAGE to a vLLM server's chat API and stream the answer to stdout "
        "(reasoning, tool calls and stats go to stderr).",
    )
    parser.add_argument("message", help="what to say; '-' reads it from stdin")
    parser.add_argument("--url", help="server root, e.g. http://127.0.0.1:8000 "
                        "(default: the server `python -m workbench serve` started)")
    parser.add_argument("--model", help="served model name (default: the server's first model)")
    parser.add_argument("--api-key", help="API key, if the server was started with --api-key")
    parser.add_argument("--no-reasoning", action="store_true",
                        help="turn reasoning off (chat_template_kwargs.enable_thinking=false)")
    parser.add_argument("--system", help="system prompt")
    parser.add_argument("--max-tokens", type=int, default=4096, help="default: %(default)s")
    parser.add_argument("--temperature", type=float, default=1.0, help="default: %(default)s")
    parser.add_argument("--top-p", type=float, default=0.95, help="default: %(default)s")
    parser.add_argument("--reasoning-budget", type=int,
                        help="cap reasoning at this many tokens (vLLM's thinking_token_budget)")
    parser.add_argument("--client-budget", action="store_true",
                        help="enforce --reasoning-budget on the client (the model card's fallback "
                        "for servers without a reasoning parser)")
    parser.add_argument("--tools", action="store_true",
                        help="offer the built-in tools (calculator, date/time, units, tip, recipes)")
    parser.add_argument("--max-tool-steps", type=int, default=5, help="default: %(default)s")
    parser.add_argument("--json", action="store_true",
                        help="print every event as one JSON line on stdout instead")
    parser.set_defaults(func=chat_command)


def resolve_url(url: str | None) -> str:
    """--url, or the server the workbench's launcher started."""
    if url:
        return url
    try:
        from workbench.launcher import find_running  # another area's module; may be absent
    except ImportError:
        find_running = None
    server = find_running() if find_running else None
    if server is None:
        raise WorkbenchError(
            "No server URL given and no server started by the workbench is running.",
            hint="Pass --url http://127.0.0.1:8000, or start one with `python -m workbench serve`.",
        )
    return getattr(server, "base_url", server)


def chat_command(args: argparse.Namespace) -> int:
    from workbench.chat import ChatOptions, ChatSession
    from workbench.tools import builtin_tools

    message = sys.stdin.read() if args.message == "-" else args.message
    options = ChatOptions(
        model=args.model,
        temperature=args.temperature,
        top_p=args.top_p,
        max_tokens=args.max_tokens,
        reasoning=not args.no_reasoning,
        reasoning_budget=args.reasoning_budget,
        reasoning_budget_mode="client" if args.client_budget else "server",
        system_prompt=args.system,
        max_tool_steps=args.max_tool_steps,
    )
    session = ChatSession(
        resolve_url(args.url),
        options=options,
        tools=builtin_tools() if args.tools else None,
        api_key=args.api_key,
    )
    if args.json:
        ok = True
        for event in session.stream(message):
            print(json.dumps(event.to_dict(), default=str), flush=True)
            ok = ok and event.kind != "error"
        return 0 if ok else 1
    return render_events(session.stream(message), sys.stdout, sys.stderr)


def render_events(events, out: TextIO, err: TextIO) -> int:
    """Print a turn's events; returns the exit code (1 if the turn failed)."""
    color = err.isatty()
    dim, reset = (DIM, RESET) if color else ("", "")
    in_reasoning = False
    code = 0
    for event in events:
        if event.kind == "reasoning":
            if not in_reasoning:
                err.write(f"{dim}[reasoning] ")
                in_reasoning = True
            err.write(event.text)
            err.flush()
            continue
        if in_reasoning:
            err.write(f"{reset}\n")
            in_reasoning = False
        if event.kind == "content":
            out.write(event.text)
            out.flush()
        elif event.kind == "tool_call_complete":
            args = (json.dumps(event.arguments) if event.arguments is not None
                    else f"{event.raw_arguments!r} (not JSON: {event.parse_error})")
            err.write(f"[tool call] {event.name}({args})\n")
        elif event.kind == "tool_result":
            shown = f"error: {event.error}" if event.error else event.content
            err.write(f"[tool result] {event.name} -> {shown} ({event.seconds:.2f} s)\n")
        elif event.kind == "notice":
            err.write(f"[{event.code}] {event.message}\n")
            if event.hint:
                err.write(f"  {event.hint}\n")
        elif event.kind == "error":
            err.write(f"error: {event.message}\n")
            if event.hint:
                err.write(f"{event.hint}\n")
            code = 1
        elif event.kind == "turn_finished":
            out.write("\n")
            s = event.stats
            parts = [f"finish={event.finish_reason}"]
            if s.ttft_s is not None:
                parts.append(f"ttft={s.ttft_s:.2f}s")
            if s.decode_tokens_per_s is not None:
                parts.append(f"decode={s.decode_tokens_per_s:.1f} tok/s")
            parts.append(f"prompt={s.prompt_tokens} completion={s.completion_tokens}")
            if s.reasoning_tokens:
                parts.append(f"reasoning={s.reasoning_tokens} tok/{s.reasoning_s:.2f}s")
            if s.tool_calls:
                parts.append(f"tools={s.tool_calls} in {s.tool_s:.2f}s")
            err.write(f"{dim}[stats] {' '.join(parts)}{reset}\n")
    if in_reasoning:
        err.write(f"{reset}\n")
    return code

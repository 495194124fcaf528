"""`python -m workbench chat`: one turn in the terminal, rendered from ChatSession events.

The answer goes to stdout; reasoning (dim), tool calls, notices and stats go to
stderr, so `... chat "question" > answer.txt` keeps only the answer.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Iterator
from typing import TextIO

from workbench.chat import ChatEvent, ChatOptions, ChatSession, RequestHook, TurnTranscript, server_stats_rows, stats_rows
from workbench.chat.approval import APPROVAL_POLICIES, ApprovalPolicy, ToolApprovals, check_policy
from workbench.chat.events import ToolApprovalRequested
from workbench.chat.tools import McpConnections, ToolRegistry, builtin_tools
from workbench.errors import InputError
from workbench.chat.transcript import Answer, ErrorPart, NoticePart, Thinking, ToolCallPart
from workbench.server import resolve_server_url

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
    parser.add_argument("--mcp", action="append", default=[], metavar="COMMAND_OR_URL",
                        help='offer an MCP server\'s tools: a command that speaks MCP on stdio '
                        '("python my_server.py") or a Streamable HTTP URL (http://127.0.0.1:8000/mcp); repeatable')
    parser.add_argument("--approve", choices=APPROVAL_POLICIES, default="ask",
                        help="MCP tool calls: ask on the terminal before each (default; denied when "
                        "stdin is not a terminal), always run, or never run")
    parser.add_argument("--approve-tool", action="append", default=[], metavar="TOOL=POLICY",
                        help="a policy for one MCP tool (ask, always or never), over --approve; repeatable")
    parser.add_argument("--json", action="store_true",
                        help="print every event as one JSON line on stdout instead")
    parser.set_defaults(func=chat_command)


def chat_command(args: argparse.Namespace, request_hook: RequestHook | None = None) -> int:
    """`request_hook`: see ChatSession (tests force the forcing model's steps with it)."""
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
    approvals = ToolApprovals(args.approve, _tool_policies(args.approve_tool))
    url = resolve_server_url(args.url)
    connections = McpConnections()
    try:
        tools = builtin_tools() if args.tools else None
        if args.mcp:
            tools = tools or ToolRegistry()
            for server in args.mcp:
                connections.add(server, tools)
        session = ChatSession(url, options=options, tools=tools, api_key=args.api_key, approvals=approvals,
                              request_hook=request_hook)
        events = approving(session.stream(message), approvals, sys.stdin, sys.stderr)
        if args.json:
            ok = True
            for event in events:
                print(json.dumps(event.to_dict(), default=str), flush=True)
                ok = ok and event.kind != "error"
            return 0 if ok else 1
        return render_events(events, sys.stdout, sys.stderr)
    finally:
        connections.close()


def _tool_policies(items: list[str]) -> dict[str, ApprovalPolicy]:
    policies = {}
    for item in items:
        name, sep, policy = item.partition("=")
        if not sep or not name.strip():
            raise InputError(f"--approve-tool {item[:100]!r} is not TOOL=POLICY.",
                             hint="For example --approve-tool add=always (policies: ask, always, never).")
        policies[name.strip()] = check_policy(policy.strip(), f"policy for {name.strip()[:60]!r}")
    return policies


def approving(events: Iterable[ChatEvent], approvals: ToolApprovals, answers: TextIO, err: TextIO) -> Iterator[ChatEvent]:
    """Pass the events on; each MCP call waiting for approval is asked about on the terminal
    (or denied, with the flag to change that, when there is no terminal to ask on)."""
    for event in events:
        yield event
        if isinstance(event, ToolApprovalRequested):
            approvals.answer(event.call_id, _ask(event, answers, err))


def _ask(event: ToolApprovalRequested, answers: TextIO, err: TextIO) -> str:
    call = f"{event.name}({json.dumps(event.arguments)}) on MCP server {event.source}"
    if not answers.isatty():
        err.write(f"[approval] {call}: denied, stdin is not a terminal to ask on "
                  f"(pass --approve always or --approve-tool {event.name}=always to allow it)\n")
        return "deny"
    while True:
        err.write(f"[approval] Run {call}? [y]es once, [a]lways for {event.name}, [n]o: ")
        err.flush()
        reply = answers.readline().strip().lower()
        if reply in ("y", "yes"):
            return "once"
        if reply in ("a", "always"):
            return "always"
        if reply in ("n", "no", ""):
            return "deny"


def render_events(events: Iterable[ChatEvent], out: TextIO, err: TextIO) -> int:
    """Print a turn as it streams, from the shared transcript; returns the exit code (1 if it failed)."""
    color = err.isatty()
    dim, reset = (DIM, RESET) if color else ("", "")
    transcript = TurnTranscript()
    shown: dict[int, int] = {}  # part index -> characters of its text already printed
    announced: set[int] = set()  # tool calls and results already printed
    in_reasoning = False
    for event in events:
        transcript.apply(event)
        for index, part in enumerate(transcript.parts):
            if isinstance(part, Thinking):
                new = part.text[shown.get(index, 0):]
                if new:
                    if index not in shown:
                        err.write(f"{dim}[reasoning] ")
                        in_reasoning = True
                    err.write(new)
                    err.flush()
                    shown[index] = len(part.text)
                continue
            if in_reasoning:
                err.write(f"{reset}\n")
                in_reasoning = False
            if isinstance(part, Answer):
                new = part.text[shown.get(index, 0):]
                if new:
                    out.write(new)
                    out.flush()
                    shown[index] = len(part.text)
            elif isinstance(part, ToolCallPart):
                _print_tool(part, index, announced, err)
            elif isinstance(part, (NoticePart, ErrorPart)) and index not in announced:
                announced.add(index)
                if isinstance(part, NoticePart):
                    err.write(f"[{part.code}] {part.message}\n")
                    if part.hint:
                        err.write(f"  {part.hint}\n")
                else:
                    err.write(f"error: {part.message}\n")
                    if part.hint:
                        err.write(f"{part.hint}\n")
    if in_reasoning:
        err.write(f"{reset}\n")
    if transcript.finished is not None:
        out.write("\n")
        rows = stats_rows(transcript.finished.finish_reason, transcript.finished.stats)
        rows += server_stats_rows(transcript.finished.stats)
        err.write(f"{dim}[stats] " + " ".join(f"{r.key}={r.value}" for r in rows) + f"{reset}\n")
    return 1 if transcript.error() else 0


def _print_tool(part: ToolCallPart, index: int, announced: set[int], err: TextIO) -> None:
    # The call is printed once its arguments are complete, its result once it ran.
    if part.status != "pending" and index not in announced:
        announced.add(index)
        shown = (json.dumps(part.arguments) if part.parse_error is None
                 else f"{part.arguments_text!r} (not JSON: {part.parse_error})")
        err.write(f"[tool call] {part.name}({shown})\n")
    if part.status in ("done", "error") and -index - 1 not in announced:
        announced.add(-index - 1)
        result = f"error: {part.error}" if part.error else part.content
        approval = f", {part.approval}" if part.approval else ""
        err.write(f"[tool result] {part.name} -> {result} ({(part.seconds or 0.0):.2f} s{approval})\n")

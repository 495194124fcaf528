"""`python -m workbench mcp tools COMMAND_OR_URL`: connect to an MCP server and list its tools."""

from __future__ import annotations

import argparse
import json

from workbench.chat.tools import McpServerSpec, McpToolSource


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "mcp", help="MCP servers as tool sources: list a server's tools",
        description="Connect to an MCP server (a command that speaks MCP on stdio, or the URL of a "
        "Streamable HTTP server) and show what the chat would offer the model.")
    sub = parser.add_subparsers(dest="mcp_command", metavar="SUBCOMMAND", required=True)
    tools = sub.add_parser("tools", help="list a server's tools and their input schemas",
                           description="List an MCP server's tools and their input schemas.")
    tools.add_argument("server", help='a command, e.g. "python my_server.py", or a URL, e.g. http://127.0.0.1:8000/mcp')
    tools.add_argument("--json", action="store_true", help="print the tools as JSON")
    tools.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for the server (default: %(default)s)")
    tools.set_defaults(func=mcp_command)


def mcp_command(args: argparse.Namespace) -> int:
    spec = McpServerSpec.parse(args.server)
    timeout = args.timeout if args.timeout == args.timeout and 0 < args.timeout <= 3600 else 30.0
    with McpToolSource(spec, connect_timeout_s=timeout) as source:
        tools = source.tools
    if args.json:
        print(json.dumps({"server": spec.to_dict(), "tools": [t.to_dict() for t in tools]}, indent=2))
        return 0
    print(f"{spec.label}: {len(tools)} tool(s)")
    for tool in tools:
        print(f"\n{tool.name}: {tool.description}".rstrip())
        print(json.dumps(tool.input_schema, indent=2))
    return 0

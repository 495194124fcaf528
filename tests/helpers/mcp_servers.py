"""MCP servers for the tests, written with the official SDK (`mcp.server.mcpserver.MCPServer`).

    python tests/helpers/mcp_servers.py stdio              the server on stdin/stdout
    python tests/helpers/mcp_servers.py http --port N      Streamable HTTP on 127.0.0.1:N/mcp

Tools: `add` (a sum), `word_count`, `get_weather`, `slow` (sleeps), `die` (the process exits
mid-call) and `garbage` (writes a line that is not JSON-RPC where the answer
should be, stdio only), so the client's failure paths meet a real server.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from mcp.server.mcpserver import MCPServer

server = MCPServer("workbench-test-tools")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def word_count(text: str) -> dict[str, int]:
    """Count the words and characters of a text."""
    return {"words": len(text.split()), "characters": len(text)}


@server.tool()
def get_weather(city: str) -> dict[str, object]:
    """Get weather (the tool the recorded vLLM streams call)."""
    return {"city": city, "forecast": "sunny", "celsius": 21}


@server.tool()
def slow(seconds: float) -> str:
    """Sleep for a number of seconds, then answer."""
    time.sleep(seconds)
    return f"slept {seconds} s"


@server.tool()
def die() -> str:
    """Exit the server process in the middle of the call."""
    os._exit(3)


@server.tool()
def garbage() -> str:
    """Write a line that is not JSON-RPC where the answer should be, then never answer."""
    # The SDK moves the protocol off fd 1 (so a stray print cannot corrupt it); write
    # on the descriptor it moved it to, as a server with a broken framing layer would.
    from mcp.server import stdio as sdk_stdio

    claim = sdk_stdio._claims.get(1)
    wire = claim.private_fd if claim is not None and claim.private_fd is not None else 1
    os.write(wire, b"this is not json-rpc\n")
    time.sleep(60)
    return "unreachable"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("transport", choices=["stdio", "http"])
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    if args.transport == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=args.port)


if __name__ == "__main__":
    sys.exit(main())

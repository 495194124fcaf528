"""An example MCP server, written with the official `mcp` SDK, for the notebooks and the docs:

    python -m workbench.demo.mcp_example                     on stdio (what `chat --mcp` starts)
    python -m workbench.demo.mcp_example --http --port 8931  Streamable HTTP at 127.0.0.1:8931/mcp

Its tools only compute. Copy it as the start of a server of your own.
"""

from __future__ import annotations

import argparse

from mcp.server.mcpserver import MCPServer

server = MCPServer("workbench-example")


@server.tool()
def gpu_hours_cost(hours: float, price_per_hour: float = 2.5) -> dict[str, float]:
    """Cost of renting a GPU for a number of hours, in dollars."""
    return {"hours": hours, "cost": round(hours * price_per_hour, 2)}


@server.tool()
def word_count(text: str) -> dict[str, int]:
    """Count the words and characters of a text."""
    return {"words": len(text.split()), "characters": len(text)}


def main() -> None:
    parser = argparse.ArgumentParser(description="An example MCP server (stdio by default).")
    parser.add_argument("--http", action="store_true", help="serve Streamable HTTP instead of stdio")
    parser.add_argument("--port", type=int, default=8931, help="HTTP port on 127.0.0.1 (default: %(default)s)")
    args = parser.parse_args()
    if args.http:
        server.run("streamable-http", host="127.0.0.1", port=args.port)
    else:
        server.run("stdio")


if __name__ == "__main__":
    main()

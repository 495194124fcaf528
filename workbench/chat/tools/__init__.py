"""Tools a model can call: schemas from Python signatures, a registry that runs them safely, built-ins.

    schema.py      Tool, tool_from_function (signature + docstring -> JSON schema)
    registry.py    ToolRegistry, ToolOutcome (timeouts and errors become results for the model)
    calculator.py  the AST-whitelisted calculator
    builtins.py    date/time, unit conversion, tip calculator, recipe lookup; builtin_tools()
    mcp_source.py  McpServerSpec, McpToolSource: one MCP server's tools through the mcp SDK
    mcp_connections.py  McpConnections: the MCP servers one chat uses, saved with it
"""

from workbench.chat.tools.builtins import (
    BUILTIN_FUNCTIONS,
    builtin_tools,
    calculate_tip,
    convert_units,
    current_datetime,
    recipe_lookup,
)
from workbench.chat.tools.calculator import calculator
from workbench.chat.tools.mcp_connections import McpConnections
from workbench.chat.tools.mcp_source import McpServerSpec, McpToolInfo, McpToolSource
from workbench.chat.tools.registry import DEFAULT_TOOL_TIMEOUT_S, ToolOutcome, ToolRegistry
from workbench.chat.tools.schema import Tool, tool_from_function

__all__ = [
    "BUILTIN_FUNCTIONS",
    "DEFAULT_TOOL_TIMEOUT_S",
    "McpConnections",
    "McpServerSpec",
    "McpToolInfo",
    "McpToolSource",
    "Tool",
    "ToolOutcome",
    "ToolRegistry",
    "builtin_tools",
    "calculate_tip",
    "calculator",
    "convert_units",
    "current_datetime",
    "recipe_lookup",
    "tool_from_function",
]

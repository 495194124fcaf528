"""A tool is a plain Python function; its JSON schema comes from its signature.

`tool_from_function` reads the signature (type hints -> JSON types, defaults ->
not required) and the docstring (first paragraph -> description, an "Args:"
section -> parameter descriptions) into the OpenAI `tools` schema.
"""

from __future__ import annotations

import concurrent.futures
import inspect
import re
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from workbench.errors import ToolError

__all__ = ["Tool", "tool_from_function"]

_JSON_TYPES: dict[Any, str] = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    dict: "object",
    list: "array",
    tuple: "array",
}


def _json_schema_for(hint: Any) -> dict[str, Any]:
    """JSON schema for one type hint (str, int, float, bool, list[X], dict, Literal, Optional)."""
    if hint is inspect.Parameter.empty or hint is Any:
        return {}
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Literal:
        values = list(args)
        schema: dict[str, Any] = {"enum": values}
        kinds = {type(v) for v in values}
        if len(kinds) == 1 and next(iter(kinds)) in _JSON_TYPES:
            schema["type"] = _JSON_TYPES[next(iter(kinds))]
        return schema
    if origin in (typing.Union, types.UnionType):
        members = [a for a in args if a is not type(None)]
        if len(members) == 1:
            return _json_schema_for(members[0])
        return {"anyOf": [_json_schema_for(a) for a in members]}
    if origin in (list, tuple, set, frozenset):
        schema = {"type": "array"}
        if args and args[0] is not Ellipsis:
            schema["items"] = _json_schema_for(args[0])
        return schema
    if origin is dict or hint is dict:
        return {"type": "object"}
    if hint in _JSON_TYPES:
        return {"type": _JSON_TYPES[hint]}
    raise ToolError(
        f"Cannot describe the type {hint!r} to the model.",
        hint="Use str, int, float, bool, list[...], dict, Literal[...] or Optional[...] "
        "for tool parameters.",
    )


def _parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """(description, {param: description}) from a Google-style docstring."""
    if not doc:
        return "", {}
    doc = inspect.cleandoc(doc)
    paragraphs = re.split(r"\n\s*\n", doc, maxsplit=1)
    description = " ".join(paragraphs[0].split())
    if description.startswith(("Args:", "Arguments:", "Parameters:")):
        description = ""
    params: dict[str, str] = {}
    section = re.search(r"^(?:Args|Arguments|Parameters):[ \t]*\n((?:[ \t]+.*\n?|[ \t]*\n)*)", doc, re.M)
    if section:
        lines = [line for line in section.group(1).splitlines() if line.strip()]
        item_indent = min((len(l) - len(l.lstrip()) for l in lines), default=0)
        current = None
        for line in lines:
            indent = len(line) - len(line.lstrip())
            match = re.match(r"\s*\**(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)", line)
            if indent == item_indent and match:
                current = match.group(1)
                params[current] = match.group(2).strip()
            elif current:
                params[current] = f"{params[current]} {line.strip()}".strip()
    return description, params


@dataclass(frozen=True)
class Tool:
    """A function the model may call, with the JSON schema it is shown."""

    name: str
    description: str
    parameters: dict[str, Any]
    function: Callable[..., Any] = field(repr=False, compare=False)
    timeout_s: float | None = None
    # Where the tool runs: None for a local function (a worker process), else the MCP
    # server's label; `call_remote(arguments, timeout_s)` then starts the call there.
    source: str | None = None
    call_remote: Callable[[dict[str, Any], float], concurrent.futures.Future[Any]] | None = field(
        default=None, repr=False, compare=False)

    def to_openai(self) -> dict[str, Any]:
        """The entry for the request's `tools` list."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }

    def to_dict(self) -> dict[str, Any]:
        return {**self.to_openai()["function"], "timeout_s": self.timeout_s, "source": self.source}


_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")


def tool_from_function(
    function: Callable[..., Any],
    *,
    name: str | None = None,
    description: str | None = None,
    timeout_s: float | None = None,
) -> Tool:
    """Describe a Python function as a tool, from its signature and docstring."""
    tool_name = name or function.__name__
    if not _NAME_RE.match(tool_name):
        raise ToolError(
            f"{tool_name!r} is not a valid tool name.",
            hint="Use letters, digits, '_' or '-', starting with a letter or '_' (at most 64).",
        )
    doc_description, param_docs = _parse_docstring(inspect.getdoc(function))
    hints = typing.get_type_hints(function)
    properties: dict[str, dict[str, Any]] = {}
    required: list[str] = []
    for param in inspect.signature(function).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        schema = dict(_json_schema_for(hints.get(param.name, param.annotation)))
        if param.name in param_docs and param_docs[param.name]:
            schema["description"] = param_docs[param.name]
        if param.default is inspect.Parameter.empty:
            required.append(param.name)
        elif param.default is not None:
            schema["default"] = param.default
        properties[param.name] = schema
    parameters = {"type": "object", "properties": properties, "required": required}
    return Tool(
        tool_name,
        description if description is not None else doc_description,
        parameters,
        function,
        timeout_s,
    )


"""Tools a model can call: a registry, JSON schemas from Python signatures, built-ins.

A tool is a plain Python function. `tool_from_function` reads its signature
(type hints -> JSON types, defaults -> not required) and its docstring (first
paragraph -> description, an "Args:" section -> parameter descriptions) into the
OpenAI `tools` schema. `ToolRegistry.run` calls a tool with the model's
arguments in a worker thread under a timeout and always returns a `ToolOutcome`:
a tool that raises, hangs or gets bad arguments becomes an error result for the
model, never an exception for the chat.

The built-ins are safe by construction: the calculator walks a whitelisted AST
(no eval, no names, no calls, bounded powers), the others only compute.
"""

from __future__ import annotations

import ast
import asyncio
import concurrent.futures
import datetime as _dt
import inspect
import json
import math
import operator
import re
import threading
import time
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from workbench.errors import ToolError, WorkbenchError

__all__ = [
    "Tool",
    "ToolOutcome",
    "ToolRegistry",
    "tool_from_function",
    "builtin_tools",
    "calculator",
    "current_datetime",
    "convert_units",
    "calculate_tip",
    "recipe_lookup",
    "DEFAULT_TOOL_TIMEOUT_S",
]

DEFAULT_TOOL_TIMEOUT_S = 10.0


# ---------------------------------------------------------------- schemas

_JSON_TYPES: dict[Any, str] = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    dict: "object",
    list: "array",
    tuple: "array",
}


def _json_schema_for(hint: Any) -> dict:
    """JSON schema for one type hint (str, int, float, bool, list[X], dict, Literal, Optional)."""
    if hint is inspect.Parameter.empty or hint is Any:
        return {}
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Literal:
        values = list(args)
        schema: dict = {"enum": values}
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
    parameters: dict
    function: Callable[..., Any] = field(repr=False, compare=False)
    timeout_s: float | None = None

    def to_openai(self) -> dict:
        """The entry for the request's `tools` list."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }

    def to_dict(self) -> dict:
        return {**self.to_openai()["function"], "timeout_s": self.timeout_s}


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
    properties: dict[str, dict] = {}
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


# ---------------------------------------------------------------- running


@dataclass(frozen=True)
class ToolOutcome:
    """What a call returned: `result` (JSON-able) or `error` (a message for the model)."""

    name: str
    arguments: dict
    result: Any = None
    error: str | None = None
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None

    def content_for_model(self) -> str:
        """The `content` of the `role: tool` message sent back."""
        if self.error is not None:
            return json.dumps({"error": self.error})
        if isinstance(self.result, str):
            return self.result
        return json.dumps(self.result, default=str)

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "arguments": self.arguments,
            "result": self.result,
            "error": self.error,
            "seconds": self.seconds,
        }


def _run_in_daemon_thread(function: Callable[[], Any]) -> concurrent.futures.Future:
    # A daemon thread, not an executor: a tool that never returns must not block
    # interpreter or event-loop shutdown.
    future: concurrent.futures.Future = concurrent.futures.Future()

    def target() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(function())
        except BaseException as exc:  # handed to the caller, who reports it
            future.set_exception(exc)

    threading.Thread(target=target, name="workbench-tool", daemon=True).start()
    return future


class ToolRegistry:
    """The tools one chat session offers; each session owns its registry."""

    def __init__(self, tools: list[Tool | Callable[..., Any]] | None = None,
                 *, timeout_s: float = DEFAULT_TOOL_TIMEOUT_S) -> None:
        self.timeout_s = timeout_s
        self._tools: dict[str, Tool] = {}
        for tool in tools or []:
            self.register(tool)

    def register(self, tool: Tool | Callable[..., Any], *, name: str | None = None,
                 description: str | None = None, timeout_s: float | None = None) -> Tool:
        """Add a Tool or a plain function (described from its signature); returns the Tool."""
        if not isinstance(tool, Tool):
            tool = tool_from_function(tool, name=name, description=description, timeout_s=timeout_s)
        self._tools[tool.name] = tool
        return tool

    def unregister(self, name: str) -> None:
        self._tools.pop(name, None)

    def names(self) -> list[str]:
        return list(self._tools)

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)

    def schemas(self) -> list[dict]:
        """The request's `tools` list."""
        return [tool.to_openai() for tool in self._tools.values()]

    def _prepare(self, name: str, arguments: Any) -> tuple[Tool | None, dict, str | None]:
        args = arguments if isinstance(arguments, dict) else {}
        tool = self._tools.get(name)
        if tool is None:
            known = ", ".join(self._tools) or "none"
            return None, args, f"Unknown tool {name!r}. Available tools: {known}."
        if not isinstance(arguments, dict):
            return tool, args, f"Arguments must be a JSON object, got {type(arguments).__name__}."
        try:
            inspect.signature(tool.function).bind(**arguments)
        except TypeError as exc:
            expected = ", ".join(tool.parameters.get("properties", {}))
            return tool, args, f"Bad arguments for {name}: {exc}. Parameters: {expected}."
        return tool, args, None

    @staticmethod
    def _error_text(exc: BaseException) -> str:
        if isinstance(exc, WorkbenchError):
            return exc.message + (f" {exc.hint}" if exc.hint else "")
        return f"{type(exc).__name__}: {exc}"

    async def arun(self, name: str, arguments: Any) -> ToolOutcome:
        """Call a tool without blocking the event loop; never raises for tool failures."""
        started = time.monotonic()
        tool, args, problem = self._prepare(name, arguments)
        if problem:
            return ToolOutcome(name, args, error=problem, seconds=time.monotonic() - started)
        timeout = tool.timeout_s or self.timeout_s
        future = _run_in_daemon_thread(lambda: tool.function(**args))
        try:
            result = await asyncio.wait_for(asyncio.wrap_future(future), timeout)
        except (TimeoutError, asyncio.TimeoutError):
            return ToolOutcome(name, args, error=f"{name} did not finish within {timeout:g} s.",
                               seconds=time.monotonic() - started)
        except Exception as exc:
            return ToolOutcome(name, args, error=self._error_text(exc),
                               seconds=time.monotonic() - started)
        return ToolOutcome(name, args, result=result, seconds=time.monotonic() - started)

    def run(self, name: str, arguments: Any) -> ToolOutcome:
        """Blocking form of `arun`, for scripts and notebooks."""
        started = time.monotonic()
        tool, args, problem = self._prepare(name, arguments)
        if problem:
            return ToolOutcome(name, args, error=problem, seconds=time.monotonic() - started)
        timeout = tool.timeout_s or self.timeout_s
        future = _run_in_daemon_thread(lambda: tool.function(**args))
        try:
            result = future.result(timeout)
        except concurrent.futures.TimeoutError:
            return ToolOutcome(name, args, error=f"{name} did not finish within {timeout:g} s.",
                               seconds=time.monotonic() - started)
        except Exception as exc:
            return ToolOutcome(name, args, error=self._error_text(exc),
                               seconds=time.monotonic() - started)
        return ToolOutcome(name, args, result=result, seconds=time.monotonic() - started)


# ---------------------------------------------------------------- calculator

_BINARY_OPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY_OPS: dict[type, Callable[[Any], Any]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_CONSTANTS = {"pi": math.pi, "e": math.e, "tau": math.tau}
_FUNCTIONS: dict[str, Callable[..., float]] = {
    "sqrt": math.sqrt,
    "abs": abs,
    "round": round,
    "log": math.log,
    "log10": math.log10,
    "exp": math.exp,
    "sin": math.sin,
    "cos": math.cos,
    "tan": math.tan,
    "floor": math.floor,
    "ceil": math.ceil,
    "min": min,
    "max": max,
}
MAX_EXPONENT = 1000
MAX_MAGNITUDE = 10**100
MAX_EXPRESSION_CHARS = 500


def _calc_error(message: str) -> ToolError:
    return ToolError(
        message,
        hint="Use numbers, + - * / // % **, parentheses, the constants pi, e, tau and the "
        "functions " + ", ".join(_FUNCTIONS) + ".",
    )


def _evaluate(node: ast.AST) -> int | float:
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
            raise _calc_error(f"Only numbers are allowed, not {node.value!r}.")
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY_OPS:
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.Pow):
            if abs(right) > MAX_EXPONENT:
                raise _calc_error(f"Exponent {right} is too large (limit {MAX_EXPONENT}).")
            if abs(left) > 1 and abs(right) * math.log10(abs(left)) > 100:
                raise _calc_error(f"{left} ** {right} is too large (limit 1e100).")
        if isinstance(node.op, (ast.Div, ast.FloorDiv, ast.Mod)) and right == 0:
            raise _calc_error("Division by zero.")
        value = _BINARY_OPS[type(node.op)](left, right)
        if isinstance(value, complex):
            raise _calc_error("The result is a complex number; only real results are supported.")
        if abs(value) > MAX_MAGNITUDE:
            raise _calc_error("The result is larger than 1e100.")
        return value
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY_OPS:
        return _UNARY_OPS[type(node.op)](_evaluate(node.operand))
    if isinstance(node, ast.Name):
        if node.id in _CONSTANTS:
            return _CONSTANTS[node.id]
        raise _calc_error(f"Unknown name {node.id!r}.")
    if isinstance(node, ast.Call):
        if isinstance(node.func, ast.Attribute):
            raise _calc_error("Attribute access is not allowed.")
        if not isinstance(node.func, ast.Name) or node.func.id not in _FUNCTIONS:
            what = node.func.id if isinstance(node.func, ast.Name) else ast.unparse(node.func)
            raise _calc_error(f"Calling {what!r} is not allowed.")
        if node.keywords:
            raise _calc_error("Keyword arguments are not allowed.")
        args = [_evaluate(a) for a in node.args]
        try:
            return _FUNCTIONS[node.func.id](*args)
        except (ValueError, TypeError, OverflowError) as exc:
            raise _calc_error(f"{node.func.id}: {exc}.") from exc
    if isinstance(node, ast.Attribute):
        raise _calc_error("Attribute access is not allowed.")
    raise _calc_error(f"{type(node).__name__} is not allowed in an expression.")


def calculator(expression: str) -> dict:
    """Evaluate an arithmetic expression exactly and safely.

    Args:
        expression: Arithmetic such as "(3 + 4) * 2 ** 10 / 7" or "sqrt(2) * pi".
    """
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise _calc_error(f"The expression is longer than {MAX_EXPRESSION_CHARS} characters.")
    try:
        tree = ast.parse(expression.strip().replace("^", "**"), mode="eval")
    except SyntaxError as exc:
        raise _calc_error(f"{expression!r} is not a valid expression ({exc.msg}).") from exc
    value = _evaluate(tree)
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        value = int(value)
    return {"expression": expression, "result": value}


# ---------------------------------------------------------------- date and time


def current_datetime(timezone: str = "UTC") -> dict:
    """The current date and time in a timezone.

    Args:
        timezone: An IANA timezone name such as "UTC", "Europe/Paris" or "America/Los_Angeles".
    """
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        zone = ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ToolError(
            f"Unknown timezone {timezone!r}.",
            hint='Use an IANA name such as "UTC", "Europe/Paris" or "Asia/Tokyo".',
        ) from exc
    now = _dt.datetime.now(zone)
    return {
        "timezone": timezone,
        "iso": now.isoformat(timespec="seconds"),
        "date": now.date().isoformat(),
        "time": now.strftime("%H:%M:%S"),
        "weekday": now.strftime("%A"),
        "utc_offset": now.strftime("%z"),
    }


# ---------------------------------------------------------------- units

# Factor to the base unit of each quantity (m, kg, m^3, m/s); temperature is affine.
_UNITS: dict[str, dict[str, float]] = {
    "length": {
        "m": 1, "meter": 1, "metre": 1, "km": 1000, "kilometer": 1000, "cm": 0.01,
        "centimeter": 0.01, "mm": 0.001, "millimeter": 0.001, "um": 1e-6, "micrometer": 1e-6,
        "nm": 1e-9, "nanometer": 1e-9, "mi": 1609.344, "mile": 1609.344, "yd": 0.9144,
        "yard": 0.9144, "ft": 0.3048, "foot": 0.3048, "feet": 0.3048, "in": 0.0254,
        "inch": 0.0254, "nmi": 1852, "nautical_mile": 1852,
    },
    "mass": {
        "kg": 1, "kilogram": 1, "g": 0.001, "gram": 0.001, "mg": 1e-6, "milligram": 1e-6,
        "t": 1000, "tonne": 1000, "lb": 0.45359237, "pound": 0.45359237,
        "oz": 0.028349523125, "ounce": 0.028349523125, "st": 6.35029318, "stone": 6.35029318,
    },
    "volume": {
        "m3": 1, "cubic_meter": 1, "l": 0.001, "liter": 0.001, "litre": 0.001,
        "ml": 1e-6, "milliliter": 1e-6, "cl": 1e-5, "dl": 1e-4, "gal": 0.003785411784,
        "gallon": 0.003785411784, "qt": 0.000946352946, "quart": 0.000946352946,
        "pt": 0.000473176473, "pint": 0.000473176473, "cup": 0.0002365882365,
        "floz": 2.95735295625e-5, "fl_oz": 2.95735295625e-5, "tbsp": 1.478676478125e-5,
        "tsp": 4.92892159375e-6, "imp_gal": 0.00454609,
    },
    "speed": {
        "m/s": 1, "mps": 1, "km/h": 1 / 3.6, "kph": 1 / 3.6, "kmh": 1 / 3.6,
        "mph": 0.44704, "mi/h": 0.44704, "kn": 0.514444, "knot": 0.514444,
        "ft/s": 0.3048, "fps": 0.3048,
    },
    "temperature": {"c": 0, "celsius": 0, "f": 0, "fahrenheit": 0, "k": 0, "kelvin": 0},
}
_TEMPERATURE_CANON = {"c": "c", "celsius": "c", "f": "f", "fahrenheit": "f", "k": "k", "kelvin": "k"}


def _normalize_unit(unit: str) -> str:
    text = unit.strip().lower().replace(" ", "_").replace("°", "")
    if text.endswith("s") and len(text) > 3 and text[:-1] in {
        u for table in _UNITS.values() for u in table
    }:
        text = text[:-1]  # "meters" -> "meter", "pounds" -> "pound"
    return {"degc": "c", "degf": "f", "feets": "feet", "inches": "inch", "m^3": "m3"}.get(text, text)


def _quantity_of(unit: str) -> str | None:
    for quantity, table in _UNITS.items():
        if unit in table:
            return quantity
    return None


def convert_units(value: float, from_unit: str, to_unit: str) -> dict:
    """Convert a value between units of length, mass, temperature, volume or speed.

    Args:
        value: The number to convert.
        from_unit: The unit of the value, e.g. "km", "lb", "F", "l", "mph".
        to_unit: The unit to convert to, of the same kind.
    """
    source, target = _normalize_unit(from_unit), _normalize_unit(to_unit)
    quantities = {name: _quantity_of(name) for name in (source, target)}
    for given, name in ((from_unit, source), (to_unit, target)):
        if quantities[name] is None:
            listing = "; ".join(f"{q}: {', '.join(t)}" for q, t in _UNITS.items())
            raise ToolError(f"Unknown unit {given!r}.", hint=f"Known units — {listing}.")
    if quantities[source] != quantities[target]:
        raise ToolError(
            f"Cannot convert {quantities[source]} ({from_unit}) to {quantities[target]} ({to_unit}).",
            hint="Both units must measure the same kind of quantity.",
        )
    quantity = quantities[source]
    if quantity == "temperature":
        kelvin = {"c": lambda v: v + 273.15, "f": lambda v: (v - 32) * 5 / 9 + 273.15,
                  "k": lambda v: v}[_TEMPERATURE_CANON[source]](value)
        if kelvin < 0:
            raise ToolError(f"{value} {from_unit} is below absolute zero.")
        result = {"c": lambda k: k - 273.15, "f": lambda k: (k - 273.15) * 9 / 5 + 32,
                  "k": lambda k: k}[_TEMPERATURE_CANON[target]](kelvin)
    else:
        result = value * _UNITS[quantity][source] / _UNITS[quantity][target]
    return {"value": value, "from_unit": from_unit, "to_unit": to_unit,
            "result": round(result, 10), "quantity": quantity}


# ---------------------------------------------------------------- tip calculator


def calculate_tip(bill_total: float, tip_percentage: float, people: int = 1) -> dict:
    """Calculate the tip for a restaurant bill and split it between people.

    Args:
        bill_total: The bill before tip, in any currency.
        tip_percentage: The tip in percent, e.g. 18 for 18%.
        people: How many people share the bill.
    """
    if bill_total < 0:
        raise ToolError(f"The bill cannot be negative ({bill_total}).")
    if not 0 <= tip_percentage <= 100:
        raise ToolError(f"The tip percentage {tip_percentage} must be between 0 and 100.")
    if int(people) != people or people < 1:
        raise ToolError(f"people must be a whole number of at least 1, got {people}.")
    tip = bill_total * tip_percentage / 100
    total = bill_total + tip
    return {
        "bill_total": round(bill_total, 2),
        "tip_percentage": tip_percentage,
        "people": int(people),
        "tip": round(tip, 2),
        "total": round(total, 2),
        "per_person": round(total / people, 2),
    }


# ---------------------------------------------------------------- recipes


def recipe_lookup(hardware: str, recipe: str = "", variant: str = "") -> dict:
    """Look up the exact vllm serve command and flags the workbench's recipes use on a machine.

    Args:
        hardware: The machine, as an id ("dgx_spark_gb10", "h100", "b200", "cpu") or a name ("DGX Spark").
        recipe: The model recipe, e.g. "Nemotron" or "SmolLM2" (default: the Nemotron recipe).
        variant: A recipe variant such as a precision (default: the recipe's choice for the machine).
    """
    # Imported here: the recipe module is another area's and reads YAML on load.
    try:
        from workbench import recipes
    except ImportError as exc:
        raise ToolError("The recipe catalog is not available in this install.") from exc
    catalog = recipes.load_catalog()
    hardware_id = _match_hardware(hardware, catalog.hardware)
    selection = recipes.Selection(
        recipe=recipe or None, hardware=hardware_id, variant=variant or None)
    plan = recipes.render(selection=selection, catalog=catalog)
    return _plan_summary(plan, hardware_id)


def _squash(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def _match_hardware(asked: str, profiles: Mapping[str, Any]) -> str:
    """A taxonomy id from an id or a display name ("DGX Spark" -> "dgx_spark_gb10")."""
    if asked in profiles:
        return asked
    key = _squash(asked)
    exact = [hid for hid, hw in profiles.items()
             if key in (_squash(hid), _squash(getattr(hw, "display_name", "")))]
    partial = [hid for hid, hw in profiles.items()
               if key and (key in _squash(hid) or key in _squash(getattr(hw, "display_name", "")))]
    hits = exact or partial
    if len(hits) == 1:
        return hits[0]
    listing = ", ".join(f"{hid} ({getattr(hw, 'display_name', hid)})" for hid, hw in profiles.items())
    if hits:
        raise ToolError(f"{asked!r} matches several machines: {', '.join(hits)}.",
                        hint=f"Name one of them: {listing}.")
    raise ToolError(f"Unknown hardware {asked!r}.", hint=f"Known machines: {listing}.")


def _plan_summary(plan: Any, hardware_id: str) -> dict:
    return {
        "hardware": hardware_id,
        "recipe": plan.recipe_id,
        "model": plan.model_id,
        "variant": plan.variant,
        "command": plan.shell_command(multiline=False),
        "argv": list(plan.argv),
        "env": dict(plan.env),
        "flag_sources": dict(plan.provenance),
        "notes": list(plan.notes),
        "fallbacks": [f.to_dict() for f in plan.fallbacks],
    }


BUILTIN_FUNCTIONS: tuple[Callable[..., Any], ...] = (
    calculator,
    current_datetime,
    convert_units,
    calculate_tip,
    recipe_lookup,
)


def builtin_tools(*, timeout_s: float = DEFAULT_TOOL_TIMEOUT_S,
                  include: tuple[str, ...] | None = None) -> ToolRegistry:
    """A fresh registry with the built-in tools (all, or the names in `include`)."""
    registry = ToolRegistry(timeout_s=timeout_s)
    for function in BUILTIN_FUNCTIONS:
        if include is None or function.__name__ in include:
            registry.register(function)
    return registry

"""The calculator tool: arithmetic on a whitelisted AST (no eval, no names, no calls
but a few math functions, bounded powers and magnitudes)."""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from typing import Any

from workbench.errors import ToolError

__all__ = ["MAX_EXPONENT", "MAX_EXPRESSION_CHARS", "MAX_MAGNITUDE", "calculator"]


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
MAX_ROUND_DIGITS = 100  # round(x, -10**7) would compute 10**(10**7): seconds of CPU in one C call


def _calc_error(message: str) -> ToolError:
    return ToolError(
        message,
        hint="Use numbers, + - * / // % **, parentheses, the constants pi, e, tau and the "
        "functions " + ", ".join(_FUNCTIONS) + ".",
    )


def _checked(value: int | float) -> int | float:
    """A finite number within MAX_MAGNITUDE, else the calculator's error."""
    if isinstance(value, float) and not math.isfinite(value):
        raise _calc_error("The value is not finite (infinity or NaN); only finite numbers are supported.")
    if abs(value) > MAX_MAGNITUDE:
        raise _calc_error("The result is larger than 1e100.")
    return value


def _evaluate(node: ast.AST) -> int | float:
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
            raise _calc_error(f"Only numbers are allowed, not {node.value!r}.")
        return _checked(node.value)
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
        return _checked(value)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY_OPS:
        return _checked(_UNARY_OPS[type(node.op)](_evaluate(node.operand)))
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
        if len(node.args) > 100:
            raise _calc_error(f"{node.func.id} takes at most 100 arguments here.")
        args = [_evaluate(a) for a in node.args]
        if node.func.id == "round" and len(args) > 1:
            if not isinstance(args[1], int) or abs(args[1]) > MAX_ROUND_DIGITS:
                raise _calc_error(f"round's digits must be a whole number within ±{MAX_ROUND_DIGITS}.")
        try:
            value = _FUNCTIONS[node.func.id](*args)
        except (ValueError, TypeError, OverflowError, ZeroDivisionError) as exc:
            raise _calc_error(f"{node.func.id}: {exc}.") from exc
        if isinstance(value, complex) or not isinstance(value, (int, float)):
            raise _calc_error(f"{node.func.id} did not give a real number.")
        return _checked(value)
    if isinstance(node, ast.Attribute):
        raise _calc_error("Attribute access is not allowed.")
    raise _calc_error(f"{type(node).__name__} is not allowed in an expression.")


def calculator(expression: str) -> dict[str, Any]:
    """Evaluate an arithmetic expression exactly and safely.

    Args:
        expression: Arithmetic such as "(3 + 4) * 2 ** 10 / 7" or "sqrt(2) * pi".
    """
    if not isinstance(expression, str):
        raise _calc_error(f"The expression must be text, not {type(expression).__name__}.")
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise _calc_error(f"The expression is longer than {MAX_EXPRESSION_CHARS} characters.")
    try:
        tree = ast.parse(expression.strip().replace("^", "**"), mode="eval")
    except SyntaxError as exc:
        raise _calc_error(f"{expression!r} is not a valid expression ({exc.msg}).") from exc
    except (ValueError, RecursionError, MemoryError) as exc:  # e.g. a NUL byte, deep nesting
        raise _calc_error(f"The expression cannot be parsed ({type(exc).__name__}).") from exc
    try:
        value = _evaluate(tree)
    except RecursionError as exc:
        raise _calc_error("The expression is nested too deeply.") from exc
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        value = int(value)
    return {"expression": expression, "result": value}


"""Built-in tools, the registry's error paths, and schemas from Python functions."""

from __future__ import annotations

import asyncio
import re
import time
from typing import Literal, Optional

import pytest

from workbench.errors import ToolError
from workbench.chat.tools import (
    ToolRegistry,
    builtin_tools,
    calculate_tip,
    calculator,
    convert_units,
    current_datetime,
    recipe_lookup,
    tool_from_function,
)


@pytest.mark.parametrize("expression, result", [
    ("1 + 2 * 3", 7),
    ("(3 + 4) * 2 ** 10 / 7", 1024),
    ("2^8", 256),
    ("-7 // 2", -4),
    ("17 % 5", 2),
    ("sqrt(16) + abs(-2)", 6),
    ("round(pi, 4)", 3.1416),
    ("max(1, 5, 3)", 5),
])
def test_calculator_computes(expression, result):
    assert calculator(expression)["result"] == pytest.approx(result)


@pytest.mark.parametrize("expression, message", [
    ("__import__('os').system('id')", "Attribute access is not allowed"),
    ("__import__('os')", "Calling '__import__' is not allowed"),
    ("(1).real", "Attribute access is not allowed"),
    ("().__class__", "Attribute access is not allowed"),
    ("open('/etc/passwd')", "Calling 'open' is not allowed"),
    ("x + 1", "Unknown name 'x'"),
    ("9 ** 9 ** 9", "Exponent 387420489 is too large"),
    ("10 ** 999", "is too large (limit 1e100)"),
    ("1 / 0", "Division by zero"),
    ("'a' * 3", "Only numbers are allowed"),
    ("[1, 2]", "List is not allowed"),
    ("lambda: 1", "Lambda is not allowed"),
    ("1 +", "is not a valid expression"),
    ("sqrt(-1)", "sqrt: math domain error"),
    ("round(2.5, ndigits=1)", "Keyword arguments are not allowed"),
])
def test_calculator_rejects_with_clear_errors(expression, message):
    with pytest.raises(ToolError, match=re.escape(message)) as info:
        calculator(expression)
    assert "Use numbers" in info.value.hint


def test_calculator_refuses_long_input():
    with pytest.raises(ToolError, match="longer than 500"):
        calculator("1+" * 300 + "1")


def test_current_datetime():
    now = current_datetime("Asia/Tokyo")
    assert now["timezone"] == "Asia/Tokyo" and now["utc_offset"] == "+0900"
    assert now["iso"].startswith(now["date"])
    with pytest.raises(ToolError, match="Unknown timezone 'Mars/Olympus'") as info:
        current_datetime("Mars/Olympus")
    assert "IANA" in info.value.hint


@pytest.mark.parametrize("value, source, target, result", [
    (1, "km", "m", 1000),
    (1, "mile", "km", 1.609344),
    (12, "inches", "ft", 1),
    (1, "kg", "lb", 2.2046226218),
    (100, "C", "F", 212),
    (32, "°F", "celsius", 0),
    (0, "C", "K", 273.15),
    (1, "gallon", "l", 3.785411784),
    (100, "km/h", "mph", 62.1371192237),
])
def test_convert_units(value, source, target, result):
    assert convert_units(value, source, target)["result"] == pytest.approx(result)


def test_convert_units_errors():
    with pytest.raises(ToolError, match="Unknown unit 'parsec'") as info:
        convert_units(1, "parsec", "m")
    assert "length: m" in info.value.hint
    with pytest.raises(ToolError, match=r"Cannot convert mass \(kg\) to length \(m\)"):
        convert_units(1, "kg", "m")
    with pytest.raises(ToolError, match="below absolute zero"):
        convert_units(-300, "C", "K")


def test_calculate_tip():
    assert calculate_tip(80, 15, 4) == {
        "bill_total": 80, "tip_percentage": 15, "people": 4,
        "tip": 12.0, "total": 92.0, "per_person": 23.0}
    assert calculate_tip(50, 20)["per_person"] == 60.0
    with pytest.raises(ToolError, match="at least 1"):
        calculate_tip(50, 20, 0)
    with pytest.raises(ToolError, match="between 0 and 100"):
        calculate_tip(50, 150)


def test_recipe_lookup_answers_which_flags_dgx_spark_uses():
    answer = recipe_lookup("DGX Spark")
    assert answer["hardware"] == "dgx_spark_gb10"
    assert answer["argv"][:2] == ["vllm", "serve"]
    assert "--reasoning-parser" in answer["argv"]
    assert answer["command"].startswith("vllm serve ")
    assert set(answer["flag_sources"]) <= {a for a in answer["argv"] if a.startswith("--")}
    assert recipe_lookup("cpu", recipe="SmolLM2")["model"] == "HuggingFaceTB/SmolLM2-135M-Instruct"
    with pytest.raises(ToolError, match="Unknown hardware 'TPU'") as info:
        recipe_lookup("TPU")
    assert "dgx_spark_gb10 (DGX Spark (GB10))" in info.value.hint


def test_builtin_schemas():
    registry = builtin_tools()
    assert registry.names() == [
        "calculator", "current_datetime", "convert_units", "calculate_tip", "recipe_lookup"]
    tip = registry.get("calculate_tip").to_openai()["function"]
    assert tip["description"] == "Calculate the tip for a restaurant bill and split it between people."
    assert tip["parameters"] == {
        "type": "object",
        "properties": {
            "bill_total": {"type": "number", "description": "The bill before tip, in any currency."},
            "tip_percentage": {"type": "number", "description": "The tip in percent, e.g. 18 for 18%."},
            "people": {"type": "integer", "description": "How many people share the bill.",
                       "default": 1},
        },
        "required": ["bill_total", "tip_percentage"],
    }


def test_schema_from_a_user_function():
    def search_flights(origin: str, destination: str, passengers: int = 1,
                       cabin: Literal["economy", "business"] = "economy",
                       max_price: Optional[float] = None, airlines: list[str] | None = None,
                       direct_only: bool = False) -> list:
        """Find flights between two airports.

        Searches the fake timetable; results are sorted by price.

        Args:
            origin: IATA code of the departure airport,
                for example "SFO".
            destination: IATA code of the arrival airport.
            passengers: How many seats.
            cabin: Which cabin.
            max_price: Upper price limit in USD.
            airlines: Only these carriers.
            direct_only: Skip connections.

        Returns:
            A list of flights.
        """
        return []

    tool = tool_from_function(search_flights)
    assert tool.name == "search_flights"
    assert tool.description == "Find flights between two airports."
    props = tool.parameters["properties"]
    assert tool.parameters["required"] == ["origin", "destination"]
    assert props["origin"] == {"type": "string",
                               "description": 'IATA code of the departure airport, for example "SFO".'}
    assert props["passengers"] == {"type": "integer", "description": "How many seats.", "default": 1}
    assert props["cabin"] == {"enum": ["economy", "business"], "type": "string",
                              "description": "Which cabin.", "default": "economy"}
    assert props["max_price"] == {"type": "number", "description": "Upper price limit in USD."}
    assert props["airlines"] == {"type": "array", "items": {"type": "string"},
                                 "description": "Only these carriers."}
    assert props["direct_only"] == {"type": "boolean", "description": "Skip connections.",
                                    "default": False}


def test_schema_rejects_what_json_cannot_say():
    def bad(when: complex) -> None:
        """x"""

    with pytest.raises(ToolError, match="Cannot describe the type") as info:
        tool_from_function(bad)
    assert "Literal" in info.value.hint
    with pytest.raises(ToolError, match="not a valid tool name"):
        tool_from_function(lambda: None, name="has space")


def test_exception_becomes_an_error_result():
    def flaky(n: int) -> int:
        """Fails."""
        raise RuntimeError(f"backend down for {n}")

    registry = ToolRegistry([flaky])
    outcome = registry.run("flaky", {"n": 3})
    assert not outcome.ok
    assert outcome.error == "RuntimeError: backend down for 3"
    assert outcome.content_for_model() == '{"error": "RuntimeError: backend down for 3"}'


def test_timeout_becomes_an_error_result_sync_and_async():
    def slow() -> str:
        """Sleeps."""
        time.sleep(5)
        return "late"

    registry = ToolRegistry(timeout_s=0.3)
    registry.register(slow)
    started = time.monotonic()
    outcome = registry.run("slow", {})
    assert outcome.error == "slow did not finish within 0.3 s."
    assert time.monotonic() - started < 2
    outcome = asyncio.run(registry.arun("slow", {}))
    assert outcome.error == "slow did not finish within 0.3 s."
    assert 0.3 <= outcome.seconds < 2


def test_bad_arguments_and_unknown_tools_are_error_results():
    registry = builtin_tools()
    outcome = registry.run("calculate_tip", {"bill_total": 10})
    assert outcome.error.startswith("Bad arguments for calculate_tip: missing a required argument")
    assert "bill_total, tip_percentage, people" in outcome.error
    assert registry.run("calculator", ["1+1"]).error == "Arguments must be a JSON object, got list."
    assert registry.run("nope", {}).error.startswith("Unknown tool 'nope'. Available tools: calculator")
    tool_error = registry.run("calculator", {"expression": "a.b"})
    assert tool_error.error.startswith("Attribute access is not allowed. Use numbers")
    assert registry.run("calculator", {"expression": "6*7"}).result == {"expression": "6*7", "result": 42}


# --- tools run in a worker process that is killed at its deadline --------------------------


def test_a_tool_that_hogs_the_gil_is_killed_and_the_app_keeps_running():
    """round(1, -10**7) is one C call of seconds: a thread would run past its timeout and
    stall every other thread. In the worker it is refused; a hog that gets through is killed."""
    import threading

    registry = builtin_tools()
    refused = registry.run("calculator", {"expression": "round(1, -10**7)"})
    assert refused.error.startswith("round's digits must be a whole number within ±100.")

    def hog() -> int:
        """Holds the GIL for a long time in one C call."""
        return len(str(10 ** (10**7)))

    registry = ToolRegistry(timeout_s=0.5)
    registry.register(hog)
    ticks = []
    stop = threading.Event()

    def ticker() -> None:  # another thread of the app, which must keep running
        while not stop.is_set():
            ticks.append(time.monotonic())
            time.sleep(0.05)

    thread = threading.Thread(target=ticker)
    thread.start()
    started = time.monotonic()
    threads_before = threading.active_count()
    outcome = registry.run("hog", {})
    stop.set()
    thread.join()
    assert outcome.error == "hog did not finish within 0.5 s."
    assert time.monotonic() - started < 2
    gaps = [b - a for a, b in zip(ticks, ticks[1:])]
    assert gaps and max(gaps) < 0.5, max(gaps)  # the other thread never stalled
    assert threading.active_count() <= threads_before  # nothing left running for the killed call


def test_a_tool_cannot_end_the_app():
    import os
    import sys

    def quits() -> None:
        """Calls sys.exit."""
        sys.exit(3)

    def interrupts() -> None:
        """Raises KeyboardInterrupt."""
        raise KeyboardInterrupt

    def dies() -> None:
        """Ends its process."""
        os._exit(9)

    registry = ToolRegistry([quits, interrupts, dies])
    assert registry.run("quits", {}).error.startswith("The tool tried to exit (SystemExit 3)")
    assert registry.run("interrupts", {}).error == "The tool was interrupted (KeyboardInterrupt)."
    assert registry.run("dies", {}).error == "The tool's process ended (exit code 9) without a result."
    assert asyncio.run(registry.arun("quits", {})).error.startswith("The tool tried to exit")


def test_results_sent_to_the_model_are_always_valid_json():
    import json

    registry = builtin_tools()
    huge = registry.run("calculator", {"expression": "1e999"})
    assert huge.error.startswith("The value is not finite")
    json.loads(huge.content_for_model())

    def odd() -> dict:
        """Returns what JSON cannot hold."""
        return {"inf": float("inf"), "nan": float("nan"), "set": {1}, 3: "key"}

    registry = ToolRegistry([odd])
    content = registry.run("odd", {}).content_for_model()
    assert json.loads(content) == {"inf": "Infinity", "nan": "NaN", "set": "{1}", "3": "key"}


def test_arguments_are_bounded():
    registry = builtin_tools()
    import json

    arguments = {"expression": "1+" * 20_000 + "1"}
    outcome = registry.run("calculator", arguments)
    assert outcome.error == f"The arguments are {len(json.dumps(arguments))} characters of JSON; the limit is 20000."
    assert registry.run("calculator", {"expression": 7}).error.startswith("The expression must be text, not int")
    too_long = registry.run("calculator", {"expression": "(" * 400 + "1" + ")" * 400})
    assert too_long.error.startswith("The expression is longer than 500 characters.")
    # 400 unary minus signs: deep, but within the limits; it evaluates.
    assert registry.run("calculator", {"expression": "-" * 400 + "1"}).result["result"] == 1

"""The other built-in tools (date and time, units, tips, the recipes) and the default registry.

They only compute; none touches the network or the file system beyond the recipes.
"""

from __future__ import annotations

import datetime as _dt
import re
from collections.abc import Callable, Mapping
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from workbench import recipes
from workbench.chat.tools.calculator import calculator
from workbench.chat.tools.registry import DEFAULT_TOOL_TIMEOUT_S, ToolRegistry
from workbench.errors import ToolError

__all__ = ["BUILTIN_FUNCTIONS", "builtin_tools", "calculate_tip", "convert_units", "current_datetime",
           "recipe_lookup"]



def current_datetime(timezone: str = "UTC") -> dict[str, Any]:
    """The current date and time in a timezone.

    Args:
        timezone: An IANA timezone name such as "UTC", "Europe/Paris" or "America/Los_Angeles".
    """
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


def convert_units(value: float, from_unit: str, to_unit: str) -> dict[str, Any]:
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
    assert quantity is not None  # unknown units raised above
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


def calculate_tip(bill_total: float, tip_percentage: float, people: int = 1) -> dict[str, Any]:
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


def recipe_lookup(hardware: str, recipe: str = "", variant: str = "") -> dict[str, Any]:
    """Look up the exact vllm serve command and flags the workbench's recipes use on a machine.

    Args:
        hardware: The machine, as an id ("dgx_spark_gb10", "h100", "b200", "cpu") or a name ("DGX Spark").
        recipe: The model recipe, e.g. "Nemotron" or "SmolLM2" (default: the Nemotron recipe).
        variant: A recipe variant such as a precision (default: the recipe's choice for the machine).
    """
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


def _plan_summary(plan: Any, hardware_id: str) -> dict[str, Any]:
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

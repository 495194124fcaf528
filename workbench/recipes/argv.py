"""argv as flags and values: the one place that pairs a flag with its value.

A flag followed by a token that does not start with "-" is one unit (`--port 8000`);
a flag alone is a switch (`--enforce-eager`); any other token stands alone (the
model). Rendering's last-wins de-dupe, the display layout of a command, the
provenance table and the launcher's flag edits all read argv through `units()`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "Unit",
    "canonical_flag",
    "dedupe_args",
    "dedupe_units",
    "env_word",
    "flag_value",
    "flag_values",
    "has_flag",
    "join_lines",
    "set_flag",
    "shell_quote",
    "units",
]

_VAR_RE = re.compile(r"^\$[A-Z_][A-Z0-9_]*$")
_SAFE_RE = re.compile(r"^[A-Za-z0-9_./=:@,+%-]+$")


@dataclass
class Unit:
    """One flag with its value (or None for a switch), or a lone token (flag None)."""

    flag: str | None
    value: str | None
    layer: str = ""

    @property
    def name(self) -> str | None:
        """The flag without an `=value` part: what identifies it for the de-dupe."""
        return None if self.flag is None else self.flag.split("=", 1)[0]

    def tokens(self) -> list[str]:
        if self.flag is None:
            return [self.value or ""]
        return [self.flag] if self.value is None else [self.flag, self.value]


def units(tokens: Sequence[str], layer: str = "") -> list[Unit]:
    out: list[Unit] = []
    i = 0
    while i < len(tokens):
        cur = tokens[i]
        if cur.startswith("-"):
            nxt = tokens[i + 1] if i + 1 < len(tokens) else None
            if nxt is not None and not nxt.startswith("-") and "=" not in cur:
                out.append(Unit(cur, nxt, layer))
                i += 2
                continue
            out.append(Unit(cur, None, layer))
        else:
            out.append(Unit(None, cur, layer))
        i += 1
    return out


def dedupe_units(all_units: Sequence[Unit]) -> tuple[list[Unit], list[tuple[Unit, Unit]]]:
    """Keep the last unit of each flag, in its later position.

    Returns the kept units and (dropped, winner) pairs.
    """
    winner: dict[str, Unit] = {}
    for u in all_units:
        if u.name is not None:
            winner[u.name] = u
    kept, dropped = [], []
    for u in all_units:
        if u.name is None or winner[u.name] is u:
            kept.append(u)
        else:
            dropped.append((u, winner[u.name]))
    return kept, dropped


def dedupe_args(args: Sequence[str]) -> list[str]:
    """Upstream's last-wins de-dupe on a plain argv (a flag + non-dash token is one unit)."""
    kept, _ = dedupe_units(units(list(args)))
    return [t for u in kept for t in u.tokens()]


def flag_value(argv: Sequence[str], flag: str) -> str | None:
    """The value of the last `flag value` or `flag=value` in argv, else None."""
    found = None
    for u in units(argv):
        if u.flag == flag and u.value is not None:
            found = u.value
        elif u.flag is not None and u.flag.startswith(flag + "="):
            found = u.flag.split("=", 1)[1]
    return found


def canonical_flag(flag: str) -> str:
    """`--kv_cache_dtype` and `--kv-cache-dtype` are one flag to vLLM's parser: the hyphen form."""
    name, dot, rest = flag.partition(".")
    return name.replace("_", "-") + dot + rest


def flag_values(argv: Sequence[str]) -> dict[str, str | None]:
    """Every flag of argv in canonical spelling -> its last value ("" for `--a=`; None for a switch).

    Of a switch pair (`--enable-x` / `--no-enable-x`) only the later one is kept, as
    vLLM's parser lets the last one win."""
    out: dict[str, str | None] = {}
    for u in units(argv):
        if u.flag is None:
            continue
        name, eq, inline = u.flag.partition("=")
        name = canonical_flag(name)
        out.pop("--" + name[5:] if name.startswith("--no-") else "--no-" + name[2:], None)
        out[name] = inline if eq else u.value
    return out


def has_flag(argv: Sequence[str], flag: str) -> bool:
    return any(u.name == flag for u in units(argv))


def set_flag(argv: Sequence[str], flag: str, value: str) -> list[str]:
    """argv with `flag value` replacing every earlier copy (appended last)."""
    kept = [t for u in units(argv) if u.name != flag for t in u.tokens()]
    return [*kept, flag, value]


def shell_quote(s: str) -> str:
    """Quote like upstream: bare $VARS stay unquoted, safe words bare, else '...'."""
    if s == "":
        return "''"
    if _VAR_RE.match(s) or _SAFE_RE.match(s):
        return s
    return "'" + s.replace("'", "'\\''") + "'"


def env_word(k: str, v: str) -> str:
    return f"{k}={v}" if _VAR_RE.match(v) else f"{k}={shell_quote(v)}"


def join_lines(lines: Sequence[Sequence[str]], multiline: bool) -> str:
    """Display lines (each a flag and its value) as one shell string."""
    parts = [" ".join(shell_quote(t) for t in line) for line in lines]
    return (" \\\n  " if multiline else " ").join(parts)


def is_shell_variable(s: str) -> bool:
    return bool(_VAR_RE.match(s))

"""argparse types that range-check numbers, so a bad value is refused at parse time
(exit 2, naming the option and what it accepts) instead of failing later."""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shlex
import sys
from pathlib import Path
from collections.abc import Callable, Sequence
from typing import Any

from workbench.errors import InputError

__all__ = ["DeprecatedSpelling", "at_least", "check_extra_quoting", "finite_float", "new_file_path",
           "port_number", "positive_float", "refuse_with_attach"]


class DeprecatedSpelling(argparse.Action):
    """An old spelling of an option that still works: stored as the new one, and said so on stderr.
    `add_argument("--app-port", action=DeprecatedSpelling, new="--port", dest="port", ...)`."""

    def __init__(self, option_strings: list[str], dest: str, *, new: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, **kwargs)
        self.new = new

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        print(f"note: {option_string} is now spelled {self.new}; the old spelling still works for now.",
              file=sys.stderr)
        setattr(namespace, self.dest, values)


def refuse_with_attach(args: argparse.Namespace, flags: dict[str, str]) -> None:
    """InputError naming the first of `flags` (dest -> option) given beside --attach: a server
    started elsewhere already has its port and its command; the flag would be ignored."""
    given = [option for dest, option in flags.items() if getattr(args, dest, None) not in (None, False, [])]
    if getattr(args, "attach", None) and given:
        raise InputError(
            f"{', '.join(given)} cannot apply with --attach: the attached server was started elsewhere, "
            "its port is the one in the URL and its command is its own.",
            hint=f"Drop {', '.join(given)}, or drop --attach to launch a server here with them.")


# A JSON value whose quotes were eaten by shell-style splitting: {"method":"ngram"} -> {method:ngram}.
_UNQUOTED_JSON = re.compile(r"^[{\[].*[A-Za-z_][\w.-]*\s*:")


def check_extra_quoting(extra: Sequence[str]) -> None:
    """InputError when an --extra value holds JSON that shell-style splitting turns into
    something else ({"method":"ngram"} becomes {method:ngram}), with the quoting that keeps it."""
    for item in extra:
        try:
            words = shlex.split(item)
        except ValueError:
            continue  # unbalanced quotes: the recipe layer names that itself
        for i, word in enumerate(words):
            flag, _, value = word.partition("=") if word.startswith("--") else ("", "", word)
            if not _UNQUOTED_JSON.match(value):
                continue
            try:
                json.loads(value)
            except ValueError:
                flag = flag or (words[i - 1] if i > 0 else "--its-flag")
                example = "--extra \"" + flag + " '{\\\"method\\\": \\\"ngram\\\"}'\""
                raise InputError(
                    f"--extra {item!r}: split into shell words (as --extra values are), the JSON became "
                    f"{value}: its double quotes were read as quoting, and vLLM cannot parse what is left.",
                    hint="Put the JSON in single quotes inside the value, so its double quotes survive, "
                    f"e.g. {example}") from None


def port_number(text: str) -> int:
    """A TCP port a server can listen on: 1-65535."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number (1-65535)") from None
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a TCP port (1-65535)")
    return value


def at_least(minimum: int) -> Callable[[str], int]:
    """A whole number >= minimum."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} is too small (at least {minimum})")
        return value

    parse.__name__ = f"whole number >= {minimum}"
    return parse


def finite_float(text: str) -> float:
    """A number that is not NaN or infinite."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text} is not a finite number")
    return value


def positive_float(text: str) -> float:
    """A finite number > 0 (seconds, rates)."""
    value = finite_float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{value:g} must be more than 0")
    return value


def new_file_path(text: str) -> Path:
    """A file the command will write at the end: checked now, so the work is not lost then."""
    path = Path(text).expanduser()
    if not text or path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a folder; give a file name")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise argparse.ArgumentTypeError(f"the folder {str(parent)!r} does not exist")
    if not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise argparse.ArgumentTypeError(f"{text!r} cannot be written here (no permission)")
    return path

"""argparse types that range-check numbers, so a bad value is refused at parse time
(exit 2, naming the option and what it accepts) instead of failing later."""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path
from collections.abc import Callable

__all__ = ["at_least", "finite_float", "new_file_path", "port_number", "positive_float"]


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

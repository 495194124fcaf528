"""Signing in to the room: a name and the room code.

Names are NFKC-normalised, spaces collapsed, and refused when their letters mix
scripts (a Cyrillic "а" in a Latin name); two names that differ only in case or
in Latin look-alike letters are one name (`name_key`). Wrong room codes put that
address on a back-off (`workbench.workshop.throttle.FailureBackoff`): an attempt that
comes too soon is refused at once, unchecked, with how long to wait; the right code is
refused at most CODE_MAX_BACKOFF_S after the last wrong one. Who holds which name (the
random session in the cookie) is the room's business (room.py).
"""

from __future__ import annotations

import hmac
import re
import unicodedata

from workbench.errors import RoomError
from workbench.workshop.throttle import FailureBackoff, retry_after

__all__ = ["COOKIE_NAME", "MAX_NAME_LENGTH", "SignIn", "name_key", "normalize_name"]

COOKIE_NAME = "workbench_attendee"
MAX_NAME_LENGTH = 40
# Letters and digits of any script, spaces and . ' - _ : nothing a page could read as markup.
_NAME_RE = re.compile(r"^[^\W][\w .'-]*$")
# Wrong codes: the first FREE_FAILURES in a minute from one address (a big room's typos
# behind one NAT) cost nothing; then that address's next code is checked CODE_BACKOFF_S
# after its last wrong one, doubling with each to CODE_MAX_BACKOFF_S (about 30 checks a
# minute for a guesser, and an attendee who mistypes waits a second or two).
FREE_FAILURES = 20
FAILURE_WINDOW_S = 60.0
CODE_BACKOFF_S = 0.5
CODE_MAX_BACKOFF_S = 2.0
# Scripts that are written together (Japanese mixes kanji and kana; Korean, hanja).
_SCRIPT_FAMILY = {"HIRAGANA": "CJK", "KATAKANA": "CJK", "HANGUL": "CJK", "CJK": "CJK", "KATAKANA-HIRAGANA": "CJK"}
# Cyrillic and Greek letters drawn like Latin ones: a name written wholly in them
# ("Аdа" typed on a Cyrillic keyboard is refused as mixed; "Ерос" is all Cyrillic)
# still claims the Latin name it looks like.
_LOOKALIKES = str.maketrans("аеорсухіјѕԁһкмтвнαεορτυχινκμ", "aeopcyxijsdhkmtbhaeoptuxivkm")


def _script(char: str) -> str | None:
    if not char.isalpha():
        return None
    try:
        first = unicodedata.name(char).split()[0]
    except ValueError:
        return "UNKNOWN"
    return _SCRIPT_FAMILY.get(first, first)


def normalize_name(name: str | None) -> str:
    """The name as the room keeps it (NFKC, spaces collapsed), or a RoomError saying what to change."""
    cleaned = " ".join(unicodedata.normalize("NFKC", name or "").split())
    if not cleaned:
        raise RoomError("Type your name to sign in.", hint="Any name the presenter will recognise, e.g. Ada L.")
    if len(cleaned) > MAX_NAME_LENGTH:
        raise RoomError(f"That name is {len(cleaned)} characters long; the limit is {MAX_NAME_LENGTH}.",
                        hint="Use a shorter name.")
    if not _NAME_RE.match(cleaned):
        raise RoomError("A name may hold letters, digits, spaces and . ' - _ only, starting with a letter or digit.",
                        hint="Remove the other characters.")
    scripts = {s for s in map(_script, cleaned) if s is not None}
    if len(scripts) > 1:
        raise RoomError(f"That name mixes scripts ({', '.join(sorted(s.title() for s in scripts))}).",
                        hint="Write your name in one script (letters that look alike from another are refused).")
    return cleaned


def name_key(name: str) -> str:
    """What two names are compared by: casefolded, look-alike letters as the Latin ones."""
    return unicodedata.normalize("NFKC", name.casefold()).translate(_LOOKALIKES)


class SignIn:
    """Checks names and the room code. room_code None: no code is asked (only on
    loopback; the settings refuse otherwise)."""

    def __init__(self, room_code: str | None, *, failures: FailureBackoff | None = None) -> None:
        self._code = room_code.encode() if room_code else None
        self.failures = failures or FailureBackoff(free=FREE_FAILURES, window_s=FAILURE_WINDOW_S,
                                                   base_s=CODE_BACKOFF_S, max_s=CODE_MAX_BACKOFF_S)

    @property
    def code_required(self) -> bool:
        return self._code is not None

    def check(self, name: str | None, code: str | None, client: str = "") -> str:
        """The normalised name if the code is right; else a RoomError: the code is wrong (counted
        for `client`), or `client` is on a back-off after wrong codes and this attempt came too
        soon (`retry_after_s` set, the code not checked)."""
        if self._code is None:
            return normalize_name(name)
        wait = self.failures.admit(client)
        if wait:
            raise RoomError("Too many wrong room codes came from your network just now; yours was not checked.",
                            hint=f"Wait {retry_after(wait)} s, then try again.", retry_after_s=wait)
        right = hmac.compare_digest((code or "").strip().encode(), self._code)
        if not right:
            self.failures.failed(client)
            raise RoomError("That room code is not right.", hint="Type the code exactly as the presenter shows it.")
        self.failures.passed(client)
        return normalize_name(name)

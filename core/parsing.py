"""Numbers from users, parsed once and safely.

``str.isdigit()`` accepts "²" and "٣", which ``int()`` then refuses, and ``int()`` refuses
strings over 4,300 digits; a database refuses integers over 64 bits. Every id and count that
comes from a URL, a form or a query string goes through here instead.
"""

from __future__ import annotations

MAX_DB_INT = 2**63 - 1


def parse_int(value, *, minimum: int | None = None, maximum: int = MAX_DB_INT) -> int | None:
    """An integer written in ASCII digits (optionally signed), within bounds; None otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        number = value
    else:
        text = str(value).strip() if value is not None else ""
        digits = text[1:] if text[:1] in {"-", "+"} else text
        if not digits or len(digits) > 19 or not (digits.isascii() and digits.isdigit()):
            return None
        number = int(text)
    if minimum is not None and number < minimum:
        return None
    if number > maximum or number < -MAX_DB_INT:
        return None
    return number


def parse_id(value) -> int | None:
    """A database id (a positive 64-bit integer) or None."""
    return parse_int(value, minimum=1)

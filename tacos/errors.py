"""The one exception type that reaches users.

Library code raises :class:`TacosError` for anything caused by the user's input
(a bad spec string, a malformed file, an impossible request). The CLI prints
``str(err)`` as a single line and exits with status 2, so the message must say
what is wrong, where (file, line, field) and what to do about it. A value the
user wrote appears through :func:`describe`, never its repr, which for a hostile
file could be megabytes on the one line.
"""

from typing import Any


class TacosError(Exception):
    """An error caused by user input; the CLI prints str(err) as one line and exits 2."""


def whole_number(value: Any, where: str) -> int:
    """``value`` from a user's file as an int: an int, or a float with nothing after the
    point (JSON writers emit ``4.0``); not a string, a bool, infinity or ``3.5``."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    raise TacosError(f"{where}: {describe(value)} is not a whole number")


def describe(value: Any) -> str:
    """A short description of a user's value for an error message (never its repr)."""
    if isinstance(value, str):
        return repr(value) if len(value) <= 40 else f"a string of {len(value)} characters"
    if isinstance(value, bool | int | float) or value is None:
        text = repr(value)
        return text if len(text) <= 40 else f"a number of {len(text)} digits"
    if isinstance(value, list | tuple):
        return f"a list of {len(value)} items"
    if isinstance(value, dict):
        return f"a mapping of {len(value)} keys"
    return f"a {type(value).__name__}"

"""Control characters in text: finding, escaping and naming them (no pydantic, no Flask: the key
commands of the command line use them without the API's request types, see :mod:`webapi.text`)."""

from __future__ import annotations

import re
import unicodedata

_CONTROLS = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_CONTROLS_BUT_LINE_BREAKS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def control_character(text: str, *, line_breaks: bool = False) -> tuple[int, str] | None:
    """The index and character of the first control character in ``text`` (tab, line feed and carriage
    return allowed when ``line_breaks``), or None."""
    match = (_CONTROLS_BUT_LINE_BREAKS if line_breaks else _CONTROLS).search(text)
    return None if match is None else (match.start(), match.group())


def escape_controls(text: str) -> str:
    """``text`` with each control character written as a Python escape (``\\x1b``): for echoing a
    client's text (a field's name) in an error without passing its control characters on."""
    return _CONTROLS.sub(lambda match: match.group().encode("unicode_escape").decode("ascii"), text)


def describe(char: str) -> str:
    """U+001B, with the character's name when Unicode gives it one."""
    name = unicodedata.name(char, "")
    return f"U+{ord(char):04X}" + (f" ({name})" if name else "")

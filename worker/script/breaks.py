"""Break directives in plain and Markdown scripts: ``<!-- break: 1.5s -->`` or ``<!-- break: 500ms -->``.

A break is silence of exactly that length where it stands, replacing the pause that would fall there. It
may stand on a line of its own (between paragraphs) or inside a paragraph (between sentences or words).
Like the voice directive it is an HTML comment, so a Markdown script still renders cleanly anywhere else.
A comment that starts like a break but is not well formed is an error, never silently skipped.
"""

from __future__ import annotations

import re

from .document import MAX_BREAK_SECONDS, Pause
from .errors import ScriptError

FORM = "write a break as <!-- break: 2s --> or <!-- break: 500ms -->"

_ATTEMPT = re.compile(r"<!--\s*break\s*:", re.IGNORECASE)
# The name part may not contain the comment's end; bounded repetition keeps matching linear.
_BREAK = re.compile(r"<!--\s*break\s*:\s*(?P<value>[0-9]{1,6}(?:\.[0-9]{1,3})?)\s*(?P<unit>ms|s)\s*-->", re.I)


def check_breaks(text: str) -> None:
    """Raise :class:`ScriptError` at the first malformed or out-of-range break comment of ``text``."""
    for match in _ATTEMPT.finditer(text):
        whole = _BREAK.match(text, match.start())
        if whole is None:
            raise ScriptError(FORM, *_position(text, match.start()))
        try:
            seconds(whole)
        except ValueError as exc:
            raise ScriptError(str(exc), *_position(text, match.start())) from exc


def seconds(match: re.Match[str]) -> float:
    """The length a well-formed break asks for; ValueError if it is 0 or above the limit."""
    value = float(match["value"]) / (1000.0 if match["unit"].lower() == "ms" else 1.0)
    if not 0 < value <= MAX_BREAK_SECONDS:
        raise ValueError(f"a break must be longer than 0 s and at most {MAX_BREAK_SECONDS:g} s")
    return value


def split_breaks(text: str) -> list[str | Pause]:
    """``text`` cut at its (well-formed) break comments: the text around them and a :class:`Pause` for
    each. Text without breaks comes back as ``[text]``."""
    parts: list[str | Pause] = []
    position = 0
    for match in _BREAK.finditer(text):
        parts.append(text[position : match.start()])
        parts.append(Pause(seconds(match)))
        position = match.end()
    parts.append(text[position:])
    return [part for part in parts if not isinstance(part, str) or part.strip()]


def break_line(line: str) -> Pause | None:
    """The pause a line holding only a break comment asks for; None for any other line."""
    match = _BREAK.fullmatch(line.strip())
    return None if match is None else Pause(seconds(match))


def _position(text: str, index: int) -> tuple[int, int]:
    before = text[:index]
    line = before.count("\n") + 1
    return line, index - before.rfind("\n")

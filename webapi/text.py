"""The text types of request fields: every free-text field the API accepts is one of these, so a control
character is refused (422 naming the field) in one place rather than view by view.

Control characters are C0 (U+0000-U+001F), DEL (U+007F) and C1 (U+0080-U+009F): none belongs in a title, a
tag or a name, and they are what a terminal or a log viewer acts on. :data:`Line` refuses all of them;
:data:`Lines` lets tab, line feed and carriage return through, for fields whose text is naturally several
lines (a description, a transcript, lexicon text from an XML file). A script body (a job's ``script``,
speech's ``input``, a re-render's ``text``) is neither: the script reader refuses such characters itself,
naming their line and column.

:data:`VoiceName` is a :data:`Line` normalised as stored (models.names) and limited to letters, marks and
digits of any script, space and ``' _ . -``: invisible format characters (zero-width, bidi) are refused,
because they let two names that look the same differ, or one display as another. See docs/api.md.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable
from typing import Annotated

from pydantic import AfterValidator
from pydantic_core import PydanticCustomError

from models.names import MAX_NAME_CHARS, MAX_NAME_KEY_CHARS, voice_name, voice_name_key
from webapi.controls import control_character, describe

_NAME_PUNCTUATION = frozenset(" '_.-")


def _refuse_controls(line_breaks: bool) -> Callable[[str | None], str | None]:
    def check(value: str | None) -> str | None:
        found = None if value is None else control_character(value, line_breaks=line_breaks)
        if found is not None:
            index, char = found
            raise PydanticCustomError(
                "control_character",
                "contains the control character {char} at index {index}; control characters are "
                "refused" + ("" if line_breaks else " (this field is one line)"),
                {"char": describe(char), "index": index},
            )
        return value

    return check


def _voice_name(value: str) -> str:
    name = voice_name(value)
    if not name:
        raise PydanticCustomError("voice_name", "a voice name needs a letter or digit")
    if len(name) > MAX_NAME_CHARS or len(voice_name_key(name)) > MAX_NAME_KEY_CHARS:
        raise PydanticCustomError(
            "voice_name", "a voice name is at most {limit} characters", {"limit": MAX_NAME_CHARS}
        )
    if not unicodedata.category(name[0]).startswith(("L", "N")):
        raise PydanticCustomError("voice_name", "a voice name starts with a letter or digit")
    for index, char in enumerate(name):
        if unicodedata.category(char)[0] not in "LMN" and char not in _NAME_PUNCTUATION:
            raise PydanticCustomError(
                "voice_name",
                "contains {char} at index {index}; a voice name is letters, marks and digits, space and "
                "' _ . - (no invisible or formatting characters)",
                {"char": describe(char), "index": index},
            )
    return name


# The optional forms are their own types (the check around ``str | None``, not ``Line | None``) so that a
# field's max_length still applies to the string itself, with pydantic's own message.
Line = Annotated[str, AfterValidator(_refuse_controls(line_breaks=False))]
Lines = Annotated[str, AfterValidator(_refuse_controls(line_breaks=True))]
OptionalLine = Annotated[str | None, AfterValidator(_refuse_controls(line_breaks=False))]
OptionalLines = Annotated[str | None, AfterValidator(_refuse_controls(line_breaks=True))]
VoiceName = Annotated[str, AfterValidator(_refuse_controls(line_breaks=False)), AfterValidator(_voice_name)]

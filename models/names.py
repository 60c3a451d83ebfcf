"""Voice names as stored and as compared: one rule for every place a name is written or looked up.

A name is stored in NFC with surrounding whitespace trimmed and every inner run of whitespace made one
space, so that what a list shows is what was meant ("Mary  Ann\\n" is "Mary Ann"). Two names are the same
voice when their keys are equal: the stored form case-folded (``str.casefold``, the full Unicode folding:
"Straße" and "STRASSE" are one name) and put back into NFC. The key is at most three times as long as the
name (case folding expands a character into at most three), so a 64-character name has a key of at most
192 characters (:data:`MAX_NAME_KEY_CHARS`).
"""

from __future__ import annotations

import unicodedata

MAX_NAME_CHARS = 64
MAX_NAME_KEY_CHARS = 3 * MAX_NAME_CHARS


def voice_name(text: str) -> str:
    """The name as stored: NFC, trimmed, inner whitespace runs as one space."""
    return " ".join(unicodedata.normalize("NFC", text).split())


def voice_name_key(text: str) -> str:
    """What two names are compared by: equal keys name the same voice of an owner."""
    return unicodedata.normalize("NFC", voice_name(text).casefold())

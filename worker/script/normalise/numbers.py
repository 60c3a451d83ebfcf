"""Numbers in words through num2words, shared by every language module (pure).

Every helper is cached (books repeat the same numbers) and returns None instead of raising when num2words
cannot say a number in a language, so callers can leave the text as written. Integers longer than
:data:`MAX_DIGITS` are read digit by digit: num2words is slow on them, or raises, and nobody reads a
20-digit number as a cardinal anyway.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from functools import lru_cache

from num2words import CONVERTER_CLASSES, num2words

from .base import Fired

# Longer integers are read digit by digit.
MAX_DIGITS = 15
# Languages whose decimal separator is a comma (and whose thousands separator is a dot or a space).
DECIMAL_COMMA = frozenset(
    {"de", "fr", "es", "it", "pt", "nl", "ru", "pl", "cs", "sk", "sl", "da", "no", "sv", "fi", "tr", "ro"}
    | {"uk", "hu", "id", "lt", "lv", "is", "ca", "sr", "be", "kz", "az", "vi", "tg", "ce", "eo", "tet"}
)

# A written number: digits with optional separators between groups ("1,234.5", "1.2.3").
_TOKEN = re.compile(r"(?<![0-9])(?P<sign>(?<![\w\-\u2212.,])[-\u2212])?(?P<digits>[0-9]+(?:[.,][0-9]+)*)")


_GROUPS = re.compile(r"([.,])")


def num2words_languages() -> frozenset[str]:
    """The primary language subtags num2words has a converter for."""
    return frozenset(code for code in CONVERTER_CLASSES if "_" not in code)


@lru_cache(maxsize=8192)
def _words(number: int | Decimal, lang: str, to: str) -> str | None:
    try:
        said = num2words(number, lang=lang, to=to)
    except (
        NotImplementedError,
        ValueError,
        TypeError,
        KeyError,
        IndexError,
        OverflowError,
        InvalidOperation,
    ):
        return None
    return said if isinstance(said, str) and said else None


def digit_words(digits: str, lang: str) -> str | None:
    """Each digit by name: "042" -> "zero four two"."""
    names = [_words(int(d), lang, "cardinal") for d in digits]
    return None if any(name is None for name in names) else " ".join(n for n in names if n)


def cardinal(digits: str, lang: str) -> str | None:
    """An unsigned integer written as ASCII digits; too long ones digit by digit."""
    if len(digits) > MAX_DIGITS:
        return digit_words(digits, lang)
    return _words(int(digits), lang, "cardinal")


def ordinal(digits: str, lang: str) -> str | None:
    """ "21" -> "twenty-first"; too long ones are not ordinals."""
    if len(digits) > MAX_DIGITS:
        return None
    return _words(int(digits), lang, "ordinal")


def year(digits: str, lang: str) -> str | None:
    """ "1984" -> "nineteen eighty-four" (num2words' year reading for the language)."""
    return _words(int(digits), lang, "year")


def negative(words: str, lang: str) -> str:
    """Words for a negative number: num2words' word for minus in that language, before the words."""
    converter = CONVERTER_CLASSES.get(lang)
    sign = getattr(converter, "negword", None)
    sign = sign.strip() if isinstance(sign, str) and sign.strip() else "minus"
    return f"{sign} {words}"


def point_word(lang: str) -> str | None:
    """num2words' word for the decimal point ("point", "Komma"), when the language has a single one."""
    point = getattr(CONVERTER_CLASSES.get(lang), "pointword", None)
    return point if isinstance(point, str) and point else None


def decimal(whole: str, fraction: str, lang: str) -> str | None:
    """A decimal fraction: "3.10" -> "three point one zero".

    Where the language reads the digits after the point one by one (num2words' "point" is one word), we
    do the same ourselves, keeping trailing zeros num2words would drop. Languages that read the fraction
    as a number (Russian "три целых пять десятых") get num2words' own reading, up to MAX_DIGITS digits.
    """
    point = point_word(lang)
    if point is not None or len(whole) > MAX_DIGITS or len(fraction) > MAX_DIGITS:
        head, tail = cardinal(whole, lang), digit_words(fraction, lang)
        if head is None or tail is None:
            return None
        return f"{head} {point or '.'} {tail}"
    return _words(Decimal(f"{whole}.{fraction}"), lang, "cardinal")


def read_number(digits: str, lang: str, decimal_comma: bool) -> tuple[str, str] | None:
    """A written unsigned number with its separators, as (words, rule); None when it is not one number.

    Thousands groups must be exactly three digits ("1,234", in decimal-comma languages "1.234"); one
    decimal separator makes a decimal. Anything else ("1,2,3", "1.2.3") is not one number.
    """
    group, point = (".", ",") if decimal_comma else (",", ".")
    whole, _, fraction = digits.partition(point)
    if not fraction.isdigit() and fraction:
        return None  # "1.2,3", "1.2.3": more than one number
    groups = whole.split(group)
    if len(groups) > 1 and (not 1 <= len(groups[0]) <= 3 or any(len(g) != 3 for g in groups[1:])):
        return None
    whole = "".join(groups)
    if not fraction:
        if len(whole) > 1 and whole.startswith("0") and len(groups) == 1:
            said = digit_words(whole, lang)  # "007": a code, not a quantity
            return None if said is None else (said, "characters")
        said = cardinal(whole, lang)
        rule = "characters" if len(whole) > MAX_DIGITS else "cardinal"
        return None if said is None else (said, rule)
    said = decimal(whole, fraction, lang)
    return None if said is None else (said, "decimal")


def read_numbers(text: str, lang: str, fired: list[Fired]) -> str:
    """Every number in ``text`` in words (cardinals, decimals, negatives); the rest as written.

    A run that is not one number ("1,2,3", "1.2.3") is read group by group with its separators kept.
    """
    decimal_comma = lang in DECIMAL_COMMA

    def one(match: re.Match[str]) -> str:
        written, digits = match.group(0), match.group("digits")
        read = read_number(digits, lang, decimal_comma)
        if read is None:
            said, rule = read_groups(digits, lang), "cardinal"
            if said is None:
                return written
        else:
            said, rule = read
        if match.group("sign"):
            said = negative(said, lang)
        said = pad(match.string, match.start(), match.end(), said)
        fired.append(Fired(rule, written, said.strip()))
        return said

    return _TOKEN.sub(one, text)


def read_groups(digits: str, lang: str) -> str | None:
    """A run of numbers joined by dots and commas, read one by one: "1,2,3" -> "one, two, three",
    "2.0.1" -> "two point zero point one" (a version or section number)."""
    words: list[str] = []
    for part in _GROUPS.split(digits):
        if part == ",":
            words[-1] += ","
        elif part == ".":
            words.append(point_word(lang) or ".")
        else:
            said = (
                cardinal(part, lang)
                if not part.startswith("0") or len(part) == 1
                else digit_words(part, lang)
            )
            if said is None:
                return None
            words.append(said)
    return " ".join(words)


# Symbols that are read as words beside a number ("5%", "$5", "#1", "5°"): as good as letters for spacing.
_WORDY = frozenset("%\u00b0$\u00a3\u20ac\u00a5#")


def pad(text: str, start: int, end: int, said: str) -> str:
    """Spaces around ``said`` where it would run into the letters beside it ("MP3" -> "MP three"), or
    into a symbol that is read as a word ("5%&6" -> "five percent and six")."""
    if start > 0 and (text[start - 1].isalnum() or text[start - 1] in _WORDY):
        said = " " + said
    if end < len(text) and _starts_a_word(text, end):
        said += " "
    return said


def _starts_a_word(text: str, at: int) -> bool:
    """Whether what starts at ``at`` is read as a word: a letter or digit, a wordy symbol, or a sign or
    apostrophe before a digit that the numbers rule reads ("&-5" is "and minus five", "&'80s" "and
    eighties"; not the dash of a range, "200-1000", which follows a letter or digit)."""
    ch = text[at]
    if ch.isalnum() or ch in _WORDY:
        return True
    if ch not in "-\u2212'\u2019" or at + 1 >= len(text) or not text[at + 1].isdigit():
        return False
    before = text[at - 1] if at > 0 else " "
    return not (before.isalnum() or before in "_-\u2212.,'\u2019")

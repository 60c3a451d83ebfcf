"""English readings of one thing each (an address, a telephone number, a date, a time, an amount), shared
by the normaliser and by SSML ``say-as`` (pure)."""

from __future__ import annotations

import re

from .en_tables import CURRENCIES, MONTH_NAMES, MONTHS, SCALES, SYMBOLS
from .numbers import MAX_DIGITS, cardinal, digit_words, ordinal, read_number
from .numbers import year as year_words

LANG = "en"

_DIGIT_GROUPS = re.compile(r"[0-9]+")
_URL_PARTS = re.compile(r"[A-Za-z]+|[0-9]+|.", re.DOTALL)
_OCLOCK = "o'clock"
AMPM = r"[aApP](?:\.[mM]\.|\.[mM](?!\w)|[mM](?!\w))"


def plural(words: str) -> str:
    """The plural of a number's last word: "eighty" -> "eighties", "six" -> "sixes"."""
    if words.endswith("y"):
        return words[:-1] + "ies"
    if words.endswith(("x", "s")):
        return words + "es"
    return words + "s"


def spell_address(address: str) -> str:
    """A web or e-mail address part by part: "www.example.com" -> "w w w dot example dot com"."""
    words: list[str] = []
    for part in _URL_PARTS.findall(address):
        if part.isdigit():
            words.append(digit_words(part, LANG) or part)
        elif part.lower() == "www":
            words.append("w w w")
        elif part.isalpha():
            words.append(part)
        elif part in SYMBOLS:
            words.append(SYMBOLS[part])
        elif not part.isspace():
            words.append(part)
    return " ".join(words)


def say_telephone(written: str) -> str:
    """Digit by digit, the written groups separated by pauses: "+44 20" -> "plus four four, two zero"."""
    groups = [digit_words(g, LANG) or g for g in _DIGIT_GROUPS.findall(written)]
    said = ", ".join(groups)
    return f"plus {said}" if written.lstrip().startswith("+") else said


def say_date(day: int | None, month: int | None, year: str | None, order: str) -> str | None:
    """ "mdy": "March third, twenty twenty"; "dmy": "the third of March, twenty twenty" ("dm": no "the")."""
    if month is not None and not 1 <= month <= 12:
        return None
    if day is not None and not 1 <= day <= 31:
        return None
    said_day = ordinal(str(day), LANG) if day is not None else None
    said_year = year_words(year, LANG) if year is not None else None
    name = MONTH_NAMES[month] if month is not None else None
    if order.startswith("m") or day is None:
        head = " ".join(w for w in (name, said_day) if w)
    else:
        head = f"{'' if order == 'dm' else 'the '}{said_day}" + (f" of {name}" if name else "")
    if said_year is None:
        return head or None
    return f"{head}, {said_year}" if head else said_year


def say_slash_date(a: str, b: str, year: str, region: str | None) -> str | None:
    """Day first unless the region is US or the first number cannot be a day's month partner."""
    first, second = int(a), int(b)
    month_first = (region == "US" or first > 31 or second > 12) and first <= 12
    if month_first:
        return say_date(second, first, year, "mdy")
    return say_date(first, second, year, "dmy")


def say_time(
    hour: str, minute: str | None, second: str | None, ampm: str | None, clock: int | None
) -> str | None:
    """ "10:30" -> "ten thirty", "10:05 am" -> "ten oh five a m", "7 p.m." -> "seven p m".

    ``clock`` 12 or 24 insists on that clock (SSML say-as formats); None accepts what is written.
    """
    h, m, s = int(hour), int(minute or 0), int(second or 0)
    if m > 59 or s > 59 or h > 24 or ((ampm or clock == 12) and not 1 <= h <= 12) or (ampm and clock == 24):
        return None
    said_hour = cardinal(str(h), LANG) or hour
    if minute is None or m == 0:
        words = said_hour if ampm or minute is None else f"{said_hour} {'hundred' if h > 12 else _OCLOCK}"
    elif m < 10:
        words = f"{said_hour} oh {cardinal(str(m), LANG)}"
    else:
        words = f"{said_hour} {cardinal(str(m), LANG)}"
    if second is not None and s:
        words += f" and {cardinal(str(s), LANG)} {'second' if s == 1 else 'seconds'}"
    if ampm:
        words += " a m" if ampm[0] in "aA" else " p m"
    return words


def say_money(amount: str, symbol: str, scale: str | None) -> str | None:
    """ "5.50" -> "five dollars and fifty cents"; "1.2" and "million" -> "one point two million dollars"."""
    one, many, sub_one, sub_many = CURRENCIES[symbol]
    read = read_number(amount, LANG, decimal_comma=False)
    if read is None:
        return None
    whole, _, fraction = amount.replace(",", "").partition(".")
    if scale is not None:
        return f"{read[0]} {SCALES[scale]} {many}"
    if not fraction or sub_many is None or len(fraction) > 2 or len(whole) > MAX_DIGITS:
        return f"{read[0]} {one if amount == '1' else many}"
    cents = int(fraction.ljust(2, "0"))
    said_whole = cardinal(whole.lstrip("0") or "0", LANG)
    said_cents = cardinal(str(cents), LANG)
    major = f"{said_whole} {one if int(whole) == 1 else many}"
    minor = f"{said_cents} {sub_one if cents == 1 else sub_many}"
    if cents == 0:
        return major
    return minor if int(whole) == 0 else f"{major} and {minor}"


# SSML say-as.

_SAY_TIME = re.compile(
    rf"(?P<h>[0-9]{{1,2}})(?::(?P<m>[0-9]{{2}}))?(?::(?P<s>[0-9]{{2}}))?\s*(?P<ap>{AMPM})?"
)
_DATE_PARTS = re.compile(r"[\s,/.\-]+")
_ORDINAL = re.compile(r"(?P<n>[0-9]+(?:,[0-9]{3})*)(?:st|nd|rd|th)?")
_PART_NAMES = {"d": "day", "m": "month", "y": "year"}
_CARDINAL = re.compile(r"(?P<sign>[-\u2212])?(?P<n>[0-9]+(?:[.,][0-9]+)*)")


def say_as(text: str, interpret_as: str, format: str | None, region: str | None) -> str:
    """SSML say-as in English; ValueError saying why when ``text`` cannot be read as ``interpret_as``."""
    stripped = text.strip()
    if not stripped:
        raise ValueError(f"nothing to read as {interpret_as}")
    if interpret_as == "characters":
        return spell_characters(stripped)
    if interpret_as == "cardinal":
        match = _CARDINAL.fullmatch(stripped)
        read = read_number(match.group("n"), LANG, decimal_comma=False) if match else None
        if match is None or read is None:
            raise ValueError(f"{text!r} is not a number")
        digits = match.group("n")
        said = cardinal(digits.lstrip("0") or "0", LANG) if digits.isdigit() else read[0]
        return f"minus {said}" if match.group("sign") else str(said)
    if interpret_as == "ordinal":
        match = _ORDINAL.fullmatch(stripped)
        said = ordinal(match.group("n").replace(",", "").lstrip("0") or "0", LANG) if match else None
        if said is None:
            raise ValueError(f"{text!r} is not an ordinal number")
        return said
    if interpret_as == "telephone":
        if not _DIGIT_GROUPS.search(stripped) or re.search(r"[^0-9\s+().\-]", stripped):
            raise ValueError(f"{text!r} is not a telephone number (digits, spaces, + ( ) . - only)")
        return say_telephone(stripped)
    if interpret_as == "date":
        return _say_as_date(stripped, format, region)
    if interpret_as == "time":
        return _say_as_time(stripped, format)
    raise ValueError(f"unknown say-as interpret-as {interpret_as!r}")


def spell_characters(text: str) -> str:
    """Letter by letter, digit by digit: "AB-12" -> "A B dash one two"."""
    words: list[str] = []
    for char in text:
        if char.isspace():
            continue
        if char in "0123456789":
            words.append(digit_words(char, LANG) or char)
        elif char.isalpha():
            words.append(char.upper())
        else:
            words.append(SYMBOLS.get(char, char))
    return " ".join(words)


def _say_as_date(text: str, format: str | None, region: str | None) -> str:
    fmt = format or _guess_date_format(text, region)
    parts = [p for p in _DATE_PARTS.split(text) if p]
    if fmt is None or len(parts) != len(fmt):
        raise ValueError(f"{text!r} is not a date" + (f" in format {format!r}" if format else ""))
    day: int | None = None
    month: int | None = None
    year: str | None = None
    for letter, part in zip(fmt, parts, strict=True):
        bare = re.sub(r"(?<=[0-9])(?:st|nd|rd|th)\Z", "", part)
        if letter == "m" and bare.lower().rstrip(".") in MONTHS:
            month = MONTHS[bare.lower().rstrip(".")]
        elif not bare.isdigit() or len(bare) > 4:
            raise ValueError(f"{part!r} in {text!r} is not a {_PART_NAMES[letter]}")
        elif letter == "d":
            day = int(bare)
        elif letter == "m":
            month = int(bare)
        else:
            year = bare
    said = say_date(day, month, year, "mdy" if fmt[0] == "m" else "dmy" if "d" in fmt else "mdy")
    if said is None:
        raise ValueError(f"{text!r} is not a valid date (month 1-12, day 1-31)")
    return said


def _guess_date_format(text: str, region: str | None) -> str | None:
    """The written order of a date without a format: ISO, slashes (region decides), or month names."""
    parts = [p for p in _DATE_PARTS.split(text) if p]
    if re.fullmatch(r"[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}", text):
        return "ymd"
    if len(parts) == 3 and all(p.isdigit() for p in parts):
        a, b = int(parts[0]), int(parts[1])
        return "mdy" if (region == "US" or b > 12) and a <= 12 else "dmy"
    names = [i for i, p in enumerate(parts) if p.lower().rstrip(".") in MONTHS]
    if len(names) == 1 and len(parts) in (2, 3):
        return ("mdy" if names[0] == 0 else "dmy")[: len(parts)] if len(parts) == 3 or names[0] == 0 else "dm"
    return None


def _say_as_time(text: str, format: str | None) -> str:
    match = _SAY_TIME.fullmatch(text)
    clock = None if format is None else 12 if format.endswith("12") else 24
    if match is None:
        raise ValueError(f"{text!r} is not a time")
    said = say_time(match.group("h"), match.group("m"), match.group("s"), match.group("ap"), clock)
    if said is None:
        raise ValueError(f"{text!r} is not a valid {clock or ''}{'-hour ' if clock else ''}time")
    return said

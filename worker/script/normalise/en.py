"""English: what a TTS engine should read for numbers, dates, times, money, units, abbreviations, web
addresses and telephone numbers (pure).

One compiled pattern finds every candidate in a single left-to-right pass; its alternatives are tried in
priority order (e-mail, URL, telephone, date, time, currency, number, abbreviation, "&"), and each match
is handed to the method for its kind, which may look at a few words either side (bounded windows: the
pass stays linear in the text). Every alternative that scans a run of characters starts only at the
beginning of that run (a look-behind), so no run is scanned from each of its positions. A candidate a
rule cannot read is left as written (or only its numbers are read), so words are never dropped.

Numbers come from num2words (British style: "one hundred and one"; spelling to match: "metres").
Context settles what is ambiguous: a four-digit number is a year or a count, "Dr." Doctor or Drive, a
Roman numeral a number only in a heading, leading zeros a code unless in a heading's number, a slashed
date day first unless the region is US. See docs/scripts.md, "Normalisation" (each heuristic).
"""

from __future__ import annotations

import re

from .base import Fired, Normalised
from .en_say import (
    AMPM,
    plural,
    say_as,
    say_date,
    say_money,
    say_slash_date,
    say_telephone,
    say_time,
    spell_address,
)
from .en_tables import (
    ABBREVIATIONS,
    CARDINAL_BEFORE,
    CHAPTER_WORDS,
    MONTHS,
    SENTENCE_STARTERS,
    UNITS,
    YEAR_AFTER,
    YEAR_BEFORE,
)
from .numbers import cardinal, ordinal, pad, read_groups, read_number, read_numbers
from .numbers import year as year_words

LANG = "en"

_MONTH = (
    r"(?:January|February|March|April|May|June|July|August|September|October|November|December"
    r"|(?:Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sept|Sep|Oct|Nov|Dec)\.?)"
)
_UNIT = "|".join(re.escape(u) for u in UNITS)
_TLD = r"(?:com|org|net|edu|gov|io|co|uk|de|fr|info|biz|ai|dev|app|us|ca|au|eu)"
# A written number run, from its first digit (never from inside one).
_RUN = r"[0-9]+(?:[.,][0-9]+)*"

_COMMON = [
    # jane.doe@example.org
    r"(?P<email>(?<![\w.%+\-])[\w.%+\-]+@(?:[A-Za-z0-9\-]+\.)+[A-Za-z0-9]+(?![\w]))",
    # https://..., www...., example.com/path
    r"(?P<url>(?<![\w@.\-/])(?:(?:https?|ftp)://|www\.)[^\s<>\"]+"
    rf"|(?<![\w@.\-/])(?:[A-Za-z0-9\-]+\.)+{_TLD}(?![\w\-])(?:/[^\s<>\"]*)?)",
    # +44 20 7946 0958, (555) 123-4567, 1-800-555-1234, 020 7946 0958, 555-1234
    r"(?P<phone>(?<![\w+])\+[0-9]{1,3}+(?:[ .\-]?+\(?+[0-9]++\)?+)++"
    r"|(?<![\w+\-.])(?:1[ .\-])?(?:\([0-9]{3}\)\s?|[0-9]{3}[\-. ])[0-9]{3}[\-. ][0-9]{4}(?![0-9])"
    r"|(?<![\w+\-.,])0[0-9]{2,4}[ \-][0-9]{3,4}(?:[ \-][0-9]{3,4})?(?![0-9])"
    r"|(?<![\w+\-.,])[0-9]{3}-[0-9]{4}(?![0-9\-]))",
    # 2020-03-03, 03/03/2020, March 3, 2020, 3 March 2020, the 3rd of March
    r"(?P<date>(?<![\w\-])(?P<iy>[0-9]{4})-(?P<im>[0-9]{2})-(?P<id>[0-9]{2})(?![\w\-])"
    r"|(?<![\w/.])(?P<sa>[0-9]{1,2})/(?P<sb>[0-9]{1,2})/(?P<sy>[0-9]{4}|[0-9]{2})(?![\w/])"
    rf"|\b(?P<m1>{_MONTH})\s+(?P<d1>[0-9]{{1,2}})(?:st|nd|rd|th)?(?![\w])(?:,?\s+(?P<y1>[0-9]{{4}})(?![\w]))?"
    rf"|(?<![\w.,])(?P<d2>[0-9]{{1,2}})(?:st|nd|rd|th)?\s+(?P<of>of\s+)?(?P<m2>{_MONTH})(?![\w])"
    r"(?:,?\s+(?P<y2>[0-9]{4})(?![\w]))?)",
    # 10:30, 10:30:15, 10:30 am, 7 p.m.
    r"(?P<time>(?<![\w:.,])(?P<hh>[0-9]{1,2}):(?P<mm>[0-9]{2})(?::(?P<ss>[0-9]{2}))?"
    rf"(?:\s?(?P<ap>{AMPM})|(?![0-9:]))"
    rf"|(?<![\w:.,])(?P<hour>[0-9]{{1,2}})\s?(?P<ap2>{AMPM}))",
    # $5, £5.50, €1.2 million, -$3, 50¢
    r"(?P<currency>(?<![\w$£€¥])(?P<csign>[\-\u2212])?(?P<csym>[$£€¥])\s?(?P<camount>" + _RUN + ")"
    r"(?:\s?(?P<cscale>(?i:thousand|million|billion|trillion|bn|m|k|b))(?![\w]))?"
    r"|(?<![\w.,])(?P<cents>[0-9]+)¢)",
    # -5, #1, '80s, 1,234.5, 21st, 1900s, 5 km, 20%
    r"(?P<number>(?<![0-9])(?P<sign>(?<![\w\-\u2212.,])[\-\u2212](?=[0-9]))?(?P<hash>(?<![\w#])#(?=[0-9]))?"
    r"(?P<apos>(?<![\w'\u2019])['\u2019](?=[0-9]0s(?![\w])))?(?P<digits>" + _RUN + ")"
    r"(?P<suffix>(?:st|nd|rd|th)(?![\w])|['\u2019]?s(?![\w]))?"
    rf"(?P<unit>\s?(?:{_UNIT})(?![\w]))?)",
    # Dr. Smith, etc., e.g., No. 5
    r"(?P<abbr>(?<![\w.])(?:[eE]\.g\.|[iI]\.e\.|(?:vs|Mrs|Mr|Ms|Dr|St)(?:\.|(?![\w]))"
    r"|(?:etc|Prof|Jr|Sr|Mt|Ave|Rd|approx|Fig|Vol|Capt|Lt|Sgt|Col|Gen|Rev|Hon|Inc|Ltd)\."
    r"|(?:Nos|No|pp|p)\.(?=\s?[0-9])))",
    # Smith & Wesson; also beside what becomes words ("5%&6", "6&$5"), so that normalising is idempotent
    r"(?P<amp>(?<=[\w%\u00b0$\u00a3\u20ac\u00a5#])\s*&\s*(?=[\w$\u00a3\u20ac\u00a5#]|[\-\u2212'\u2019][0-9]))",
    # "3@4", "x@5" that is no e-mail address (which came first): "at", for the same reason as "&"
    r"(?P<at>(?<=[\w%\u00b0$\u00a3\u20ac\u00a5#])\s*@\s*(?=[\w$\u00a3\u20ac\u00a5#]|[\-\u2212'\u2019][0-9]))",
]
_ROMAN = (
    r"(?P<roman>(?P<rkey>\b(?i:chapter|part|book|volume|vol\.|section|act|scene|canto|appendix)\s+)"
    r"(?P<rnum>[IVXLCDM]+)(?![\w'\u2019])"
    r"|\A(?P<rlead>\s*)(?P<rsolo>[IVXLCDM]+)(?=[.:]?\s*\Z|[.:]\s))"
)
_BODY = re.compile("|".join(_COMMON))
_HEADING = re.compile("|".join([_ROMAN, *_COMMON]))

_VALID_ROMAN = re.compile(r"M{0,3}(?:CM|CD|D?C{0,3})(?:XC|XL|L?X{0,3})(?:IX|IV|V?I{0,3})")
_ROMAN_VALUES = {"I": 1, "V": 5, "X": 10, "L": 50, "C": 100, "D": 500, "M": 1000}
_PREV = re.compile(r"([A-Za-z][\w.'\u2019]*)\s+\Z")
_NEXT = re.compile(r"\s+([A-Za-z][\w.'\u2019\-]*)")
_AT_END = re.compile(r"[\s\"'\u2019\u201d)\]}]*\Z")
_DIGIT_GROUPS = re.compile(r"[0-9]+")
_URL_PARTS = re.compile(r"[A-Za-z]+|[0-9]+|.", re.DOTALL)
_SCHEME = re.compile(r"\A(?:https?|ftp)://", re.IGNORECASE)
_TRAILING = ".,;:!?'\"\u2019\u201d)]}"
_WINDOW = 40
# "6 ft 2 in", "8 x 10 in" / "10 in x 8": where "in" after a number is inches.
_AFTER_FEET = re.compile(r"(?:ft\.?|feet|foot|'|\u2019|[0-9]\s*(?:x|\u00d7|by))\s*\Z")
_BEFORE_BY = re.compile(r"\s*(?:x|\u00d7|by)\s*[0-9]")


class English:
    """The :class:`~.base.Rules` of English (``en``, any region)."""

    def normalise(self, text: str, *, heading: bool, region: str | None) -> Normalised:
        reader = _Reader(text, heading, region)
        return Normalised((_HEADING if heading else _BODY).sub(reader, text), tuple(reader.fired))

    def say_as(self, text: str, interpret_as: str, format: str | None, region: str | None) -> str:
        return say_as(text, interpret_as, format, region)


class _Reader:
    """Reads one text: called on each match of the pattern, records what fired."""

    def __init__(self, text: str, heading: bool, region: str | None) -> None:
        self.text = text
        self.heading = heading
        self.region = region
        self.fired: list[Fired] = []

    def __call__(self, match: re.Match[str]) -> str:
        kind = match.lastgroup or ""
        said: str | tuple[str, str, str] | None
        try:
            said = getattr(self, f"_{kind}")(match)
        except Exception:
            said = None  # a rule that cannot read this leaves it as written: a rule never fails a book
        written = match.group(0)
        if said is None:
            return written
        if isinstance(said, tuple):  # (rule, spoken, kept): kept is written text that stays after it
            rule, spoken, kept = said
        else:
            rule, spoken, kept = kind, said, ""
        if rule:  # numbers_only records its own
            self.fired.append(Fired(rule, written[: len(written) - len(kept)].strip(), spoken.strip()))
        return pad(self.text, match.start(), match.end() - len(kept), spoken) + kept

    # Context, in bounded windows either side of a match.

    def prev_word(self, start: int) -> str | None:
        found = _PREV.search(self.text, max(0, start - _WINDOW), start)
        return found.group(1) if found else None

    def next_word(self, end: int) -> str | None:
        found = _NEXT.match(self.text, end, end + _WINDOW)
        return found.group(1) if found else None

    def at_end(self, end: int) -> bool:
        """Only spaces, closing quotes and brackets follow: a full stop before ``end`` ends the sentence."""
        return len(self.text) - end <= _WINDOW and _AT_END.match(self.text, end) is not None

    def full_stop(self, written: str, end: int) -> str:
        """The full stop to keep after an expansion of ``written`` when it also ended the sentence."""
        return "." if written.endswith(".") and self.at_end(end) else ""

    # One method per alternative of the pattern.

    def _roman(self, match: re.Match[str]) -> str | None:
        numeral = match.group("rnum") or match.group("rsolo")
        if not _VALID_ROMAN.fullmatch(numeral) or numeral in ("L", "C", "D", "M"):
            return None
        value = _roman_value(numeral)
        said = cardinal(str(value), LANG)
        if said is None:
            return None
        return f"{match.group('rkey') or match.group('rlead') or ''}{said}"

    def _email(self, match: re.Match[str]) -> str:
        return spell_address(match.group(0))

    def _url(self, match: re.Match[str]) -> tuple[str, str, str]:
        written = match.group(0)
        url = written.rstrip(_TRAILING)
        return "url", spell_address(_SCHEME.sub("", url).rstrip("/")), written[len(url) :]

    def _phone(self, match: re.Match[str]) -> str | tuple[str, str, str] | None:
        written = match.group(0)
        digits = sum(len(g) for g in _DIGIT_GROUPS.findall(written))
        local = re.fullmatch(r"[0-9]{3}-[0-9]{4}", written) is not None
        if not 7 <= digits <= 15 or (
            local and (self.prev_word(match.start()) or "").lower() not in _PHONE_WORDS
        ):
            return self.numbers_only(written)
        return "telephone", say_telephone(written), ""

    def _date(self, match: re.Match[str]) -> str | tuple[str, str, str] | None:
        g = match.group
        prev = (self.prev_word(match.start()) or "").lower()
        if g("iy"):
            said = say_date(int(g("id")), int(g("im")), g("iy"), "mdy" if self.region == "US" else "dmy")
        elif g("sa"):
            said = say_slash_date(g("sa"), g("sb"), g("sy"), self.region)
        elif g("m1"):
            said = say_date(int(g("d1")), MONTHS[g("m1").rstrip(".").lower()], g("y1"), "mdy")
        else:
            order = "dm" if prev == "the" else "dmy"
            said = say_date(int(g("d2")), MONTHS[g("m2").rstrip(".").lower()], g("y2"), order)
        if said is None:
            return self.numbers_only(match.group(0))
        return "date", said + self.full_stop(match.group(0), match.end()), ""

    def _time(self, match: re.Match[str]) -> str | tuple[str, str, str] | None:
        g = match.group
        written = match.group(0)
        said = say_time(g("hh") or g("hour"), g("mm"), g("ss"), g("ap") or g("ap2"), None)
        if said is None:
            return self.numbers_only(written)
        return "time", said + self.full_stop(written, match.end()), ""

    def _currency(self, match: re.Match[str]) -> str | tuple[str, str, str] | None:
        g = match.group
        if g("cents"):
            said = cardinal(g("cents"), LANG)
            return None if said is None else f"{said} {'cent' if g('cents') == '1' else 'cents'}"
        said = say_money(g("camount"), g("csym"), (g("cscale") or "").lower() or None)
        if said is None:
            return self.numbers_only(match.group(0))
        return f"minus {said}" if g("csign") else said

    def _number(self, match: re.Match[str]) -> tuple[str, str, str] | None:
        g = match.group
        digits, suffix, unit = g("digits"), (g("suffix") or "").lstrip("'\u2019"), g("unit") or ""
        start, end = match.start(), match.end()
        plain = digits.isdigit()
        prev = self.prev_word(start)
        said: str | None
        rule = "cardinal"
        if suffix and suffix != "s" and plain:
            said, rule = ordinal(digits, LANG), "ordinal"
        elif suffix == "s" and plain:
            said, rule = self.plural_number(digits)
        elif plain and (
            (prev is not None and prev.lower() in CHAPTER_WORDS)
            or (self.heading and not self.text[:start].strip())
            or g("hash")
        ):
            said = cardinal(digits.lstrip("0") or "0", LANG)  # "Chapter 01": never "zero one"
        elif plain and not (g("sign") or unit) and self.is_year(digits, start, end):
            said, rule = year_words(digits, LANG), "year"
        else:
            read = read_number(digits, LANG, decimal_comma=False)
            said, rule = read if read is not None else (read_groups(digits, LANG), "cardinal")
        if said is None:
            return None
        if g("sign"):
            said = f"minus {said}"
        if g("hash"):
            said = f"number {said}"
        kept = ""
        if unit:
            name = self.unit_name(unit, digits, start, end)
            if name is None or suffix:
                kept = unit
            else:
                said, rule = f"{said} {name}", "percent" if unit.strip() == "%" else "unit"
        return rule, said, kept

    def _abbr(self, match: re.Match[str]) -> tuple[str, str, str] | None:
        written = match.group(0)
        key = written.rstrip(".")
        key = key.lower() if key.lower() in ("e.g", "i.e") else key
        start, end = match.start(), match.end()
        nxt, prev = self.next_word(end), self.prev_word(start)
        name_follows = nxt is not None and nxt[0].isupper() and nxt not in SENTENCE_STARTERS
        after_name = prev is not None and (prev[0].isupper() or prev[0].isdigit())
        if key in ("Dr", "St"):
            if name_follows and (written.endswith(".") or self.text[end : end + 1] == " "):
                said = "Doctor" if key == "Dr" else "Saint"
            elif after_name or (key == "St" and written.endswith(".")):
                said = "Drive" if key == "Dr" else "Street"
            else:
                return None
        elif not written.endswith(".") and key != "vs" and not name_follows:
            return None  # "Mr" without a full stop and no name after it: a word, not a title
        else:
            said = ABBREVIATIONS[key]
        # The full stop also ends the sentence at the end of the text, and before a capitalised word
        # when the expansion is not a title ("Elm Drive. The house", "et cetera. Then").
        stop = self.full_stop(written, end)
        if (
            not stop
            and written.endswith(".")
            and said not in _TITLES
            and nxt is not None
            and nxt[0].isupper()
        ):
            stop = "." if self.text[end : end + 1].isspace() else ""
        return "abbreviation", said + stop, ""

    def _amp(self, match: re.Match[str]) -> tuple[str, str, str]:
        return "abbreviation", "and", ""

    def _at(self, match: re.Match[str]) -> tuple[str, str, str]:
        return "abbreviation", "at", ""

    # Helpers for the numbers rule.

    def numbers_only(self, written: str) -> tuple[str, str, str] | None:
        """Only the numbers of a candidate a rule could not read ("2020-13-45"), the rest as written."""
        inner: list[Fired] = []
        said = read_numbers(written, LANG, inner)
        if not inner:
            return None
        self.fired.extend(inner)
        return "", said, ""

    def is_year(self, digits: str, start: int, end: int) -> bool:
        if len(digits) != 4 or not 1000 <= int(digits) <= 2099:
            return False
        prev, nxt = self.prev_word(start), self.next_word(end)
        if nxt is not None and nxt.lower() in YEAR_AFTER:
            return True
        if prev is not None and prev.lower() in CARDINAL_BEFORE:
            return False
        if prev is not None and prev.lower() in YEAR_BEFORE:
            return True
        following = self.text[end : end + 2]
        return not (nxt is not None and nxt[0].islower() and following[:1].isspace())

    def plural_number(self, digits: str) -> tuple[str | None, str]:
        """ "1900s" -> "nineteen hundreds", "80s" -> "eighties", "7s" -> "sevens"."""
        decade = len(digits) == 4 and 1000 <= int(digits) <= 2099
        said = year_words(digits, LANG) if decade else cardinal(digits, LANG)
        return (None if said is None else plural(said)), "year" if decade else "cardinal"

    def unit_name(self, unit: str, digits: str, start: int, end: int) -> str | None:
        symbol = unit.strip()
        if symbol == "in" and not self.inches(unit, start, end):
            return None
        singular, plural_name = UNITS[symbol]
        return singular if digits == "1" else plural_name

    def inches(self, unit: str, start: int, end: int) -> bool:
        """ "in" after a number is inches only when it clearly is: "12in", "6 ft 2 in", "8 x 10 in"."""
        if unit != "in" and not unit.endswith(" in"):
            return True
        if unit == "in":
            return True  # glued: "12in"
        before = self.text[max(0, start - 16) : start]
        after = self.text[end : end + 16]
        return _AFTER_FEET.search(before) is not None or _BEFORE_BY.match(after) is not None


# Expansions that come before a name or number: their full stop never ends a sentence.
_TITLES = frozenset(
    {"Doctor", "Saint", "Mister", "Missus", "Miz", "Professor", "number", "numbers", "Mount", "Figure"}
    | {"Volume", "pages", "page", "Captain", "Lieutenant", "Sergeant", "Colonel", "General", "Reverend"}
    | {"Honourable", "for example", "that is", "versus"}
)
_PHONE_WORDS = frozenset(
    ["call", "dial", "phone", "telephone", "tel", "tel.", "fax", "number", "no.", "at", "is", "on"]
)


def _roman_value(numeral: str) -> int:
    values = [_ROMAN_VALUES[c] for c in numeral]
    return sum(-v if i + 1 < len(values) and v < values[i + 1] else v for i, v in enumerate(values))

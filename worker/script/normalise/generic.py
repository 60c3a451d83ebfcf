"""Numbers only, for every language num2words knows and Tome has no rules of its own for (pure).

What these languages get: cardinals with the language's separators ("1.234,5" in German, "1,234.5"
elsewhere: :data:`~.numbers.DECIMAL_COMMA`), decimals, negative numbers, and amounts in €, $ and £
where num2words has the currency for the language. Ordinals, years, dates, times and units are
written the same way as cardinals in too many of these languages ("3." is German for "third", and
also a sentence end), so they are left to the numbers inside them.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from num2words import CONVERTER_CLASSES, num2words

from .base import Fired, Normalised
from .numbers import DECIMAL_COMMA, cardinal, digit_words, ordinal, pad, read_number, read_numbers

_CURRENCIES = {"€": "EUR", "$": "USD", "£": "GBP"}
# "€5", "5 €", "5,50 €": the symbol on either side of the amount.
_AMOUNT = re.compile(
    r"(?<![\w€$£])(?P<before>[€$£])\s?(?P<a>[0-9]+(?:[.,][0-9]+)*)(?![0-9])"
    r"|(?<![\w.,])(?P<b>[0-9]+(?:[.,][0-9]+)*)\s?(?P<after>[€$£])"
)
_DIGITS = re.compile(r"[0-9]+")


class NumbersOnly:
    """The :class:`~.base.Rules` of a language num2words can say numbers in."""

    def __init__(self, lang: str) -> None:
        self.lang = lang

    def normalise(self, text: str, *, heading: bool, region: str | None) -> Normalised:
        fired: list[Fired] = []
        text = _AMOUNT.sub(lambda m: self._amount(m, fired), text)
        return Normalised(read_numbers(text, self.lang, fired), tuple(fired))

    def _amount(self, match: re.Match[str], fired: list[Fired]) -> str:
        written = match.group(0)
        amount = match.group("a") or match.group("b")
        code = _CURRENCIES[match.group("before") or match.group("after")]
        comma = self.lang in DECIMAL_COMMA
        if read_number(amount, self.lang, comma) is None:
            return written
        plain = amount.replace("." if comma else ",", "").replace(",", ".")
        try:
            if "." in plain:
                said = num2words(Decimal(plain), lang=self.lang, to="currency", currency=code)
            else:
                # Whole amounts: num2words would add "and zero cents"; its own currency name instead.
                converter = CONVERTER_CLASSES[self.lang]
                forms = converter.CURRENCY_FORMS[code][0]
                said = f"{cardinal(plain, self.lang)} {converter.pluralize(int(plain), forms)}"
        except (NotImplementedError, ValueError, TypeError, KeyError, InvalidOperation, AttributeError):
            return written  # the numbers pass reads the amount; the symbol stays
        if not isinstance(said, str) or any(c.isdigit() for c in said):
            return written
        said = pad(match.string, match.start(), match.end(), said)
        fired.append(Fired("currency", written, said.strip()))
        return said

    def say_as(self, text: str, interpret_as: str, format: str | None, region: str | None) -> str:
        """characters, cardinal, ordinal and telephone through num2words; dates and times have no rules
        here, so their numbers are read as cardinals, in the order written."""
        stripped = text.strip()
        if interpret_as == "characters":
            return " ".join(
                digit_words(c, self.lang) or c if c.isdigit() else c for c in stripped if c.strip()
            )
        if interpret_as in ("cardinal", "ordinal"):
            digits = stripped.lstrip("-\u2212")
            if not digits or _DIGITS.fullmatch(digits) is None:
                read = read_number(digits, self.lang, self.lang in DECIMAL_COMMA) if digits else None
                if interpret_as == "ordinal" or read is None:
                    raise ValueError(f"not a number: {text!r}")
                said: str | None = read[0]
            else:
                said = (ordinal if interpret_as == "ordinal" else cardinal)(digits, self.lang)
            if said is None:
                raise ValueError(f"num2words cannot say {text!r} as {interpret_as} in {self.lang!r}")
            return said if digits == stripped else read_numbers(stripped, self.lang, [])
        if interpret_as == "telephone":
            groups = _DIGITS.findall(stripped)
            if not groups:
                raise ValueError(f"no digits in telephone number {text!r}")
            return ", ".join(digit_words(g, self.lang) or g for g in groups)
        if interpret_as in ("date", "time"):
            if not _DIGITS.search(stripped):
                raise ValueError(f"no numbers in {interpret_as} {text!r}")
            return read_numbers(stripped, self.lang, [])
        raise ValueError(f"unknown say-as interpret-as {interpret_as!r}")

"""Text normalisation: what a TTS engine should read for the numbers, dates, abbreviations... of book text.

Pure (no framework imports). :func:`normalise` rewrites a sentence or paragraph and says what it
rewrote; :func:`say_as` reads one piece of text the way SSML ``say-as`` asks. Each language's rules are
one module behind :class:`~.base.Rules`, looked up by the primary subtag of the language code
("en-GB" -> "en"):

- ``en`` (:mod:`.en`): cardinals, decimals, negatives, ordinals, years and decades, currencies, percent,
  dates, times, units, abbreviations, Roman numerals in headings, URLs, e-mail addresses, telephone
  numbers, "&" and "#1".
- every other language num2words knows (:func:`supported_languages`; :mod:`.generic`): cardinals,
  decimals, negatives and €/$/£ amounts.
- anything else: the text passes through unchanged, nothing fired.

Adding a language: a module with a class following :class:`~.base.Rules`, and one line in ``_RULES``.
"""

from __future__ import annotations

import re
from functools import lru_cache

from .base import Fired, Normalised, Rules
from .en import English
from .generic import NumbersOnly
from .numbers import num2words_languages

__all__ = ["Fired", "Normalised", "normalise", "say_as", "supported_languages"]

# Languages with rules of their own; the rest of num2words' languages get NumbersOnly.
_RULES: dict[str, Rules] = {"en": English()}
_SUBTAGS = re.compile(r"[-_]")


def supported_languages() -> frozenset[str]:
    """Primary language subtags that get any normalisation (English's full rules, or numbers only)."""
    return frozenset(_RULES) | num2words_languages()


def normalise(text: str, language: str = "en", *, heading: bool = False) -> Normalised:
    """``text`` as an engine should read it in ``language`` (BCP-47: "en", "en-GB", "de"); never raises.

    ``heading``: the text is a heading (Roman numerals after "Chapter" and the like are read as numbers).
    """
    found = _rules(language)
    if found is None or not text:
        return Normalised(text, ())
    rules, region = found
    result = rules.normalise(text, heading=heading, region=region)
    # What one reading writes can still hold something a rule reads ("0@.@0.0": the numbers read
    # first, an address appears): read again until nothing changes, so the engine never gets text that
    # would be read differently once more. Ordinary text settles in one more reading (a cheap no-op).
    for _ in range(_MAX_READINGS - 1):
        again = rules.normalise(result.text, heading=heading, region=region)
        if again.text == result.text:
            break
        result = Normalised(again.text, result.fired + again.fired)
    return result


_MAX_READINGS = 4


def say_as(text: str, interpret_as: str, format: str | None, language: str = "en") -> str:
    """``text`` read as SSML ``say-as`` ``interpret_as`` (characters, cardinal, ordinal, date, time,
    telephone) with its ``format`` (dates: mdy, dmy, ymd, md, dm, ym, my, y, m, d; times: hms12, hms24,
    hm12, hm24, h12, h24 or None); ValueError with the reason when the text cannot be read that way.
    In a language without rules, characters are spelled as written and anything else is refused."""
    found = _rules(language)
    if found is None:
        if interpret_as == "characters" and text.strip():
            return " ".join(c for c in text if not c.isspace())
        raise ValueError(f"no say-as rules for language {language!r}")
    rules, region = found
    return rules.say_as(text, interpret_as, format, region)


def _rules(language: str) -> tuple[Rules, str | None] | None:
    """The rules for a language code and its region subtag ("en-us" -> English, "US")."""
    subtags = _SUBTAGS.split(language.strip())
    region = next((s.upper() for s in subtags[1:] if len(s) == 2 and s.isalpha()), None)
    rules = _language_rules(subtags[0].lower())
    return None if rules is None else (rules, region)


@lru_cache(maxsize=128)
def _language_rules(primary: str) -> Rules | None:
    if primary in _RULES:
        return _RULES[primary]
    return NumbersOnly(primary) if primary in num2words_languages() else None

"""Quotations in a paragraph: where its dialogue is (pure; time linear in the paragraph's length).

Marks understood: “…” (English), „…“ and „…” (German, Polish...), «…» and »…« (French, German,
Russian...), ‹…›, straight "…", and single quotes ‘…’ / '…' told apart from apostrophes (don't, the dogs'
bone, 'tis, the '90s). In the languages that set dialogue with dashes (Spanish, Russian, Polish...), a
paragraph that opens with a dash is speech up to the next dash that opens a narrator's comment, and again
after the dash that closes it (``—¿Vienes? —preguntó Juan—. Te espero.``).

Quotes nested in a quotation stay inside it (they are part of what its speaker says). A quotation left
open at the paragraph's end runs to the end (the English convention for a speech that goes on in the
next paragraph). Whether a quotation is dialogue or a scare quote or a title is decided by
:mod:`worker.script.attribution`, which sees the words around it.
"""

from __future__ import annotations

from dataclasses import dataclass

# Opening marks that have one closing mark of their own, and the marks that close them.
_PAIRED = {
    "\u201c": "\u201d",  # “ ”
    "\u201e": "\u201c\u201d",  # „ “ (German) or „ ” (Polish, Hungarian...)
    "\u00ab": "\u00bb",  # « »
    "\u00bb": "\u00ab",  # » « (German)
    "\u2039": "\u203a",  # ‹ ›
}
_SINGLE = "\u2018\u2019'"  # ‘ ’ '
_DASHES = "\u2014\u2015\u2013"  # em dash, horizontal bar, en dash
# Characters after which a mark opens a quotation (rather than closing one or being an apostrophe).
_BEFORE_OPENER = frozenset(' \t\n([{\u2014\u2013\u2015-/"\u201c\u201e\u00ab\u2039:;')
# Punctuation that, just before a single closing mark, says it closes a quotation.
_CLOSING_PUNCTUATION = frozenset(".,!?;:\u2026\u2014\u2013-")
# Words an apostrophe starts ('tis, 'em): never a quotation's opening mark.
_ELISIONS = ("tis", "twas", "twere", "twill", "twould", "em", "n ", "cause ", "til ", "bout ", "cos ")
# Languages whose dialogue is set with dashes (primary subtags).
DASH_LANGUAGES = frozenset(
    {
        "es",
        "ca",
        "gl",
        "pt",
        "it",
        "fr",
        "ru",
        "uk",
        "be",
        "bg",
        "pl",
        "cs",
        "sk",
        "sl",
        "hr",
        "sr",
        "sv",
        "fi",
    }
)
DASH_LANGUAGES |= {"et", "lt", "lv", "hu", "ro", "el", "tr", "eu"}


@dataclass(frozen=True)
class Quote:
    """One quotation in a paragraph: ``start``/``end`` span it with its marks (``end`` is exclusive),
    ``inner_start``/``inner_end`` its words. ``closed`` is False for one that runs to the paragraph's
    end; ``dash`` marks dash-set dialogue (whose closing dash belongs to the narrator's comment)."""

    start: int
    end: int
    inner_start: int
    inner_end: int
    closed: bool = True
    dash: bool = False

    def inner(self, text: str) -> str:
        return text[self.inner_start : self.inner_end].strip()


def primary_language(language: str) -> str:
    return language.strip().lower().replace("_", "-").split("-", 1)[0]


def find_quotes(text: str, language: str = "en") -> list[Quote]:
    """The quotations of one paragraph, in order, without overlaps. Quotations with no letter or digit
    inside (``""``, a run of marks) are left out."""
    if primary_language(language) in DASH_LANGUAGES:
        lead = len(text) - len(text.lstrip())
        if lead < len(text) and text[lead] in _DASHES:
            return _dash_quotes(text, lead)
    return [quote for quote in _mark_quotes(text) if _has_words(text, quote)]


def _has_words(text: str, quote: Quote) -> bool:
    return any(character.isalnum() for character in text[quote.inner_start : quote.inner_end])


def _mark_quotes(text: str) -> list[Quote]:
    quotes: list[Quote] = []
    singles: _SingleQuotes | None = None
    n = len(text)
    i = 0
    while i < n:
        character = text[i]
        closer = -1
        if character in _PAIRED and _opens(text, i):
            closer = _find_any(text, _PAIRED[character], i + 1)
        elif character == '"' and _opens(text, i):
            closer = text.find('"', i + 1)
        elif character in "\u2018'" and _opens(text, i) and not _elided(text, i):
            singles = singles or _SingleQuotes(text)
            closer = singles.closer(i)
            if closer < 0:  # an apostrophe after all
                i += 1
                continue
        else:
            i += 1
            continue
        if closer < 0:  # open to the paragraph's end
            quotes.append(Quote(i, n, i + 1, n, closed=False))
            break
        if _words_between(text, i + 1, closer):
            quotes.append(Quote(i, closer + 1, i + 1, closer))
        i = closer + 1
    return quotes


def _words_between(text: str, start: int, end: int) -> bool:
    return any(text[index].isalnum() for index in range(start, end))


def _opens(text: str, i: int) -> bool:
    """A mark at ``i`` can open a quotation: it starts the text or follows a space or an opening mark,
    and words follow it (French sets a space inside « and ‹)."""
    if i + 1 >= len(text) or (text[i + 1].isspace() and text[i] not in "\u00ab\u2039"):
        return False
    return i == 0 or text[i - 1] in _BEFORE_OPENER


def _elided(text: str, i: int) -> bool:
    """The apostrophe at ``i`` stands for letters left out ('tis, 'em, the '90s)."""
    after = text[i + 1 : i + 8].lower()
    if after[:1].isdigit():
        return True
    return any(
        after.startswith(word) and not after[len(word) : len(word) + 1].isalpha() for word in _ELISIONS
    )


def _find_any(text: str, marks: str, start: int) -> int:
    """The first of ``marks`` at or after ``start``, -1 if none (one pass: each ``find`` of a mark that
    is absent would read to the end every time)."""
    if len(marks) == 1:
        return text.find(marks, start)
    for index in range(start, len(text)):
        if text[index] in marks:
            return index
    return -1


class _SingleQuotes:
    """Where single quotations close, found once for the whole paragraph (so that finding each one is
    constant time). A closing mark follows a non-space and is followed by no letter or digit; it is
    strong when punctuation is just before it (``away,’``) or after it (``’.``), weak otherwise (a plural
    possessive: ``the dogs’ bone``). A quotation closes at the first strong mark before the next opening
    one, else at the last weak mark there."""

    def __init__(self, text: str) -> None:
        n = len(text)
        self.n = n
        strong = [n] * (n + 1)  # next strong closing mark at or after i
        opener = [n] * (n + 1)  # next opening single mark at or after i
        weak = [-1] * (n + 1)  # last weak closing mark at or before i
        for i in range(n - 1, -1, -1):
            strong[i], opener[i] = strong[i + 1], opener[i + 1]
            if text[i] not in _SINGLE:
                continue
            if _closes(text, i) and _strong(text, i):
                strong[i] = i
            if text[i] in "\u2018'" and _opens(text, i) and not _elided(text, i):
                opener[i] = i
        last = -1
        for i in range(n):
            if text[i] in _SINGLE and _closes(text, i) and not _strong(text, i):
                last = i
            weak[i] = last
        self.strong, self.opener, self.weak = strong, opener, weak

    def closer(self, i: int) -> int:
        limit = self.opener[i + 1]
        if self.strong[i + 1] < limit:
            return self.strong[i + 1]
        last_weak = self.weak[limit - 1]
        return last_weak if last_weak > i else -1


def _closes(text: str, i: int) -> bool:
    if text[i] == "\u2018" or i == 0 or text[i - 1].isspace():
        return False
    return i + 1 == len(text) or not text[i + 1].isalnum()


def _strong(text: str, i: int) -> bool:
    after = text[i + 1 : i + 2]
    return (
        text[i - 1] in _CLOSING_PUNCTUATION or after == "" or after in _CLOSING_PUNCTUATION or after in ")]"
    )


def _dash_quotes(text: str, lead: int) -> list[Quote]:
    """Dash-set dialogue: speech from the opening dash, then alternately a narrator's comment and
    speech, at each dash with a space on one side or punctuation after it."""
    cuts = [lead]
    n = len(text)
    for i in range(lead + 1, n):
        if text[i] not in _DASHES:
            continue
        spaced_before = text[i - 1].isspace()
        after = text[i + 1 : i + 2]
        if spaced_before or after == "" or after.isspace() or after in ".,;:":
            cuts.append(i)
    cuts.append(n)
    quotes: list[Quote] = []
    for number in range(0, len(cuts) - 1, 2):
        start, end = cuts[number], cuts[number + 1]
        inner_start = start + 1
        while inner_start < end and (text[inner_start].isspace() or text[inner_start] in ".,;:"):
            inner_start += 1
        quote = Quote(start, end, inner_start, end, closed=end < n, dash=True)
        if _has_words(text, quote):
            quotes.append(quote)
    return quotes

"""Pronunciation lexicons: whole-word graphemes said as a respelling (pure).

A lexicon is a list of entries, each a grapheme (the written word or words, matched whole, with or
without case) and what to say instead: an ``alias`` (a respelling any engine can read) or a ``phoneme``
(IPA, for engines that take phonemes). Graphemes are literal text, never patterns: a grapheme that looks
like a pattern (``a.*b``, ``[abc]``) is refused when the lexicon is stored, so no user input becomes a
regular expression and a lexicon cannot cost more than a dictionary lookup per word.

Matching walks the text word by word: at each word, the candidate entries are those whose grapheme starts
with that word (one dict lookup); the longest one that matches wins ("New York City" before "New York"),
and between two entries for the same grapheme the first lexicon in the job's order wins. Rewritten text is
not matched again.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from .normalise import Fired

MAX_ENTRIES = 1000  # per lexicon; Polly and Azure cap theirs in the same range
MAX_GRAPHEME_CHARS = 100
MAX_ALIAS_CHARS = 500
MAX_PHONEME_CHARS = 500

_WORD = re.compile(r"\w+")
# Letters, digits and marks, joined by spaces and the punctuation words really contain (Dr., AT&T,
# O'Brien, e-mail, 3/4, C#); nothing a user could mean as a pattern (* + ? | ( ) [ ] { } ^ $ \).
_GRAPHEME_PUNCTUATION = frozenset(" '\u2019.-&/#,:@+")
_PATTERN_CHARACTERS = frozenset("*?|()[]{}^$\\")


class LexiconError(ValueError):
    """An entry that cannot be stored; ``index`` is its position in the lexicon (0-based), or None."""

    def __init__(self, message: str, index: int | None = None, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.index = index
        self.field = field


@dataclass(frozen=True)
class Entry:
    grapheme: str
    alias: str | None = None
    phoneme: str | None = None
    case_sensitive: bool = False


@dataclass(frozen=True)
class Lexicon:
    """A named list of entries, as stored (``name`` shows in the preview's fired rules)."""

    name: str
    entries: Sequence[Entry]


def check_entry(entry: Entry, index: int | None = None) -> Entry:
    """The entry with its text tidied (spaces collapsed, NFC), or :class:`LexiconError` naming the problem."""
    grapheme = " ".join(unicodedata.normalize("NFC", entry.grapheme).split())
    where = f"entry {index}: " if index is not None else ""
    if not grapheme:
        raise LexiconError(f"{where}the grapheme is empty", index, "grapheme")
    if len(grapheme) > MAX_GRAPHEME_CHARS:
        raise LexiconError(
            f"{where}the grapheme is longer than {MAX_GRAPHEME_CHARS} characters", index, "grapheme"
        )
    if bad := sorted({c for c in grapheme if c in _PATTERN_CHARACTERS}):
        raise LexiconError(
            f"{where}the grapheme {grapheme!r} contains {''.join(bad)!r}: graphemes are literal words, "
            "not patterns",
            index,
            "grapheme",
        )
    for c in grapheme:
        if not (c.isalnum() or unicodedata.category(c)[0] == "M" or c in _GRAPHEME_PUNCTUATION):
            raise LexiconError(
                f"{where}the grapheme {grapheme!r} contains {c!r} (U+{ord(c):04X}), which no word contains",
                index,
                "grapheme",
            )
    if not _WORD.match(grapheme):
        raise LexiconError(
            f"{where}the grapheme {grapheme!r} must start with a letter or digit", index, "grapheme"
        )
    alias = _tidy(entry.alias)
    phoneme = _tidy(entry.phoneme)
    if alias is None and phoneme is None:
        raise LexiconError(f"{where}give an alias or a phoneme for {grapheme!r}", index, "alias")
    if alias is not None and len(alias) > MAX_ALIAS_CHARS:
        raise LexiconError(f"{where}the alias is longer than {MAX_ALIAS_CHARS} characters", index, "alias")
    if phoneme is not None and len(phoneme) > MAX_PHONEME_CHARS:
        raise LexiconError(
            f"{where}the phoneme is longer than {MAX_PHONEME_CHARS} characters", index, "phoneme"
        )
    for name, value in (("alias", alias), ("phoneme", phoneme)):
        if value is not None and any(
            unicodedata.category(c) in ("Cc", "Cf", "Cs", "Co", "Cn") for c in value
        ):
            raise LexiconError(f"{where}the {name} contains a control or unassigned character", index, name)
    return Entry(grapheme, alias, phoneme, entry.case_sensitive)


def check_entries(entries: Iterable[Entry]) -> list[Entry]:
    """Every entry checked, at most :data:`MAX_ENTRIES` of them."""
    checked: list[Entry] = []
    for index, entry in enumerate(entries):
        if index >= MAX_ENTRIES:
            raise LexiconError(f"a lexicon holds at most {MAX_ENTRIES} entries", None, "entries")
        checked.append(check_entry(entry, index))
    return checked


def _tidy(value: str | None) -> str | None:
    if value is None:
        return None
    value = " ".join(unicodedata.normalize("NFC", value).split())
    return value or None


@dataclass(frozen=True)
class _Candidate:
    grapheme: str
    alias: str
    lexicon: str
    order: int  # the job's order: the lower wins when two entries match the same text


@dataclass
class _Group:
    """The entries whose grapheme starts with one word: looked up by exact text or casefolded text, per
    length (at most :data:`MAX_GRAPHEME_CHARS` lengths, so a word costs a bounded number of lookups
    however many entries share it)."""

    lengths: list[int] = field(default_factory=list)
    exact: dict[str, _Candidate] = field(default_factory=dict)  # case-sensitive entries
    folded: dict[str, _Candidate] = field(default_factory=dict)  # the others, by casefolded grapheme

    def match(self, text: str, start: int) -> _Candidate | None:
        for length in self.lengths:  # longest first
            end = start + length
            if end > len(text):
                continue
            written = text[start:end]
            if _is_word_char(written[-1]) and end < len(text) and _is_word_char(text[end]):
                continue  # "cat" must not match the start of "catalogue"
            found = [c for c in (self.exact.get(written), self.folded.get(written.casefold())) if c]
            found = [c for c in found if len(c.grapheme) == length]
            if found:
                return min(found, key=lambda c: c.order)
        return None


@dataclass
class CompiledLexicon:
    """Lexicons merged for one voice, ready to apply; ``warnings`` names the entries left out."""

    by_first_word: dict[str, _Group] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def apply(self, text: str) -> tuple[str, list[Fired]]:
        """``text`` with every matching grapheme replaced by its alias, and what fired, in text order."""
        if not self.by_first_word:
            return text, []
        out: list[str] = []
        fired: list[Fired] = []
        done = 0  # text before this index is in ``out`` already
        for word in _WORD.finditer(text):
            start = word.start()
            if start < done or (start > 0 and _is_word_char(text[start - 1])):
                continue
            group = self.by_first_word.get(word.group().casefold())
            hit = group.match(text, start) if group is not None else None
            if hit is None:
                continue
            end = start + len(hit.grapheme)
            out.append(text[done:start])
            out.append(hit.alias)
            fired.append(Fired(f"lexicon:{hit.lexicon}", text[start:end], hit.alias))
            done = end
        out.append(text[done:])
        return "".join(out), fired


def _is_word_char(c: str) -> bool:
    return c.isalnum() or c == "_" or unicodedata.category(c)[0] == "M"


def compile_lexicons(
    lexicons: Sequence[Lexicon], *, phonemes: bool = False, engine: str = "the engine"
) -> CompiledLexicon:
    """Merge ``lexicons`` in order for matching. With ``phonemes`` False (no engine of Tome's takes IPA
    yet) an entry with only a phoneme cannot be said and is left out, with a warning; an entry with both
    is said by its alias."""
    compiled = CompiledLexicon()
    order = 0
    for lexicon in lexicons:
        for entry in lexicon.entries:
            alias = entry.alias
            if alias is None:
                if not phonemes:
                    compiled.warnings.append(
                        f"lexicon {lexicon.name}: {entry.grapheme!r} has only a phoneme, which {engine} "
                        "cannot take; it is read as written (give the entry an alias)"
                    )
                    continue
                alias = entry.phoneme or ""
            first = _WORD.match(entry.grapheme)
            if first is None:  # check_entry refuses these; a stored row from elsewhere is skipped
                continue
            group = compiled.by_first_word.setdefault(first.group().casefold(), _Group())
            table = group.exact if entry.case_sensitive else group.folded
            key = entry.grapheme if entry.case_sensitive else entry.grapheme.casefold()
            if key in table:
                continue  # an earlier entry (or lexicon) already says this grapheme
            table[key] = _Candidate(entry.grapheme, alias, lexicon.name, order)
            if len(entry.grapheme) not in group.lengths:
                group.lengths.append(len(entry.grapheme))
            order += 1
    for group in compiled.by_first_word.values():
        group.lengths.sort(reverse=True)
    return compiled

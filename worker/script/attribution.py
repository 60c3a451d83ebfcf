"""Who says each line of dialogue: attribution by rules (pure; time linear in the script's length).

A line is a quotation (:mod:`worker.script.dialogue`) that is dialogue; a quotation interrupted by its tag
("…," she said, "…") is one line. Quotations with no verb of speech beside them that stand inside a
sentence (scare quotes, titles) stay with the narrator.

A line's speaker is decided by the first rule that applies: ``explicit`` (a tag names the speaker, or a
sentence of the paragraph has the speaker as its subject; the forms of a name are one character,
:mod:`.characters`), ``pronoun`` (the last character of the tag's gender named, passing over the one who
spoke last), ``alternation`` (in an exchange between two, the one who did not speak last; a name the
line calls out is the listener); a later quotation of the paragraph, or a speech running on into the
next one, keeps its speaker; else ``unknown``, read by the narrator.

Every line has a confidence in [0, 1]. Bounds keep the output small whatever the script: at most
:data:`MAX_LINES` lines and :data:`MAX_CHARACTERS` characters; past them the rest is narration, with a
warning. See docs/scripts.md, "Dialogue and cast".
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from .characters import TITLES, Character, Characters, Gender, Name, display, is_title, names_in, title_gender
from .dialogue import Quote, find_quotes, primary_language
from .speech_verbs import NARRATION_PRONOUNS, PHRASAL, pronouns, speech_verbs

Attribution = Literal["explicit", "pronoun", "alternation", "llm", "unknown"]
NARRATOR = "narrator"
MAX_LINES = 100_000
MAX_CHARACTERS = 500
MAX_SAMPLE = 160
# How far around a quotation its tag is looked for, in characters.
_TAG_REACH = 160
# How far from a quotation a verb of speech makes it dialogue: a few words.
_VERB_REACH = 48
# Distinct names in narration gathered (places and passers-by among them); past this, only those seen.
_MAX_MENTIONED = 20_000
# Lines that follow one another within this many paragraphs belong to one exchange.
_EXCHANGE_GAP = 2

_TOKEN = re.compile(r"[^\W\d_][\w’'\-]*\.?|[.!?;:,\u2014\u2013\u2026]")
_SENTENCE_END = frozenset(".!?;\u2026")
_CONJUNCTIONS = frozenset({"and", "but", "or", "then", "while", "because", "which", "that"})
_PREPOSITIONS = frozenset(
    [
        "to",
        "at",
        "with",
        "from",
        "for",
        "of",
        "toward",
        "towards",
        "behind",
        "beside",
        "on",
        "upon",
        "by",
        "near",
        "past",
        "about",
        "after",
        "before",
        "than",
    ]
)


@dataclass(frozen=True)
class Line:
    """One line of dialogue: where it is (chapter, paragraph, quotation spans in the paragraph's text),
    what is said, who says it and how sure that is."""

    index: int
    chapter: int
    paragraph: int
    spans: tuple[tuple[int, int], ...]
    text: str
    speaker: str
    attribution: Attribution
    confidence: float
    addressee: str | None = None


@dataclass(frozen=True)
class CastMember:
    name: str
    aliases: tuple[str, ...]
    lines: int
    words: int
    confidence: float
    sample: str


@dataclass(frozen=True)
class Cast:
    """The characters who speak (most lines first), every line, and warnings for the preview."""

    characters: tuple[CastMember, ...]
    lines: tuple[Line, ...]
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Tag:
    """What the words around a line say of its speaker: a name or a pronoun, and how strongly."""

    name: Name | None
    pronoun: str | None  # "m", "f" or "i"
    confidence: float


@dataclass
class _Found:
    chapter: int
    paragraph: int
    quotes: list[Quote]
    text: str
    tag: _Tag | None
    vocatives: list[Name]
    continues: bool  # a speech left open in the paragraph before goes on here
    first_in_paragraph: bool


@dataclass
class _Paragraph:
    """What pass one keeps of a paragraph: its lines, and the names and pronouns of its narration."""

    chapter: int
    number: int
    lines: list[_Found] = field(default_factory=list)
    mentions: list[tuple[int, Name]] = field(default_factory=list)
    pronoun_votes: Counter[Gender] = field(default_factory=Counter)
    open_end: bool = False


def attribute(
    chapters: Sequence[Sequence[str]],
    language: str = "en",
    *,
    max_lines: int = MAX_LINES,
    max_characters: int = MAX_CHARACTERS,
) -> Cast:
    """Find and attribute the dialogue of ``chapters`` (each a sequence of paragraph texts)."""
    reader = _Reader(primary_language(language), max_lines)
    paragraphs = reader.read(chapters)
    characters = Characters(max_characters)
    characters.gather(reader.forms, reader.mentioned)
    warnings = list(reader.warnings)
    if characters.refused:
        warnings.append(
            f"the script names more than {max_characters} speakers; the lines of "
            f"{characters.refused} more are read by the narrator"
        )
    _vote_genders(paragraphs, characters)
    lines = _Resolver(characters).resolve(paragraphs)
    return Cast(_members(lines, characters), tuple(lines), tuple(warnings))


class _Reader:
    """Pass one: quotations, their tags, and the names that speak."""

    def __init__(self, language: str, max_lines: int) -> None:
        self.language = language
        self.max_lines = max_lines
        self.verbs = speech_verbs(language)
        self.pronouns = pronouns(language)
        self.forms: Counter[Name] = Counter()  # names seen speaking
        self.mentioned: Counter[Name] = Counter()  # names in narration
        self.warnings: list[str] = []
        self.count = 0
        self.full = False

    def read(self, chapters: Sequence[Sequence[str]]) -> list[_Paragraph]:
        paragraphs: list[_Paragraph] = []
        for chapter_number, chapter in enumerate(chapters):
            open_before = False
            for number, text in enumerate(chapter):
                paragraph = self._paragraph(chapter_number, number, text, open_before)
                open_before = paragraph.open_end
                paragraphs.append(paragraph)
        return paragraphs

    def _paragraph(self, chapter: int, number: int, text: str, open_before: bool) -> _Paragraph:
        paragraph = _Paragraph(chapter, number)
        quotes = [] if self.full else find_quotes(text, self.language)
        dialogue = [quote for quote in quotes if self._is_dialogue(text, quote, quotes)]
        narration_start = 0
        previous: Quote | None = None
        for position, quote in enumerate(dialogue):
            self._narration(paragraph, text, narration_start, quote.start)
            narration_start = quote.end
            following = dialogue[position + 1].start if position + 1 < len(dialogue) else len(text)
            after = self._after_tag(text, quote, following)
            before = self._before_tag(text, previous.end if previous else 0, quote)
            current = paragraph.lines[-1] if paragraph.lines else None
            if (
                current is not None
                and previous is not None
                and self._interrupted(text, previous, quote, current)
            ):
                current.quotes.append(quote)
                if current.tag is None:
                    current.tag = after
                previous = quote
                continue
            if self.count >= self.max_lines:
                self.full = True
                self.warnings.append(
                    f"the script has more than {self.max_lines} lines of dialogue; "
                    "the rest is read by the narrator"
                )
                break
            self.count += 1
            tag = _best(after, before)
            if tag is not None and tag.name is not None:
                self.forms[tag.name] += 1
            paragraph.lines.append(
                _Found(
                    chapter,
                    number,
                    [quote],
                    text,
                    tag,
                    self._vocatives(text, quote),
                    open_before and position == 0 and quote.start == len(text) - len(text.lstrip()),
                    position == 0,
                )
            )
            previous = quote
        self._narration(paragraph, text, narration_start, len(text))
        paragraph.open_end = bool(dialogue) and not dialogue[-1].closed and not dialogue[-1].dash
        return paragraph

    def _narration(self, paragraph: _Paragraph, text: str, start: int, end: int) -> None:
        if end - start <= 0:
            return
        for name_start, _, name in names_in(text, start=start, end=end):
            paragraph.mentions.append((name_start, name))
            if len(self.mentioned) < _MAX_MENTIONED or name in self.mentioned:
                self.mentioned[name] += 1
        for word in _TOKEN.findall(text, start, end):
            gender = NARRATION_PRONOUNS.get(word.lower())
            if gender is not None:
                paragraph.pronoun_votes[gender] += 1

    def _is_dialogue(self, text: str, quote: Quote, quotes: list[Quote]) -> bool:
        """Dialogue, not a scare quote or a title: a verb of speech beside it, or it stands as a sentence
        of its own (after a sentence's end, a colon or a comma, and ending in punctuation or the
        sentence)."""
        if quote.dash or not quote.closed:
            return True
        before = text[max(0, quote.start - _VERB_REACH) : quote.start]
        after = text[quote.end : quote.end + _VERB_REACH]
        if self._verb_near(before, last=True) or self._verb_near(after, last=False):
            return True
        stripped = before.rstrip()
        starts = not stripped or stripped[-1] in ".!?:;,\u2014\u2013\u2026\"'\u201d\u2019\u00bb)"
        inner = _ending(text[quote.inner_start : quote.inner_end])
        ends = (
            inner[-1:] in ".,!?\u2026\u2014\u2013-:;"
            or not after.strip()
            or after.lstrip()[:1] in ".!?,;:\u2014"
        )
        return starts and ends

    def _verb_near(self, text: str, *, last: bool) -> bool:
        """A verb of speech among the first words after a quotation, or as the last word before it (an
        adverb, a comma or a colon may follow it: "she said softly, “…”")."""
        tokens = _tokens(text, 0, len(text))
        if last:
            if not tokens or tokens[-1] not in (",", ":"):
                return False
            while tokens and tokens[-1] in (",", ":"):
                tokens.pop()
            words = [w.lower().rstrip(".") for w in tokens[-2:] if w[0].isalpha()]
            if words and words[-1].endswith("ly") and len(words) == 2:
                words = words[:1]
            return bool(words) and self._is_verb(words, len(words) - 1)
        words = [w.lower().rstrip(".") for w in tokens if w[0].isalpha()][:3]
        for i in range(len(words)):
            if words[i] in _CONJUNCTIONS:  # "…" and had said it: another clause, not the tag
                return False
            if self._is_verb(words, i):
                return True
        return False

    def _is_verb(self, words: Sequence[str], i: int) -> bool:
        word = words[i]
        if word in PHRASAL:
            return i + 1 < len(words) and words[i + 1] == PHRASAL[word]
        return word in self.verbs

    def _interrupted(self, text: str, previous: Quote, quote: Quote, current: _Found) -> bool:
        """``quote`` goes on with the line before it: nothing stands between them but the line's tag, one
        clause with a verb of speech ("…," she said, "…" / "…?" he asked. "…"), or a clause after a
        quotation cut at a comma or dash ("…," Anna smiled, "…")."""
        if previous.dash:
            return True
        tokens = _tokens(text, previous.end, quote.start)
        if not any(t[0].isalpha() for t in tokens):
            return True
        clause = _clause(text, previous.end, quote.start, first=True)
        if any(t[0].isalpha() for t in tokens[len(clause) :]):
            return False
        words = [t.lower().rstrip(".") for t in clause if t[0].isalpha()]
        if len(words) > 12:
            return False
        if any(self._is_verb(words, i) for i in range(min(len(words), 5))):
            return True
        cut = _ending(text[previous.inner_start : previous.inner_end])[-1:] in ",\u2014\u2013-"
        return cut and current.tag is not None

    def _after_tag(self, text: str, quote: Quote, following: int) -> _Tag | None:
        """The tag after a quotation, up to the end of its sentence: "said Anna", "Anna said", "she
        said", or a sentence whose subject is a name or a pronoun (a beat)."""
        end = min(following, quote.end + _TAG_REACH)
        tokens = _clause(text, quote.end, end, first=True)
        inner = _ending(text[quote.inner_start : quote.inner_end])
        comma = inner[-1:] in ",\u2014\u2013-" or (quote.dash and bool(tokens))
        return self._parse(tokens, comma=comma, before=False)

    def _before_tag(self, text: str, start: int, quote: Quote) -> _Tag | None:
        """The tag before a quotation, from the last sentence's end: "Anna said:", "Then she asked,", or a
        sentence whose subject is a name or a pronoun."""
        begin = max(start, quote.start - _TAG_REACH)
        tokens = _clause(text, begin, quote.start, first=False)
        if not tokens:
            return None
        ends_open = tokens[-1] in (",", ":", "\u2014")
        return self._parse(tokens, comma=ends_open, before=True)

    def _parse(self, tokens: list[str], *, comma: bool, before: bool) -> _Tag | None:
        words = [t for t in tokens if t[0].isalpha()]
        if not words:
            return None
        lowered = [w.lower().rstrip(".") for w in words]
        verb = any(self._is_verb(lowered, i) for i in range(min(len(lowered), 8 if before else 5)))
        # "said Anna", "asked Mr. Darcy", "said she"
        if not before and self._is_verb(lowered, 0) and len(words) > 1:
            follower = lowered[1]
            if follower in self.pronouns:
                return _Tag(None, str(self.pronouns[follower]), 0.8)
            name = _leading_name(words[1:]) or self._descriptor(lowered, 1)
            if name is not None:
                return _Tag(name, None, 0.95)
            return None
        if lowered[0] == "the":
            described = self._descriptor(lowered, 0)
            if described is not None and verb:
                return _Tag(described, None, 0.9)
            if len(lowered) > 1 and lowered[1] in TITLES:  # "The captain looked up." names by title
                return _Tag(("the", lowered[1]), None, 0.75)
        subject = self._subject(words, lowered)
        if subject is None:
            return None
        strength = 0.95 if verb and not before else 0.9 if verb else 0.85 if comma else 0.75
        if isinstance(subject, str):
            return _Tag(None, subject, strength - 0.1)
        return _Tag(subject, None, strength)

    def _descriptor(self, lowered: list[str], at: int) -> Name | None:
        """A speaker described, not named: "said the captain", "the old man said" (the article and at
        most two words, then the clause's end or a verb of speech)."""
        if lowered[at : at + 1] != ["the"]:
            return None
        for length in (1, 2):
            words = lowered[at + 1 : at + 1 + length]
            if len(words) < length or not all(word.isalpha() for word in words):
                return None
            rest = lowered[at + 1 + length :]
            if at > 0 and (not rest or not rest[0].isalpha() or rest[0].endswith("ly")):
                return ("the", *words)
            if at == 0 and rest and self._is_verb(lowered, at + 1 + length):
                return ("the", *words)
        return None

    def _subject(self, words: list[str], lowered: list[str]) -> Name | str | None:
        """The subject of a clause: its first pronoun word, or its first name not after a preposition."""
        if lowered[0] in self.pronouns:
            return str(self.pronouns[lowered[0]])
        for i, word in enumerate(words[:8]):
            if i > 0 and lowered[i - 1] in _PREPOSITIONS:
                continue
            name = _leading_name(words[i:]) if word[:1].isupper() else None
            if name is not None:
                return name
            if i == 1 and lowered[0] in ("then", "but", "and", "so", "now") and lowered[1] in self.pronouns:
                return str(self.pronouns[lowered[1]])
        return None

    def _vocatives(self, text: str, quote: Quote) -> list[Name]:
        """Names the line calls out: at its start before a comma, or after a comma at its end."""
        inner = text[quote.inner_start : quote.inner_end]
        found: list[Name] = []
        for start, end, name in names_in(inner):
            head = inner[:start].rstrip()
            tail = inner[end:].lstrip()
            opens = not head or head[-1] in ",!" or head.lower().endswith(("oh", "dear"))
            closes = not tail or tail[0] in ",.!?\u2026;\u2014"
            if opens and closes:
                found.append(name)
        return found[:4]


def _ending(inner: str) -> str:
    """A quotation's words without the closing marks of quotations nested at its end (‘…,’)."""
    return inner.rstrip().rstrip("\u2019\u201d'\"\u00bb\u203a").rstrip()


def _tokens(text: str, start: int, end: int) -> list[str]:
    """Words and punctuation of ``text[start:end]``; a full stop after a word is a token of its own
    unless the word is an abbreviated title (Mr.)."""
    tokens: list[str] = []
    for token in _TOKEN.findall(text, start, end):
        if len(token) > 1 and token.endswith(".") and not is_title(token):
            tokens.extend((token[:-1], "."))
        else:
            tokens.append(token)
    return tokens


def _clause(text: str, start: int, end: int, *, first: bool) -> list[str]:
    """The tokens of the first (``first``) or last sentence of ``text[start:end]``, its end included."""
    tokens = _tokens(text, start, end)
    if first:
        for i, token in enumerate(tokens):
            if token in _SENTENCE_END:
                return tokens[: i + 1]
        return tokens
    last = len(tokens)
    while last and tokens[last - 1] in _SENTENCE_END:
        last -= 1
    for i in range(last - 1, -1, -1):
        if tokens[i] in _SENTENCE_END:
            return tokens[i + 1 :]
    return tokens


def _leading_name(words: list[str]) -> Name | None:
    """The name the words start with (titles included), None if they start with none."""
    found = names_in(" ".join(w.rstrip(",") for w in words[:5]))
    if not found or found[0][0] != 0:
        return None
    return found[0][2]


def _best(after: _Tag | None, before: _Tag | None) -> _Tag | None:
    """A tag with a verb after the line beats one before it; a beat before the line beats one after."""
    if after is None:
        return before
    if before is None:
        return after
    return after if after.confidence >= 0.9 or after.confidence > before.confidence else before


def _vote_genders(paragraphs: Sequence[_Paragraph], characters: Characters) -> None:
    """A character named alone in a paragraph's narration gets the votes of its he's and she's."""
    for paragraph in paragraphs:
        if not paragraph.pronoun_votes:
            continue
        named = {characters.find(name) for _, name in paragraph.mentions}
        named |= {
            characters.find(line.tag.name)
            for line in paragraph.lines
            if line.tag and line.tag.name is not None
        }
        named.discard(None)
        if len(named) == 1:
            character = next(iter(named))
            assert character is not None
            for gender, count in paragraph.pronoun_votes.items():
                characters.note_gender(character, gender, count)


class _Resolver:
    """Pass two: every line's speaker, in reading order."""

    def __init__(self, characters: Characters) -> None:
        self.characters = characters
        self.recent: list[Character] = []  # most recent last, at most 8
        self.last: tuple[Character | None, int] | None = None  # who spoke the last line, at which paragraph
        self.pair: list[Character] = []  # the last two different speakers
        self.genders: dict[int, Gender | None] = {}
        self.called: Character | None = None  # whom the last line called by name

    def resolve(self, paragraphs: Sequence[_Paragraph]) -> list[Line]:
        lines: list[Line] = []
        chapter = -1
        for position, paragraph in enumerate(paragraphs):
            if paragraph.chapter != chapter:
                chapter = paragraph.chapter
                self.recent, self.last, self.pair, self.called = [], None, [], None
            mentions = iter(sorted(paragraph.mentions))
            pending = next(mentions, None)
            paragraph_speaker: tuple[Character | None, Attribution, float] | None = None
            for found in paragraph.lines:
                start = found.quotes[0].start
                while pending is not None and pending[0] < start:
                    self._mention(pending[1])
                    pending = next(mentions, None)
                speaker, how, confidence = self._speaker(found, paragraph_speaker, position)
                if paragraph_speaker is None or (found.tag is not None and found.tag.confidence >= 0.9):
                    paragraph_speaker = (speaker, how, confidence)
                self._spoke(speaker, position)
                self.called = next(
                    (c for c in map(self.characters.find, found.vocatives) if c is not None), None
                )
                lines.append(self._line(len(lines), found, speaker, how, confidence))
            while pending is not None:
                self._mention(pending[1])
                pending = next(mentions, None)
        return lines

    def _line(
        self, index: int, found: _Found, speaker: Character | None, how: Attribution, confidence: float
    ) -> Line:
        text = found.text
        spans = tuple((q.start, q.end) for q in found.quotes)
        said = " ".join(q.inner(text) for q in found.quotes)
        addressee = next((c.name for c in map(self.characters.find, found.vocatives) if c is not None), None)
        return Line(
            index,
            found.chapter,
            found.paragraph,
            spans,
            said,
            NARRATOR if speaker is None else speaker.name,
            how if speaker is not None or how == "explicit" else "unknown",
            round(confidence if speaker is not None or how == "explicit" else 0.0, 2),
            addressee,
        )

    def _speaker(
        self,
        found: _Found,
        paragraph_speaker: tuple[Character | None, Attribution, float] | None,
        position: int,
    ) -> tuple[Character | None, Attribution, float]:
        tag = found.tag
        listeners = [c for c in map(self.characters.find, found.vocatives) if c is not None]
        if tag is not None and tag.name is not None:
            character = self.characters.find(tag.name)
            if character is not None:
                return character, "explicit", tag.confidence
            if tag.confidence >= 0.9 and tag.name[0] != "the":  # named, but past the limit of characters
                return None, "unknown", 0.0
        if tag is not None and tag.pronoun == "i":
            return None, "explicit", tag.confidence
        if tag is not None and tag.pronoun is not None:
            if paragraph_speaker is not None and paragraph_speaker[0] is not None:
                known = self._gender(paragraph_speaker[0])
                if known is None or known == tag.pronoun:  # "…" She turned. "…": the same speaker
                    return paragraph_speaker[0], "pronoun", round(tag.confidence * 0.9, 2)
            character, sure = self._pronoun(tag.pronoun, listeners, position)
            if character is not None:
                return character, "pronoun", round(tag.confidence * sure, 2)
        if paragraph_speaker is not None and not found.first_in_paragraph:
            speaker, how, confidence = paragraph_speaker
            return speaker, how, round(confidence * 0.9, 2)
        if found.continues and self.last is not None and self.last[0] is not None:
            return self.last[0], "alternation", 0.8
        return self._alternate(listeners, position)

    def _pronoun(
        self, gender: str, listeners: list[Character], position: int
    ) -> tuple[Character | None, float]:
        """The last character of ``gender`` named, passing over the last line's speaker (in the paragraph
        before) and the line's listeners when another is there."""
        candidates = [c for c in reversed(self.recent) if self._gender(c) == gender and c not in listeners]
        sure = 1.0
        if not candidates:  # nobody is known to be of that gender: those whose gender is not known
            candidates = [c for c in reversed(self.recent) if self._gender(c) is None and c not in listeners]
            sure = 0.7
        if not candidates:
            return None, 0.0
        last = self.last[0] if self.last is not None and position - self.last[1] == 1 else None
        others = [c for c in candidates if c is not last]
        if others and candidates[0] is last:
            return others[0], 0.8 * sure
        return candidates[0], (1.0 if len(candidates) == 1 else 0.9) * sure

    def _alternate(
        self, listeners: list[Character], position: int
    ) -> tuple[Character | None, Attribution, float]:
        """An untagged line: the other one of the two who speak in turn; never a listener. When only one
        has spoken yet, the one that line called by name, else the one the narration named last; the same
        for the first line of an exchange."""
        ongoing = self.last is not None and position - self.last[1] <= _EXCHANGE_GAP
        last = self.last[0] if ongoing and self.last is not None else None
        if last is not None and len(self.pair) == 2:
            other = self.pair[0] if last is self.pair[1] else self.pair[1]
            if other in listeners and last not in listeners:
                return last, "alternation", 0.5
            return other, "alternation", 0.75
        if (
            last is not None
            and self.called is not None
            and self.called is not last
            and self.called not in listeners
        ):
            return self.called, "alternation", 0.65
        for character in reversed(self.recent):
            if character is not last and character not in listeners:
                return character, "alternation", 0.6 if last is not None else 0.4
        return None, "unknown", 0.0

    def _gender(self, character: Character) -> Gender | None:
        if character.number not in self.genders:
            self.genders[character.number] = character.gender
        return self.genders[character.number]

    def _mention(self, name: Name) -> None:
        character = self.characters.find(name)
        if character is not None:
            self._recent(character)

    def _recent(self, character: Character) -> None:
        if character in self.recent:
            self.recent.remove(character)
        self.recent.append(character)
        del self.recent[:-8]

    def _spoke(self, speaker: Character | None, position: int) -> None:
        if speaker is None:
            return
        self._recent(speaker)
        if not self.pair or self.pair[-1] is not speaker:
            self.pair = [*self.pair, speaker][-2:]
            if len(self.pair) == 2 and self.pair[0] is self.pair[1]:
                self.pair = [speaker]
        self.last = (speaker, position)


def relabelled(cast: Cast, lines: Sequence[Line], warnings: Sequence[str] = ()) -> Cast:
    """``cast`` with its lines replaced by ``lines`` (the same lines, relabelled) and its characters
    counted again; a character left with no line stays, with none (a job's cast may still name them)."""
    known = [(member.name, member.aliases) for member in cast.characters]
    counted = _count(lines, known)
    speaking = {member.name for member in counted}
    silent = [replace(m, lines=0, words=0) for m in cast.characters if m.name not in speaking]
    return Cast((*counted, *silent), tuple(lines), (*cast.warnings, *warnings))


def _members(lines: Sequence[Line], characters: Characters) -> tuple[CastMember, ...]:
    return _count(lines, [(character.name, tuple(character.aliases)) for character in characters.all])


def _count(
    lines: Sequence[Line], characters: Sequence[tuple[str, tuple[str, ...]]]
) -> tuple[CastMember, ...]:
    by_name: dict[str, list[Line]] = {}
    for line in lines:
        if line.speaker != NARRATOR:
            by_name.setdefault(line.speaker, []).append(line)
    members: list[CastMember] = []
    for name, aliases in characters:
        spoken = by_name.get(name)
        if not spoken:
            continue
        members.append(
            CastMember(
                name,
                aliases,
                len(spoken),
                sum(len(line.text.split()) for line in spoken),
                round(sum(line.confidence for line in spoken) / len(spoken), 2),
                max(spoken, key=lambda line: (line.confidence, len(line.text) <= MAX_SAMPLE)).text[
                    :MAX_SAMPLE
                ],
            )
        )
    members.sort(key=lambda member: (-member.lines, member.name))
    return tuple(members)


__all__ = [
    "NARRATOR",
    "Attribution",
    "Cast",
    "CastMember",
    "Line",
    "attribute",
    "display",
    "relabelled",
    "title_gender",
]

"""Scripts (plain text, Markdown, SSML, EPUB) to chapters of paragraphs of sentences.

Each format has a reader that turns it into the events of :mod:`worker.script.document`; this module
assembles those events, the same way for every format: chapters open at headings (or where an EPUB's
table of contents says), voice directives and SSML voices choose who reads a paragraph, breaks become
exact pauses, and paragraphs are split into sentences with the rules of the script's language.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from .breaks import break_line, check_breaks, split_breaks
from .document import (
    MAX_BREAK_SECONDS,
    Block,
    BookInfo,
    ChapterStart,
    Pause,
    Piece,
    SentenceEnd,
    Speech,
    Words,
)
from .errors import EmptyScript, ScriptError
from .markdown import Footnotes, read_markdown
from .sentences import split_sentences
from .voices import VoiceDirective, directive_in_line

ScriptFormat = Literal["plain", "markdown", "ssml", "epub"]
Event = Block | VoiceDirective | Pause | ChapterStart | Speech

# Unicode category Cc minus the three ordinary whitespace controls.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


class Sentence(str):
    """A sentence as written, and, when markup shaped how parts of it are said (SSML ``sub``,
    ``say-as``, ``phoneme``), its pieces (whose texts join to the sentence). A plain sentence compares
    equal to its text and has no pieces."""

    pieces: tuple[Piece, ...] | None

    def __new__(cls, text: str, pieces: tuple[Piece, ...] | None = None) -> Sentence:
        sentence = super().__new__(cls, text)
        sentence.pieces = pieces
        return sentence

    def __reduce__(self) -> tuple[type[Sentence], tuple[str, tuple[Piece, ...] | None]]:
        return (Sentence, (str(self), self.pieces))


@dataclass(frozen=True)
class Style:
    """How a paragraph is read beyond its words: its rate, an exact pause after it (a break), and whether
    the next paragraph continues it (it was cut at a break or a voice or rate change: a sentence pause,
    not a paragraph pause, follows it)."""

    rate: float | None = None
    pause: float | None = None
    joined: bool = False


_PLAIN = Style()


@dataclass(frozen=True)
class Chapter:
    """A chapter: its title (None before the first heading and in plain scripts) and its paragraphs.

    Each paragraph is a tuple of sentences. A titled chapter's first paragraph is the title itself, as a
    single sentence, because headings are spoken. ``voices`` runs parallel to ``paragraphs``: the voice
    name a directive chose for each one, None for the job's own voice. It is empty when every paragraph
    is read by the job's voice (so single-voice chapters compare equal however they were built); the same
    goes for ``styles`` and ``speakers`` (the character who says a paragraph cut out of a line of
    dialogue by a cast, :mod:`worker.script.cast`; None for the narrator). ``headings`` numbers the
    paragraphs that are headings (numerals read as such).
    """

    title: str | None
    paragraphs: tuple[tuple[str, ...], ...]
    voices: tuple[str | None, ...] = ()
    styles: tuple[Style, ...] = ()
    headings: frozenset[int] = field(default=frozenset(), compare=False)
    speakers: tuple[str | None, ...] = ()

    def __post_init__(self) -> None:
        for name in ("voices", "styles", "speakers"):
            values = getattr(self, name)
            if values and len(values) != len(self.paragraphs):
                raise ValueError(f"{len(values)} {name} for {len(self.paragraphs)} paragraphs")
        if all(voice is None for voice in self.voices):
            object.__setattr__(self, "voices", ())
        if all(style == _PLAIN for style in self.styles):
            object.__setattr__(self, "styles", ())
        if all(speaker is None for speaker in self.speakers):
            object.__setattr__(self, "speakers", ())

    def voice_of(self, paragraph: int) -> str | None:
        """The voice name of paragraph number ``paragraph``; None for the job's own voice."""
        return self.voices[paragraph] if self.voices else None

    def speaker_of(self, paragraph: int) -> str | None:
        """The character who says paragraph number ``paragraph``; None for the narrator."""
        return self.speakers[paragraph] if self.speakers else None

    def style_of(self, paragraph: int) -> Style:
        return self.styles[paragraph] if self.styles else _PLAIN


@dataclass(frozen=True)
class ParsedScript:
    """A parsed script: its chapters, every voice directive in it (used or not: all must resolve), what
    it says about itself, the language its sentences were split with, and warnings for the preview."""

    chapters: list[Chapter]
    directives: tuple[VoiceDirective, ...] = field(default=())
    info: BookInfo = field(default_factory=BookInfo)
    language: str = "en"
    warnings: tuple[str, ...] = ()
    # ``<!-- speaker: NAME -->`` lines: (chapter, paragraph) -> who says the paragraph's dialogue
    speakers: dict[tuple[int, int], str] = field(default_factory=dict)


@dataclass(frozen=True)
class ReadOptions:
    """Choices about what of a book is read (EPUB front and back matter; footnotes in EPUB and Markdown)."""

    front_matter: bool = False
    back_matter: bool = False
    footnotes: Footnotes = "skip"
    max_chars: int | None = None  # an EPUB's text, like a text script, is refused past this length


def parse_script(text: str, fmt: ScriptFormat, *, language: str = "en") -> list[Chapter]:
    """Parse a script into chapters, ready for :func:`make_chunks` (see :func:`parse_document`)."""
    return parse_document(text, fmt, language=language).chapters


def parse_document(
    source: str | bytes,
    fmt: ScriptFormat,
    *,
    language: str | None = "en",
    fallback_language: str = "en",
    options: ReadOptions = ReadOptions(),
) -> ParsedScript:
    """Parse a script into chapters and the voice directives that switch who reads them.

    ``source`` is text, or the bytes of an EPUB. Sentences are split with the rules of ``language``, or
    (None) of the language the script declares (EPUB metadata, front matter, SSML ``xml:lang``), or
    ``fallback_language``. Whitespace is normalised to single spaces and paragraphs without a letter or
    digit (scene breaks like ``* * *``) are dropped. Raises :class:`ScriptError` for control characters
    other than tab, CR and LF, for malformed directives and markup (with their line and column), and
    :class:`EmptyScript` for scripts with nothing to read.
    """
    events, info, directives, warnings = _read(source, fmt, options)
    chosen = language or info.language or fallback_language
    assembler = Assembler(chosen, explicit_chapters=fmt == "epub")
    for event in events:
        assembler.add(event)
    chapters = assembler.finish()
    check_something_to_read(chapters, source)
    return ParsedScript(
        chapters,
        tuple(directives or assembler.directives),
        info,
        chosen,
        tuple(warnings + assembler.warnings),
        assembler.speakers,
    )


def check_something_to_read(chapters: Sequence[Chapter], source: str | bytes) -> None:
    """Raise :class:`EmptyScript` naming why, when no paragraph but a heading holds a letter or digit."""
    if not chapters:
        text = source if isinstance(source, str) else ""
        if isinstance(source, str) and not any(character.isalnum() for character in text):
            why = "it holds no letters or digits, only spaces and punctuation"
        else:
            why = "everything in it is markup that is not read (comments, code blocks, tags or metadata)"
        raise EmptyScript(f"the script has nothing to read: {why}")
    if all(len(chapter.headings) >= len(chapter.paragraphs) for chapter in chapters):
        raise EmptyScript(
            f"the script has nothing to read: it has only headings ({len(chapters)}), with no text under "
            "them; headings are read as chapter titles before their text"
        )


def _read(
    source: str | bytes, fmt: ScriptFormat, options: ReadOptions
) -> tuple[Iterable[Event], BookInfo, list[VoiceDirective], list[str]]:
    """The reader of ``fmt``: events, metadata, SSML's voices (others' directives come as events),
    warnings."""
    if fmt == "epub":
        from .epub import DEFAULT_LIMITS, read_epub  # lxml is only loaded for books

        if not isinstance(source, bytes):
            raise ScriptError("an EPUB script must be the file's bytes")
        book = read_epub(
            source,
            front_matter=options.front_matter,
            back_matter=options.back_matter,
            footnotes=options.footnotes,
            limits=replace(DEFAULT_LIMITS, max_text_chars=options.max_chars),
        )
        return book.events, book.info, [], list(book.warnings)
    if isinstance(source, bytes):
        raise ScriptError(f"a {fmt} script must be text")
    check_characters(source)
    text = source.removeprefix("\ufeff")
    if fmt == "ssml":
        from .ssml import read_ssml

        ssml = read_ssml(text)
        return ssml.events, BookInfo(language=ssml.language), list(ssml.directives), []
    check_breaks(text.replace("\r\n", "\n").replace("\r", "\n"))
    if fmt == "plain":
        return plain_blocks(text), BookInfo(), [], []
    if fmt == "markdown":
        markdown = read_markdown(text, options.footnotes)
        return markdown.events, markdown.info, [], []
    raise ScriptError(f"unknown script format {fmt!r}")


def check_characters(text: str) -> None:
    """Raise :class:`ScriptError` at the first control character other than ``\\t``, ``\\r``, ``\\n``."""
    match = _CONTROL.search(text)
    if match is None:
        return
    index = match.start()
    before = text[:index]
    line = before.count("\n") + before.count("\r") - before.count("\r\n") + 1
    column = index - max(before.rfind("\n"), before.rfind("\r"))
    raise ScriptError(f"control character U+{ord(text[index]):04X} is not allowed", line, column)


def plain_blocks(text: str) -> Iterator[Block | VoiceDirective | Pause]:
    """Paragraphs of a plain script, separated by one or more blank (or whitespace-only) lines, and the
    voice directive and break lines between them. A directive or break line is never spoken and always
    ends a paragraph."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    paragraph: list[str] = []
    for number, line in enumerate(text.split("\n"), start=1):
        directive: VoiceDirective | Pause | None = directive_in_line(line, number) or break_line(line)
        if directive is None and line.strip():
            paragraph.append(line)
            continue
        if paragraph:
            yield Block(False, "\n".join(paragraph))
            paragraph = []
        if directive is not None:
            yield directive
    if paragraph:
        yield Block(False, "\n".join(paragraph))


def _speakable(text: str) -> bool:
    return any(character.isalnum() for character in text)


@dataclass
class _Paragraph:
    sentences: tuple[str, ...]
    voice: str | None
    style: Style
    heading: bool


class Assembler:
    """Builds chapters from events. Markdown and plain scripts open a chapter at each heading; an EPUB's
    chapters open at :class:`ChapterStart` (its headings are then ordinary spoken paragraphs, and a
    chapter whose text does not start with a heading gets its title read first)."""

    def __init__(self, language: str, *, explicit_chapters: bool) -> None:
        self.language = language
        self.explicit = explicit_chapters
        self.chapters: list[Chapter] = []
        self.directives: list[VoiceDirective] = []
        self.warnings: list[str] = []
        self.title: str | None = None
        self.paragraphs: list[_Paragraph] = []
        self.voice: str | None = None
        self.untitled_start = False  # an EPUB chapter whose title is not yet spoken
        self.speaker: str | None = None  # a speaker directive waiting for its paragraph
        self.speakers: dict[tuple[int, int], str] = {}

    def add(self, event: Event) -> None:
        if isinstance(event, VoiceDirective) and event.kind == "speaker":
            self.speaker = event.name
        elif isinstance(event, VoiceDirective):
            self.directives.append(event)
            self.voice = event.voice
        elif isinstance(event, ChapterStart):
            self._close()
            self.title = " ".join(event.title.split()) or None
            self.untitled_start = self.title is not None and _speakable(self.title)
        elif isinstance(event, Pause):
            self._pause(event.seconds)
        elif isinstance(event, Speech):
            self._speech(event)
        else:
            self._block(event)

    def finish(self) -> list[Chapter]:
        self._close()
        return self.chapters

    def _block(self, block: Block) -> None:
        text = " ".join(block.text.split())
        if not _speakable(text):
            return
        if block.heading and not self.explicit:
            self._close()
            words = (part for part in split_breaks(text) if isinstance(part, str))
            self.title = " ".join(" ".join(words).split())
        for part in split_breaks(text):
            if isinstance(part, Pause):
                self._pause(part.seconds)
            elif _speakable(part):
                self._paragraph(part, block.heading, self.voice)

    def _speech(self, speech: Speech) -> None:
        """An SSML paragraph: one paragraph per run of words with one voice and rate, pauses between."""
        run: list[Piece | SentenceEnd] = []
        key: tuple[str | None, float | None] | None = None
        for item in speech.items:
            if isinstance(item, Words):
                item_key = (item.voice or self.voice, item.rate)
                if key is not None and item_key != key and run:
                    self._pieces(run, key, speech.heading)
                    run = []
                key = item_key
                run.extend(item.pieces)
            elif isinstance(item, SentenceEnd):
                run.append(item)
            else:
                if run and key is not None:
                    self._pieces(run, key, speech.heading)
                    run = []
                self._pause(item.seconds)
        if run and key is not None:
            self._pieces(run, key, speech.heading)
        if self.paragraphs and self.paragraphs[-1].style.pause is None:
            self._join(False)

    def _pieces(
        self, run: list[Piece | SentenceEnd], key: tuple[str | None, float | None], heading: bool
    ) -> None:
        sentences: list[str] = []
        segment: list[Piece] = []
        for item in [*run, SentenceEnd()]:
            if isinstance(item, Piece):
                segment.append(item)
            elif segment:
                sentences.extend(_split_pieces(segment, self.language))
                segment = []
        if sentences and any(_speakable(s) for s in sentences):
            voice, rate = key
            self._add(_Paragraph(tuple(sentences), voice, Style(rate=rate, joined=True), heading))

    def _paragraph(self, text: str, heading: bool, voice: str | None) -> None:
        sentences = (text,) if heading else tuple(split_sentences(text, self.language))
        self._add(_Paragraph(sentences, voice, _PLAIN, heading))

    def _add(self, paragraph: _Paragraph) -> None:
        if self.untitled_start:
            self.untitled_start = False
            if not paragraph.heading and self.title is not None:
                self.paragraphs.append(_Paragraph((self.title,), self.voice, _PLAIN, True))
        if self.speaker is not None and not paragraph.heading:
            self.speakers[(len(self.chapters), len(self.paragraphs))] = self.speaker
            self.speaker = None
        self.paragraphs.append(paragraph)

    def _join(self, joined: bool) -> None:
        last = self.paragraphs[-1]
        last.style = Style(last.style.rate, last.style.pause, joined)

    def _pause(self, seconds: float) -> None:
        """Silence after the last paragraph so far (this chapter's or the one before); breaks in a row
        add up. A break before the first words has nothing to follow: it is ignored, with a warning."""
        target = self.paragraphs[-1] if self.paragraphs else None
        if target is None:
            if not self.chapters:
                self.warnings.append("a break before the first words of the script is ignored")
                return
            self._pause_after_chapter(seconds)
            return
        total = (target.style.pause or 0.0) + seconds
        if total > MAX_BREAK_SECONDS:
            raise ScriptError(f"breaks in a row add up to more than {MAX_BREAK_SECONDS:g} s")
        target.style = Style(target.style.rate, round(total, 3), True)

    def _pause_after_chapter(self, seconds: float) -> None:
        previous = self.chapters[-1]
        styles = list(previous.styles or [_PLAIN] * len(previous.paragraphs))
        last = styles[-1]
        total = (last.pause or 0.0) + seconds
        if total > MAX_BREAK_SECONDS:
            raise ScriptError(f"breaks in a row add up to more than {MAX_BREAK_SECONDS:g} s")
        styles[-1] = Style(last.rate, round(total, 3), last.joined)
        self.chapters[-1] = Chapter(
            previous.title,
            previous.paragraphs,
            previous.voices,
            tuple(styles),
            previous.headings,
            previous.speakers,
        )

    def _close(self) -> None:
        if self.untitled_start and self.title is not None and not self.paragraphs:
            self.warnings.append(f"chapter {self.title!r} has no text")
        self.untitled_start = False
        if self.paragraphs:
            paragraphs = self.paragraphs
            last = paragraphs[-1]
            if last.style.joined and last.style.pause is None:
                last.style = Style(last.style.rate, None, False)
            self.chapters.append(
                Chapter(
                    self.title,
                    tuple(p.sentences for p in paragraphs),
                    tuple(p.voice for p in paragraphs),
                    tuple(p.style for p in paragraphs),
                    frozenset(i for i, p in enumerate(paragraphs) if p.heading),
                )
            )
        self.title, self.paragraphs = None, []


def _split_pieces(pieces: list[Piece], language: str) -> list[str]:
    """Sentences of a run of pieces: the written text split like any other, except that no sentence ends
    inside a piece that markup shaped. Sentences with such pieces carry them (see :class:`Sentence`)."""
    raw = "".join(piece.text for piece in pieces)
    written, where = _collapse(raw)
    spans: list[tuple[int, int, Piece]] = []  # where each shaped piece lies in ``written``
    position = 0
    for piece in pieces:
        first, last = position, position + len(piece.text)
        position = last
        inner = piece.text.strip()
        if not _shaped(piece) or not inner:
            continue
        lead = len(piece.text) - len(piece.text.lstrip())
        start = where[first + lead]
        spans.append((start, start + len(" ".join(inner.split())), piece))
    if not spans:
        return [s for s in split_sentences(written, language) if s]
    bounds = _sentence_bounds(split_sentences(written, language))
    bounds = [b for b in bounds if not any(a < b < e for a, e, _ in spans)]
    sentences: list[str] = []
    start = 0
    for end in [*bounds, len(written)]:
        if written[start:end].strip(" "):
            sentences.append(_shaped_sentence(written, start, end, spans))
        start = end
    return sentences


def _collapse(raw: str) -> tuple[str, list[int]]:
    """``raw`` with whitespace runs collapsed to single spaces and stripped, and for each index of
    ``raw`` its index in the result."""
    out: list[str] = []
    where = [0] * (len(raw) + 1)
    space = True  # leading whitespace is dropped
    for index, character in enumerate(raw):
        if character.isspace():
            if not space:
                out.append(" ")
                space = True
            where[index] = len(out)
        else:
            where[index] = len(out)
            out.append(character)
            space = False
    where[len(raw)] = len(out)
    written = "".join(out).rstrip(" ")
    return written, [min(w, len(written)) for w in where]


def _shaped(piece: Piece) -> bool:
    return piece.say is not None or piece.interpret_as is not None or piece.phoneme is not None


def _sentence_bounds(sentences: list[str]) -> list[int]:
    """Where each sentence but the last ends in their single-space join."""
    bounds: list[int] = []
    position = 0
    for sentence in sentences[:-1]:
        position += len(sentence)
        bounds.append(position)
        position += 1
    return bounds


def _shaped_sentence(written: str, start: int, end: int, spans: list[tuple[int, int, Piece]]) -> Sentence:
    """The sentence ``written[start:end]`` (stripped) with its pieces: plain text between the shaped
    pieces that lie in it."""
    while start < end and written[start] == " ":
        start += 1
    while end > start and written[end - 1] == " ":
        end -= 1
    pieces: list[Piece] = []
    position = start
    for a, b, piece in spans:
        if b <= start or a >= end:
            continue
        if a > position:
            pieces.append(Piece(written[position:a]))
        pieces.append(Piece(written[a:b], piece.say, piece.interpret_as, piece.format, piece.phoneme))
        position = b
    if position < end:
        pieces.append(Piece(written[position:end]))
    text = written[start:end]
    return Sentence(text, tuple(pieces) if any(_shaped(p) for p in pieces) else None)

"""The events every script reader (plain, Markdown, SSML, EPUB) produces, in document order (pure).

:mod:`worker.script.parse` assembles them into chapters of paragraphs of sentences. Readers say what the
text is; they do not split sentences, normalise numbers or apply lexicons (that happens once, later, the
same way for every format).

- :class:`Block` is a paragraph (or heading) of plain written text.
- :class:`Speech` is a paragraph whose parts markup has shaped (SSML): voice and rate changes, text
  spoken as something else (``sub``, ``say-as``), pronunciations, forced sentence ends and breaks.
- :class:`Pause` is explicit silence between two paragraphs; it replaces the pause that would fall there.
- :class:`ChapterStart` opens a chapter with a title (EPUB: from the table of contents). Markdown and
  plain scripts open chapters with heading blocks instead.
- :class:`~worker.script.voices.VoiceDirective` switches the voice of the blocks that follow.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

# The longest single break a script may ask for, and the longest run of breaks between two words.
MAX_BREAK_SECONDS = 10.0


class Block(NamedTuple):
    """One unit of written text in document order: a heading or a paragraph (raw, not yet normalised)."""

    heading: bool
    text: str


@dataclass(frozen=True)
class ChapterStart:
    """A chapter boundary with the chapter's title (as the table of contents gives it)."""

    title: str


@dataclass(frozen=True)
class Pause:
    """Silence of exactly ``seconds`` (0 < seconds <= MAX_BREAK_SECONDS), where the script asks for it."""

    seconds: float


@dataclass(frozen=True)
class Piece:
    """Written text and, when markup fixes it, what is said instead.

    ``say``: spoken exactly like this (SSML ``sub alias``): no lexicon, no normalisation.
    ``interpret_as``/``format``: SSML ``say-as``; the normaliser says the text that way
    (:func:`worker.script.normalise.say_as`), and no lexicon applies to it.
    ``phoneme``: an IPA pronunciation (SSML ``phoneme``), for engines that take phonemes.
    ``text`` is always what was written: it is kept for subtitles and the preview.
    """

    text: str
    say: str | None = None
    interpret_as: str | None = None
    format: str | None = None
    phoneme: str | None = None


@dataclass(frozen=True)
class SentenceEnd:
    """A sentence ends here whatever the sentence splitter would say (SSML ``</s>``)."""


@dataclass(frozen=True)
class Words:
    """Pieces read in order by one voice at one rate.

    ``voice``: a voice reference (id or name) as written, None for the job's own voice.
    ``rate``: a multiplier of the voice's speaking rate (SSML ``prosody rate``), None for 1.
    """

    pieces: tuple[Piece, ...]
    voice: str | None = None
    rate: float | None = None


@dataclass(frozen=True)
class Speech:
    """A paragraph built from markup: words, forced sentence ends and pauses, in order."""

    items: tuple[Words | SentenceEnd | Pause, ...]
    heading: bool = False


@dataclass(frozen=True)
class BookInfo:
    """What a script says about itself (EPUB OPF metadata, Markdown front matter); None where silent."""

    title: str | None = None
    author: str | None = None
    language: str | None = None

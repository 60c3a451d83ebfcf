"""What the engine reads for each written sentence: markup first, then lexicons, then normalisation (pure).

Order and precedence, per sentence:

1. Pieces that markup shaped are said as the markup says (SSML ``sub alias``: the alias; ``say-as``:
   the normaliser's reading of that kind); no lexicon or normalisation rule touches them.
2. The rest goes through the pronunciation lexicons: the job's, in the order it names them, then the
   reading voice's own defaults. The first entry that matches at a position wins.
3. Then through the normaliser of the script's language (numbers, dates, units, abbreviations...),
   headings with Roman numerals read as numbers ("Chapter IV").

The written text is never changed: chunks keep it beside what is read (subtitles, the preview).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from .chunking import Said
from .document import Piece
from .errors import ScriptError
from .lexicon import CompiledLexicon
from .normalise import Fired, normalise, say_as
from .parse import Chapter


@dataclass(frozen=True)
class Speaker:
    """Reads sentences for :func:`~worker.script.chunking.make_chunks`.

    ``lexicons`` maps a voice reference as the script wrote it (None: the job's own voice) to the
    lexicons that apply to that voice's paragraphs; voices it does not name get ``lexicons[None]``.
    No engine of Tome's takes IPA phonemes yet, so an SSML ``phoneme`` is refused naming the engine
    (lexicon entries with only a phoneme are skipped by the lexicon, and the preview says so).
    """

    language: str
    lexicons: Mapping[str | None, CompiledLexicon] = field(default_factory=dict)
    engine: str = "the engine"

    def __call__(self, chapter: Chapter, paragraph: int, sentence: str) -> Said:
        heading = paragraph in chapter.headings
        voice = chapter.voice_of(paragraph)
        lexicon = self.lexicons.get(voice, self.lexicons.get(None))
        pieces = getattr(sentence, "pieces", None) or (Piece(str(sentence)),)
        spoken: list[str] = []
        fired: list[Fired] = []
        plain: list[str] = []
        for piece in pieces:
            if piece.say is None and piece.interpret_as is None and piece.phoneme is None:
                plain.append(piece.text)
                continue
            spoken.append(self._plain("".join(plain), lexicon, heading, fired))
            plain = []
            spoken.append(self._shaped(piece, fired))
        spoken.append(self._plain("".join(plain), lexicon, heading, fired))
        return Said(" ".join("".join(spoken).split()), tuple(fired))

    def _plain(self, text: str, lexicon: CompiledLexicon | None, heading: bool, fired: list[Fired]) -> str:
        if not text.strip():
            return text
        lead = text[: len(text) - len(text.lstrip())]
        trail = text[len(text.rstrip()) :]
        if lexicon is not None:
            text, entries = lexicon.apply(text)
            fired.extend(entries)
        result = normalise(text.strip(), self.language, heading=heading)
        fired.extend(result.fired)
        return f"{lead}{result.text}{trail}"

    def _shaped(self, piece: Piece, fired: list[Fired]) -> str:
        if piece.say is not None:
            fired.append(Fired("sub", piece.text, piece.say))
            return piece.say  # the spaces around it are in the neighbouring pieces, as written
        if piece.interpret_as is not None:
            try:
                said = say_as(piece.text, piece.interpret_as, piece.format, self.language)
            except ValueError as exc:
                raise ScriptError(f"say-as {piece.interpret_as} cannot read {piece.text!r}: {exc}") from exc
            fired.append(Fired(f"say-as:{piece.interpret_as}", piece.text, said))
            return said
        raise ScriptError(
            f"{self.engine} cannot take phonemes (phoneme {piece.phoneme!r} for {piece.text!r}): "
            'use <sub alias="..."> with a respelling instead'
        )

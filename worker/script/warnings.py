"""Warnings about a planned script, for the preview: what a careful producer wants to check before
spending hours of GPU time (pure)."""

from __future__ import annotations

import unicodedata
from collections import Counter
from collections.abc import Sequence

from .chunking import ChunkSpec
from .parse import Chapter

# Unicode categories no engine reads aloud: other symbols (emoji, dingbats), private use, unassigned,
# surrogates. Letters, digits, punctuation and the symbols the normaliser reads ($, %, ...) are fine.
_UNSAYABLE = frozenset({"So", "Co", "Cn", "Cs"})
# Individual warnings of one kind listed before the rest are only counted.
MAX_LISTED = 10


def plan_warnings(chapters: Sequence[Chapter], specs: Sequence[ChunkSpec], max_chunk_chars: int) -> list[str]:
    """Sentences cut mid-way, characters the engine cannot say, and chapters with nothing but a title."""
    return [
        *_cut_sentences(specs, max_chunk_chars),
        *_unsayable(specs),
        *_empty_chapters(chapters),
    ]


def _cut_sentences(specs: Sequence[ChunkSpec], max_chunk_chars: int) -> list[str]:
    cut = [spec for spec in specs if spec.mid_sentence]
    found = [
        f"chunk {spec.seq} (chapter {spec.chapter}) ends mid-sentence: the sentence is longer than the "
        f"engine's {max_chunk_chars} characters and is split at a clause or word boundary"
        for spec in cut[:MAX_LISTED]
    ]
    if len(cut) > MAX_LISTED:
        found.append(f"... and {len(cut) - MAX_LISTED} more chunks that end mid-sentence")
    return found


def _unsayable(specs: Sequence[ChunkSpec]) -> list[str]:
    counts: Counter[str] = Counter()
    first: dict[str, int] = {}
    for spec in specs:
        for character in spec.text:
            if not character.isascii() and unicodedata.category(character) in _UNSAYABLE:
                counts[character] += 1
                first.setdefault(character, spec.seq)
    return [
        f"the engine cannot say {character!r} (U+{ord(character):04X}): {count} in the script, first in "
        f"chunk {first[character]}"
        for character, count in counts.most_common(MAX_LISTED)
    ]


def _empty_chapters(chapters: Sequence[Chapter]) -> list[str]:
    return [
        f"chapter {index} ({chapter.title!r}) has no text but its title"
        for index, chapter in enumerate(chapters)
        if chapter.title is not None and len(chapter.headings) >= len(chapter.paragraphs)
    ][:MAX_LISTED]

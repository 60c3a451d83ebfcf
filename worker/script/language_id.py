"""Which language a script is written in, to warn when it is not the job's (pure: numpy and py3langid).

A German script read with English rules is split, normalised and spoken as English, silently; the preview
and the job say so instead. The identifier is py3langid (langid.py's model: naive Bayes over byte n-grams,
97 languages, its model a 4.6 MB npz without pickle), loaded once per process on first use (~0.7 s of
CPU). Its cost on the text is bounded: at most :data:`SAMPLES` pieces of :data:`SAMPLE_CHARS` characters,
from the start, the middle and the end, are classified, however long the script.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Sequence
from typing import Any

from .parse import Chapter

SAMPLES = 3
SAMPLE_CHARS = 500
# Fewer letters than this say too little for a verdict (a title, a line of dialogue): no warning.
MIN_LETTERS = 80
# The identifier's normalised probability a verdict needs: on clean prose in another language it is
# 0.99 and more; on a few English sentences it drops to 0.8, which is not evidence enough to warn.
MIN_PROBABILITY = 0.9

NAMES = {
    "ar": "Arabic", "ca": "Catalan", "cs": "Czech", "da": "Danish", "de": "German", "el": "Greek",
    "en": "English", "es": "Spanish", "fi": "Finnish", "fr": "French", "he": "Hebrew", "hi": "Hindi",
    "hu": "Hungarian", "it": "Italian", "ja": "Japanese", "ko": "Korean", "nl": "Dutch", "no": "Norwegian",
    "nb": "Norwegian", "pl": "Polish", "pt": "Portuguese", "ro": "Romanian", "ru": "Russian",
    "sk": "Slovak", "sv": "Swedish", "tr": "Turkish", "uk": "Ukrainian", "zh": "Chinese",
}  # fmt: skip

_lock = threading.Lock()


@functools.cache
def _identifier() -> Any:
    with _lock:
        from py3langid.langid import MODEL_FILE, LanguageIdentifier

        return LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)


def sample(texts: Sequence[str]) -> str:
    """At most SAMPLES x SAMPLE_CHARS characters of ``texts`` (in order), from its start, middle and end."""
    whole_length = sum(len(t) + 1 for t in texts)
    if whole_length <= SAMPLES * SAMPLE_CHARS:
        return " ".join(texts)
    wanted = [0, whole_length // 2 - SAMPLE_CHARS // 2, whole_length - SAMPLE_CHARS]
    pieces: list[str] = []
    position = 0
    for text in texts:  # one pass, joining only the texts that overlap a wanted window
        end = position + len(text) + 1
        for start in wanted:
            if position < start + SAMPLE_CHARS and start < end:
                pieces.append(text[max(0, start - position) : start + SAMPLE_CHARS - position])
        position = end
    return " ".join(pieces)


def identify(texts: Sequence[str]) -> tuple[str, float] | None:
    """The language ``texts`` are written in (ISO 639-1) and its probability, from a bounded sample; None
    when the sample has too few letters to tell."""
    text = sample(texts)
    if sum(character.isalpha() for character in text) < MIN_LETTERS:
        return None
    language, probability = _identifier().classify(text)
    return str(language), float(probability)


def name(code: str) -> str:
    return f"{NAMES[code]} ({code})" if code in NAMES else code


def language_warning(texts: Sequence[str], language: str) -> str | None:
    """A warning when ``texts`` are plainly written in another language than ``language`` (a tag such as
    "en-GB"); None when they are in it, or when the sample cannot tell."""
    found = identify(texts)
    expected = language.replace("_", "-").split("-")[0].lower()
    if found is None or found[1] < MIN_PROBABILITY or found[0] == expected:
        return None
    if {found[0], expected} <= {"no", "nb", "nn"}:
        return None
    return (
        f"the script reads as {name(found[0])}, but the job's language is {name(expected)}: it will be "
        f'split, normalised and spoken with {NAMES.get(expected, expected)} rules; set "language": '
        f'"{found[0]}" (or use a voice in that language) if the script is {NAMES.get(found[0], found[0])}'
    )


def script_language_warnings(chapters: Sequence[Chapter], language: str) -> list[str]:
    """:func:`language_warning` over the written sentences of ``chapters`` (a list: empty or one)."""
    found = language_warning([s for c in chapters for p in c.paragraphs for s in p], language)
    return [found] if found else []

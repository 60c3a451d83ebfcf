"""Sentence segmentation with pysbd, hardened so that no text is ever lost or split mid-word."""

from __future__ import annotations

import threading
from functools import cache
from typing import Any

import pysbd
from pysbd.languages import LANGUAGE_CODES

# ``Segmenter.segment`` keeps the text it works on in an attribute, so one instance must not be used by
# two threads at once.
_LOCK = threading.Lock()
_WINDOW = 2000  # characters handed to pysbd at once (see split_sentences)


def _language_code(language: str) -> str:
    """The pysbd language for ``language`` ("en", "de-AT", "pt_BR"...), falling back to "en"."""
    code = language.strip().lower().replace("_", "-").split("-", 1)[0]
    return code if code in LANGUAGE_CODES else "en"


@cache
def _segmenter(code: str) -> Any:
    """One cached non-destructive segmenter per pysbd language code."""
    return pysbd.Segmenter(language=code, clean=False)


def split_sentences(text: str, language: str = "en") -> list[str]:
    """Split ``text`` into sentences (stripped, whitespace collapsed to single spaces, never empty).

    Uses pysbd (abbreviations, decimals, ellipses, initials...); languages pysbd does not know fall back
    to English rules. ``" ".join(result)`` is always exactly ``" ".join(text.split())``: where pysbd drops
    or mangles text (it can on unusual input), the affected span stays attached to a neighbouring sentence.
    """
    normalised = " ".join(text.split())
    segmenter = _segmenter(_language_code(language))
    sentences: list[str] = []
    start, window = 0, _WINDOW
    # pysbd is quadratic in the number of sentences it is given, so long text goes through a sliding
    # window cut at a space: every sentence but the window's last (maybe truncated) one is final.
    while start + window < len(normalised):
        end = normalised.rfind(" ", start, start + window + 1)
        piece = normalised[start:end] if end > start else ""
        found = _cut(piece, _segment(segmenter, piece))
        if len(found) < 2:  # no sentence boundary inside the window: widen it
            window *= 2
            continue
        sentences.extend(found[:-1])
        start, window = end - len(found[-1]), _WINDOW
    rest = normalised[start:]
    sentences.extend(_cut(rest, _segment(segmenter, rest)))
    return sentences


def _segment(segmenter: Any, text: str) -> list[str]:
    """pysbd's sentences for ``text``; none (text kept whole) if pysbd fails on it."""
    if not text:
        return []
    try:
        with _LOCK:
            return [str(segment) for segment in segmenter.segment(text)]
    except Exception:  # a pysbd bug on odd input must not fail a whole script
        return []


def _cut(text: str, segments: list[str]) -> list[str]:
    """Cut ``text`` (single-spaced) after each segment found in order, but only at spaces."""
    bounds: list[int] = []
    position = 0
    for raw in segments:
        segment = raw.strip()
        start = text.find(segment, position) if segment else -1
        if start < 0:
            continue
        position = start + len(segment)
        if position < len(text) and text[position] == " ":
            bounds.append(position)
    bounds.append(len(text))
    sentences: list[str] = []
    previous = 0
    for bound in bounds:
        sentence = text[previous:bound].strip()
        if sentence:
            sentences.append(sentence)
        previous = bound
    return sentences

"""Sentence segmentation with pysbd, hardened so that no text is ever lost or split mid-word, in time
linear in the length of the text."""

from __future__ import annotations

import re
from functools import cache
from typing import Any

import pysbd
from pysbd.languages import LANGUAGE_CODES

from worker.script import pysbd_patterns

# The most characters pysbd is given at once. pysbd's time grows faster than linearly with the length of
# the text it is given (on some text, such as runs of abbreviations, quadratically), so long text goes
# through windows of at most this size (see split_sentences).
_WINDOW = 2000
# Where a sentence may end when pysbd finds no boundary: a space after terminal punctuation, closing quotes
# and brackets allowed in between.
_FALLBACK = re.compile("[.!?\u2026\u3002\uff01\uff1f][\"')\\]}\u00bb\u2019\u201d]* ")


def language_code(language: str) -> str:
    """The pysbd language for ``language`` ("en", "de-AT", "pt_BR"...), falling back to "en"."""
    code = language.strip().lower().replace("_", "-").split("-", 1)[0]
    return code if code in LANGUAGE_CODES else "en"


@cache
def segmenter_for(code: str) -> Any:
    """One cached non-destructive segmenter per pysbd language code, its patterns compiled once each
    (worker.script.pysbd_patterns)."""
    pysbd_patterns.install()
    return pysbd.Segmenter(language=code, clean=False)


def split_sentences(text: str, language: str = "en") -> list[str]:
    """Split ``text`` into sentences (stripped, whitespace collapsed to single spaces, never empty).

    Uses pysbd (abbreviations, decimals, ellipses, initials...); languages pysbd does not know fall back
    to English rules. ``" ".join(result)`` is always exactly ``" ".join(text.split())``: where pysbd drops
    or mangles text (it can on unusual input), the affected span stays attached to a neighbouring sentence.
    Sentences end only at spaces.

    pysbd is given at most ``_WINDOW`` characters at a time, and in all at most four times the length of
    the text plus one window, so the time taken is linear in the length of the text. Only sentences longer
    than the window pay for that: they are cut where pysbd finds no boundary (see :func:`_step`).
    """
    normalised = " ".join(text.split())
    segmenter = segmenter_for(language_code(language))
    sentences: list[str] = []
    start, short = 0, False
    while len(normalised) - start > _WINDOW:
        start, short = _step(normalised, start, short, segmenter, sentences)
    rest = normalised[start:]
    sentences.extend(cut_at_segments(rest, _segment(segmenter, rest)))
    return sentences


def _step(text: str, start: int, short: bool, segmenter: Any, sentences: list[str]) -> tuple[int, bool]:
    """Append the sentences that end in the window of ``text`` (single-spaced) from ``start``, a word's first
    character; return where the next window starts and whether this one moved less than half a window.

    Every sentence pysbd ends in the window is final but the last, which may run on beyond it: the next
    window starts with it, so that pysbd sees it whole. If pysbd ends no sentence in the window, or if
    this window would move less than half a window on right after one that did, the window is cut at a
    fallback boundary in its second half instead: the last space after terminal punctuation, else the
    window's last space (in the first half only if the next word is longer than half a window, and then
    the next window moves past that word). So a window that moves less than half a window on is either
    shorter than half a window or follows one that moved at least that far (or is the first): pysbd is
    given at most four times the text, plus one window. A word longer than the window ends a sentence and
    is not given to pysbd: no sentence can end inside it.
    """
    end = text.rfind(" ", start, start + _WINDOW + 1)
    if end < 0:  # the window is one word
        end = text.find(" ", start + _WINDOW)
        end = len(text) if end < 0 else end
        sentences.append(text[start:end])
        return end + 1, False
    piece = text[start:end]
    found = cut_at_segments(piece, _segment(segmenter, piece))
    half = _WINDOW // 2
    last = len(piece) - len(found[-1])  # where pysbd's last sentence starts; 0 if it ended none
    if last and (last >= half or not short):
        sentences.extend(found[:-1])
        return start + last, last < half
    cut = len(piece)
    for match in _FALLBACK.finditer(piece, max(last, half)):
        cut = match.end() - 1
    sentences.extend(found[:-1])
    sentences.append(piece[last:cut])
    return start + cut + 1, cut + 1 < half


def _segment(segmenter: Any, text: str) -> list[str]:
    """pysbd's sentences for ``text``; none (text kept whole) if pysbd fails on it.

    This is ``segmenter.segment(text)`` without its final step, which finds each sentence in ``text`` by
    searching from the start of the text for every sentence (quadratic in their number);
    :func:`cut_at_segments` finds them in one pass instead. It also leaves the shared segmenter untouched
    (``segment`` keeps the text in an attribute), so threads need no lock.
    """
    if not text:
        return []
    try:
        return [str(segment) for segment in segmenter.processor(text).process()]
    except Exception:  # a pysbd bug on odd input must not fail a whole script
        return []


def cut_at_segments(text: str, segments: list[str]) -> list[str]:
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
